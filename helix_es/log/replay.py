"""Replay readers: every namespace of a log, read from a checkpoint on, in large batches, while it is written.

A rebuild (`projectors.rebuild`) folds what these yield into a new target. `KafkaSource` uses no
consumer group: it assigns every partition of every `<prefix>.<namespace>` topic itself;
`helix_es.log.group_replay.GroupSource` reads the partitions a rebuild's consumer group assigns
it (rebuild processes on several machines);
`EmbeddedSource` reads every namespace file of an embedded log without its owner's lock
(`helix_es.log.frames.TailReader`). Both can read a share of the work (`only`: some partitions)
or a slice of the sessions (`slice = (k, n)`: those whose crc32(session id) % n == k).
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from helix_es.log import kafka_clients as clients
from helix_es.log.check import Checker
from helix_es.log.codec import Codec, session_id_of
from helix_es.log.frames import FRAME, TailReader
from helix_es.log.kafka_clients import Consumer, TopicPartition
from helix_es.model import names
from helix_es.model.errors import LogCorrupted
from helix_es.model.events import Event, Record, record_at

log = logging.getLogger(__name__)

DEFAULT_BATCH = 5000  # events per batch (a rebuild's atomic write): big enough that a write costs little per event
FETCH_BYTES = 4 << 20  # per partition and fetch
DECODE_SLICE = 1000  # records decoded between looks at the write in flight (~10 ms)
# Caught up: read to the ends seen last, and a second look finds at most this many more. Under steady
# writes "none more" may never come; the few left are folded after the switch (the hand-over, or the
# serving process's own catch-up), never lost: the target's checkpoints say where it stands.
CAUGHT_UP_LAG = 1000

Checkpoint = Callable[[str, int], Awaitable["int | None"]]  # (topic, partition) -> last offset done


class Check(Protocol):
    """Raises for a record to skip (`helix_es.log.check.Checker`); `checked`: its message passed Message()'s
    rules already (`Codec.read`)."""

    def __call__(self, event: Event, topic: str, key: bytes | None, checked: bool = False, /) -> None: ...


class Source(Protocol):
    read_count: int
    skipped: int
    slice: tuple[int, int]

    async def start(self) -> None:
        """Find the partitions and where each starts (its checkpoint + 1)."""
        ...

    def lag(self) -> int: ...

    def remaining(self) -> dict[tuple[str, int], int]:
        """After `start`: about how many records each (topic, partition) has left to read."""
        ...

    def reached(self) -> list[tuple[str, int, int]]:
        """Where reading got to: (topic, partition, next offset) for each partition read."""
        ...

    def read(self, finished: Callable[[], Awaitable[bool]], *, at_end: bool) -> AsyncIterator[list[Record]]:
        """Batches of one topic-partition each. With `at_end`, `finished` is asked once everything seen
        is read; else about twice a second."""
        ...

    async def namespaces(self) -> list[str]: ...

    async def close(self) -> None: ...


class KafkaSource:
    """Every `<prefix>.<namespace>` topic (of `namespaces`, names or globs, if given), every partition, from a
    checkpoint on: no consumer group.

    `check` is applied to every decoded record; one it raises for is skipped (counted in `skipped`),
    as the projector dead-letters it.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic_prefix: str,
        checkpoint: Checkpoint,
        *,
        check: Check,
        batch: int = DEFAULT_BATCH,
        codec: Codec | None = None,
        only: Sequence[tuple[str, int]] | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> None:
        self.only = None if only is None else {tuple(tp) for tp in only}  # a worker's share of the partitions
        self.slice = (0, 1)  # (k, n): only the sessions whose crc32(id) % n == k (session views' workers)
        self.prefix = topic_prefix
        self.pattern = re.compile(names.topic_pattern(self.prefix, namespaces))  # the view's namespaces only
        self.checkpoint = checkpoint
        self.batch = batch
        self.codec = codec or Codec()
        self.check = check
        self.consumer = self._consumer(bootstrap_servers)
        self.bootstrap_servers = bootstrap_servers
        self.admin: Any = None
        self.positions: dict[Any, int] = {}  # TopicPartition -> next offset to read
        self.ends: dict[Any, int] = {}
        self.read_count = 0
        self.skipped = 0
        self._started = False

    def _consumer(self, bootstrap_servers: str, **group: Any) -> Consumer:
        return clients.consumer(
            bootstrap_servers,
            max_partition_fetch_bytes=FETCH_BYTES,
            fetch_max_bytes=16 * FETCH_BYTES,
            fetch_max_wait_ms=100,
            **group,
        )

    async def start(self) -> None:
        await self.consumer.start()
        self._started = True
        await self._discover()
        await self._refresh_ends()

    async def _topics(self) -> dict[str, list[int]]:
        """Every namespace topic of the deployment (of `namespaces`) and its partitions."""
        if self.admin is None:
            self.admin = clients.admin(self.bootstrap_servers)
            await self.admin.start()
        topics = sorted(t for t in await self.admin.list_topics() if self.pattern.fullmatch(t))
        if not topics:
            return {}
        described = await self.admin.describe_topics(topics)
        return {d["topic"]: sorted(p["partition"] for p in d["partitions"]) for d in described if d["error_code"] == 0}

    async def _discover(self) -> None:
        """Assign every partition of every namespace topic; new ones start at their checkpoint + 1."""
        found = [
            TopicPartition(t, p)
            for t, parts in (await self._topics()).items()
            for p in parts
            if self.only is None or (t, p) in self.only
        ]
        new = [tp for tp in found if tp not in self.positions]
        if not new:
            return
        for tp in new:
            done = await self.checkpoint(tp.topic, tp.partition)
            self.positions[tp] = 0 if done is None else done + 1
        self.consumer.assign(list(self.positions))
        for tp, offset in self.positions.items():  # assign() forgets positions: set them all again
            self.consumer.seek(tp, offset)

    async def _refresh_ends(self) -> None:
        if self.positions:
            self.ends = dict(await self.consumer.end_offsets(list(self.positions)))

    def _read_all(self) -> bool:
        return all(self.positions[tp] >= end for tp, end in self.ends.items())

    def lag(self) -> int:
        return sum(max(0, end - self.positions.get(tp, 0)) for tp, end in self.ends.items()) // self.slice[1]

    def remaining(self) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): end - self.positions[tp] for tp, end in self.ends.items()}

    def reached(self) -> list[tuple[str, int, int]]:
        return [(tp.topic, tp.partition, offset) for tp, offset in self.positions.items()]

    async def namespaces(self) -> list[str]:
        return sorted(names.namespace_of(t, self.prefix) for t in await self._topics())

    def _decode(self, topic: str, partition: int, messages: Sequence[Any]) -> list[Record]:
        read, check = self.codec.read, self.check
        k, n = self.slice
        out = []
        mine = skipped = 0  # counted here, added once: attribute writes per record add up
        for m in messages:
            if n > 1 and zlib.crc32(m.key or b"") % n != k:
                continue  # another worker's session (the key is the session id)
            mine += 1
            key = m.key
            try:
                event, checked = read(m.value)
                check(event, topic, key, checked)
            except Exception:  # the projector dead-letters it: the view never had it
                skipped += 1
                continue
            out.append(record_at(event, topic, partition, m.offset))
        self.read_count += mine
        self.skipped += skipped
        return out

    async def read(self, finished: Callable[[], Awaitable[bool]], *, at_end: bool) -> AsyncIterator[list[Record]]:
        next_look = time.monotonic() + 0.5
        quiet = 0
        while True:
            if at_end and self._read_all():
                await self._discover()
                await self._refresh_ends()
                if self.lag() <= CAUGHT_UP_LAG and await finished():
                    return
                continue
            if not at_end and time.monotonic() >= next_look:
                next_look = time.monotonic() + 0.5
                if await finished():
                    return
                await self._discover()
                await self._refresh_ends()
            if not self.positions:  # no topic yet: a consumer with nothing assigned would wait for ever
                await asyncio.sleep(0.2)
                continue
            # Up to a batch per partition: getmany's limit is for all of them together.
            limit = self.batch * min(len(self.positions), 16)
            batches = await self.consumer.getmany(timeout_ms=200, max_records=limit)
            quiet = 0 if batches else quiet + 1
            for tp, messages in batches.items():
                if not messages:
                    continue
                self.positions[tp] = messages[-1].offset + 1
                records: list[Record] = []
                for start in range(0, len(messages), DECODE_SLICE):
                    records += self._decode(tp.topic, tp.partition, messages[start : start + DECODE_SLICE])
                    await asyncio.sleep(0)  # the write in flight takes its next round trip meanwhile
                if records:
                    yield records
            if quiet >= 5:  # nothing for a second: the fetcher may sit past gaps (control records)
                for tp in self.positions:
                    self.positions[tp] = max(self.positions[tp], await self.consumer.position(tp))
                quiet = 0

    async def close(self) -> None:
        if self._started:
            await self.consumer.stop()
        if self.admin is not None:
            await self.admin.close()


