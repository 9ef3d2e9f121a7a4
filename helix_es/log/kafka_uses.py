"""What clients' reads returned, for forgetting policies in another process: topic `helix.uses.<namespace>`.

On the embedded log a view's policy worker runs in the reading process and is told of each read. On
Kafka it runs beside `helix-es project`, so a client reading a view whose policy counts uses
(`inactive_for`, `budget`) sends here what its reads returned, gathered for a second and sent as one
record per view and session; the worker reads them before each round. Uses only inform a decision:
the decision is recorded on the memory's log (`MemoryForgotten`) and a rebuild folds it, so the
topic keeps 90 days (a use older than that counts as the item's last write) and is never replayed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from aiokafka.errors import KafkaError

from helix_es.log import kafka_clients as clients
from helix_es.log.kafka_clients import TopicPartition
from helix_es.model import names
from helix_es.model.forget_events import Use

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0  # how long uses gather before they are sent
RETENTION_MS = str(90 * 24 * 3600 * 1000)
LISTED = 2_000  # messages or facts one record names


def encode(use: Use) -> bytes:
    return json.dumps(
        {"v": use.view, "s": use.session_id, "t": use.at, "w": use.whole, "m": use.messages, "f": use.facts},
        separators=(",", ":"),
    ).encode()


def decode(data: bytes) -> Use:
    d = json.loads(data)
    return Use(
        d["v"], d["s"], int(d["t"]), bool(d["w"]), tuple((str(s), int(p), int(o)) for s, p, o in d["m"]), tuple(d["f"])
    )


def gathered(uses: Sequence[Use]) -> list[Use]:
    """One use per view and session: the latest time and every item named, as often as reads named it
    (`keep: relevant` counts them; in slices of `LISTED`). Whole reads within one send count once."""
    at: dict[tuple[str, str], int] = {}
    whole: dict[tuple[str, str], bool] = {}
    messages: dict[tuple[str, str], list[tuple[str, int, int]]] = {}
    facts: dict[tuple[str, str], list[str]] = {}
    for u in uses:
        key = (u.view, u.session_id)
        at[key], whole[key] = max(at.get(key, 0), u.at), whole.get(key, False) or u.whole
        messages.setdefault(key, []).extend(u.messages)  # appended, not copied: a busy second holds many reads
        facts.setdefault(key, []).extend(u.facts)
    out = []
    for key, when in at.items():
        m, f = messages[key], facts[key]
        for i in range(0, max(len(m), len(f), 1), LISTED):
            out.append(Use(*key, when, whole[key], tuple(m[i : i + LISTED]), tuple(f[i : i + LISTED])))
    return out


class Brokers(Protocol):
    """What the uses need of the Kafka log (`helix_es.log.kafka.KafkaLog`)."""

    bootstrap_servers: str
    topic_prefix: str

    async def producer(self) -> Any: ...

    async def partitions_of(self, topic: str) -> list[int]: ...

    async def side_topic(self, topic: str, configs: Mapping[str, str]) -> None: ...


class KafkaUses:
    """Uses sent for a namespace's policies (`note`, sent within `FLUSH_SECONDS`) and read back (`read`)."""

    def __init__(self, kafka: Brokers) -> None:
        self.kafka = kafka
        self._held: dict[str, list[Use]] = {}
        self._flusher: asyncio.Task[None] | None = None
        self._topics: set[str] = set()

    def note(self, namespace: str, use: Use) -> None:
        """Hold `use` for the next send (a read never waits on it)."""
        self._held.setdefault(namespace, []).append(use)
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_soon(), name="helix uses")

    async def _flush_soon(self) -> None:
        await asyncio.sleep(FLUSH_SECONDS)
        try:
            await self.flush()
        except Exception as exc:  # a broker hiccup: those uses are lost, the policy counts the writes
            log.warning("could not send reads to the forgetting policies: %s", exc)

    async def flush(self) -> None:
        """Send what is held now."""
        held, self._held = self._held, {}
        if not held:
            return
        producer = await self.kafka.producer()
        sent = []
        for namespace, uses in held.items():
            topic = await self._topic(namespace)
            for use in gathered(uses):
                sent.append(await producer.send(topic, encode(use), key=use.session_id.encode()))
        await asyncio.gather(*sent)

    async def _topic(self, namespace: str) -> str:
        topic = names.uses_topic(namespace, self.kafka.topic_prefix)
        if topic not in self._topics:
            await self.kafka.side_topic(topic, {"retention.ms": RETENTION_MS, "retention.bytes": "-1"})
            self._topics.add(topic)
        return topic

    async def read(self, namespace: str, start: int = 0) -> tuple[list[Use], int]:
        """The uses sent since offset `start`, and where the next read starts."""
        topic = names.uses_topic(namespace, self.kafka.topic_prefix)
        if not await self.kafka.partitions_of(topic):
            return [], start
        tp = TopicPartition(topic, 0)
        consumer = clients.consumer(self.kafka.bootstrap_servers)
        await consumer.start()
        try:
            end = (await consumer.end_offsets([tp]))[tp]
            if end <= start:
                return [], start
            consumer.assign([tp])
            consumer.seek(tp, start) if start else await consumer.seek_to_beginning(tp)
            found: list[Use] = []
            while await consumer.position(tp) < end:
                for msg in (await consumer.getmany(tp, timeout_ms=1000)).get(tp, []):
                    if msg.offset < end:
                        with contextlib.suppress(ValueError, KeyError, TypeError):  # not ours: passed over
                            found.append(decode(msg.value))
            return found, end
        except KafkaError as exc:
            log.warning("could not read the reads of %s: %s", namespace, exc)
            return [], start
        finally:
            await consumer.stop()

    async def close(self) -> None:
        """Send what is held, then stop."""
        task, self._flusher = self._flusher, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        with contextlib.suppress(Exception):  # closing: the policy counts the writes of what is lost
            await self.flush()