class EmbeddedSource:
    """Every namespace file of an embedded log (of `namespaces`, if given), from a checkpoint on, while its
    owner keeps appending.

    A well-framed record `check` refuses is skipped and counted, as on Kafka; a damaged frame is
    `LogCorrupted`, never skipped."""

    def __init__(
        self,
        path: str | Path,
        topic_prefix: str,
        checkpoint: Checkpoint,
        *,
        check: Check | None = None,
        batch: int = DEFAULT_BATCH,
        codec: Codec | None = None,
        only: Sequence[tuple[str, int]] | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> None:
        self.check = check or Checker(topic_prefix)  # the file has no keys: the envelope's session id is one
        self.only = None if only is None else {topic for topic, _ in only}  # a worker's share of the files
        self.wanted = names.namespace_matcher(namespaces) if namespaces is not None else names.NAMESPACE_RE
        self.slice = (0, 1)  # (k, n): only the sessions whose crc32(id) % n == k (session views' workers)
        self.path = Path(path).resolve()
        self.prefix = topic_prefix
        self.checkpoint = checkpoint
        self.batch = batch
        self.codec = codec or Codec()
        self.readers: dict[str, TailReader] = {}
        self.read_count = 0
        self.skipped = 0
        self._bytes = 0

    async def start(self) -> None:
        await self._discover()

    async def namespaces(self) -> list[str]:
        if not self.path.is_dir():
            return []
        head = self.prefix + "."
        found = (p.name[len(head) : -len(".log")] for p in self.path.glob(f"{head}*.log"))
        return sorted(ns for ns in found if names.NAMESPACE_RE.fullmatch(ns) and self.wanted.fullmatch(ns))

    async def _discover(self) -> None:
        for ns in await self.namespaces():
            if ns not in self.readers and (self.only is None or names.topic(ns, self.prefix) in self.only):
                topic = names.topic(ns, self.prefix)
                reader = TailReader(self.path / f"{topic}.log", topic)
                done = await self.checkpoint(topic, 0)
                reader.skip(0 if done is None else done + 1)
                self.readers[ns] = reader

    def lag(self) -> int:
        left = sum(r.remaining_bytes() for r in self.readers.values())
        per_event = self._bytes / self.read_count / self.slice[1] if self.read_count else 200
        return round(left / max(per_event, 1) / self.slice[1])

    def remaining(self) -> dict[tuple[str, int], int]:
        return {(r.topic, 0): r.remaining_bytes() // 200 for r in self.readers.values()}

    def reached(self) -> list[tuple[str, int, int]]:
        return [(r.topic, 0, r.index) for r in self.readers.values()]

    async def read(self, finished: Callable[[], Awaitable[bool]], *, at_end: bool) -> AsyncIterator[list[Record]]:
        read, check = self.codec.read, self.check
        k, n = self.slice
        next_look = time.monotonic() + 0.5
        strikes = 0
        while True:
            await self._discover()
            got_any = False
            for reader in list(self.readers.values()):
                frames = reader.frames(self.batch)
                if not frames:
                    continue
                got_any = True
                records = []
                for i, (offset, data) in enumerate(frames, 1):
                    if i % DECODE_SLICE == 0:
                        await asyncio.sleep(0)  # the write in flight takes its next round trip meanwhile
                    self._bytes += len(data) + FRAME.size
                    if n > 1:
                        session = session_id_of(data)
                        if (zlib.crc32(session) % n if session is not None else 0) != k:
                            continue  # another worker's session: not even decoded
                    self.read_count += 1
                    try:
                        event, checked = read(data)
                        check(event, reader.topic, event.session_id.encode(), checked)
                        records.append(record_at(event, reader.topic, 0, offset))
                    except Exception as exc:  # a well-framed record the projector would refuse
                        self.skipped += 1
                        log.warning("%s@%d cannot be used (%s); skipped", reader.topic, offset, exc)
                yield records
                await asyncio.sleep(0)
            if at_end and not got_any:
                await asyncio.sleep(0.05)  # "then checked again": a frame may be landing right now
                await self._discover()
                if any(r.ready() for r in self.readers.values()) and self.lag() > CAUGHT_UP_LAG:
                    continue
                damaged = [r for r in self.readers.values() if r.bad is not None]
                if damaged:
                    # A frame being written can read torn for a moment; one that stays so is damage.
                    strikes += 1
                    r = damaged[0]
                    if strikes >= 3:
                        raise LogCorrupted(
                            f"{r.path} is damaged at byte {r.bad} (frame {r.index}): "
                            "a checksum mismatch; its owner refuses to open it too"
                        )
                    for r in damaged:
                        r.bad = None
                    await asyncio.sleep(0.2)
                    continue
                strikes = 0
                if await finished():
                    return
            if not at_end and time.monotonic() >= next_look:
                next_look = time.monotonic() + 0.5
                if await finished():
                    return
            if not got_any:
                await asyncio.sleep(0.05)

    async def close(self) -> None:
        for r in self.readers.values():
            r.close()
        self.readers.clear()
