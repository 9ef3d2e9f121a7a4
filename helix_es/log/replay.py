"""Replay readers: every namespace of a log, read from a checkpoint on, in large batches, while it is written.

A rebuild (`projectors.rebuild`) folds what these yield into a new target. `KafkaSource` uses no
consumer group: it assigns every partition of every `<prefix>.<namespace>` topic itself;
`GroupSource` reads the partitions a rebuild's consumer group assigns it (rebuild processes on
several machines, `helix_es.model.names.rebuild_group`);
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

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from helix_es.log.check import Checker
from helix_es.log.codec import Codec, session_id_of
from helix_es.log.frames import FRAME, TailReader
from helix_es.model import names
from helix_es.model.errors import LogCorrupted
from helix_es.model.events import Event, Position, Record

log = logging.getLogger(__name__)

DEFAULT_BATCH = 5000  # events per batch (a rebuild's atomic write): big enough that a write costs little per event
FETCH_BYTES = 4 << 20  # per partition and fetch
DECODE_SLICE = 1000  # records decoded between looks at the write in flight (~10 ms)
# Caught up: read to the ends seen last, and a second look finds at most this many more. Under steady
# writes "none more" may never come; the few left are folded after the switch (the hand-over, or the
# serving process's own catch-up), never lost: the target's checkpoints say where it stands.
CAUGHT_UP_LAG = 1000

Checkpoint = Callable[[str, int], Awaitable["int | None"]]  # (topic, partition) -> last offset done
Check = Callable[[Event, str, "bytes | None"], None]  # (event, topic, key): raises for a record to skip


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

    def _consumer(self, bootstrap_servers: str, **group: Any) -> AIOKafkaConsumer:
        return AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
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
            self.admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap_servers)
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
        decode, check = self.codec.decode, self.check
        k, n = self.slice
        out = []
        for m in messages:
            if n > 1 and zlib.crc32(m.key or b"") % n != k:
                continue  # another worker's session (the key is the session id)
            self.read_count += 1
            try:
                event = decode(m.value)
                check(event, topic, m.key)
            except Exception:  # the projector dead-letters it: the view never had it
                self.skipped += 1
                continue
            out.append(Record(event, Position(topic, partition, m.offset)))
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


TOPICS_SECONDS = 10  # how often a group member looks for namespace topics created meanwhile
GROUP_SESSION_MS = 6000  # a member that dies hands its partitions on after this (the brokers' least, by default)


class GroupSource(KafkaSource):
    """The partitions of the namespace topics that the consumer group `group` assigns this process.

    Each assigned partition starts at its checkpoint + 1, read when it is assigned: whoever had it
    before wrote its batches with their checkpoints, so nothing is lost, and what is read again is
    a no-op (checkpoints, session guards). On a rebalance `before_revoke` is awaited before the
    partitions go (the rebuild lets its write in flight land), and a batch decoded for a partition
    that went meanwhile is dropped: its next owner reads it from the checkpoint. A member reads
    until `finished` says so, whatever `at_end` asks: the end is the rebuild's to decide.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic_prefix: str,
        checkpoint: Checkpoint,
        *,
        group: str,
        client_id: str,
        check: Check,
        batch: int = DEFAULT_BATCH,
        codec: Codec | None = None,
        namespaces: Sequence[str] | None = None,
    ) -> None:
        self.group = group
        self.client_id = client_id
        super().__init__(
            bootstrap_servers, topic_prefix, checkpoint, check=check, batch=batch, codec=codec, namespaces=namespaces
        )
        self.generation = 0  # one more on every revocation: a batch decoded under an older one is dropped
        self.before_revoke: Callable[[], Awaitable[None]] | None = None
        self.folded: dict[tuple[str, int], int] = {}  # records written per partition (by `count`): this member's share
        self.handed = 0  # the generation the last batch handed out was read under
        self.assignments = 0  # how many times the group dealt this member its partitions (none is one too)
        self._all: list[Any] = []  # every partition of the rebuild (`all_ends`), as of `_topics_at`
        self._topics_at: float = -TOPICS_SECONDS
        self.ends_seen: dict[tuple[str, int], int] = {}  # what `all_ends` found last

    def _consumer(self, bootstrap_servers: str, **group: Any) -> AIOKafkaConsumer:
        return super()._consumer(
            bootstrap_servers,
            group_id=self.group,
            client_id=self.client_id,
            session_timeout_ms=GROUP_SESSION_MS,
            heartbeat_interval_ms=1000,
            # A namespace topic created meanwhile joins the pattern within this. Not much less: each refresh
            # is the whole cluster's metadata, decoded in Python (a second of CPU at a few thousand topics).
            metadata_max_age_ms=TOPICS_SECONDS * 1000,
            **group,
        )

    async def start(self) -> None:
        await self.consumer.start()
        self._started = True
        self.consumer.subscribe(pattern=self.pattern.pattern, listener=_Rebalance(self))

    async def _discover(self) -> None:
        return None  # the group assigns the partitions

    async def _refresh_ends(self) -> None:
        owned = list(self.positions)
        ends = dict(await self.consumer.end_offsets(owned)) if owned else {}
        self.ends = {tp: end for tp, end in ends.items() if tp in self.positions}  # some may have gone meanwhile

    async def all_ends(self) -> dict[tuple[str, int], int]:
        """The end offset of every partition of the rebuild, whoever it is assigned to (the topics looked up
        again every `TOPICS_SECONDS`: listing them reads the whole cluster's metadata)."""
        if time.monotonic() >= self._topics_at + TOPICS_SECONDS:
            self._all = [TopicPartition(t, p) for t, parts in (await self._topics()).items() for p in parts]
            self._topics_at = time.monotonic()
        tps = self._all
        ends = await self.consumer.end_offsets(tps) if tps else {}
        self.ends_seen = {(tp.topic, tp.partition): end for tp, end in ends.items()}
        return self.ends_seen

    async def members(self) -> list[str]:
        """The client ids of the group's members now (each process one)."""
        if self.admin is None:
            await self._topics()  # starts the admin client
        return await group_clients(self.admin, self.group)

    async def state(self) -> tuple[str, list[str]]:
        """The group's state and members' client ids (`group_state`)."""
        if self.admin is None:
            await self._topics()
        return await group_state(self.admin, self.group)

    def count(self, records: Sequence[Record]) -> None:
        """`records` (one batch this source handed out) were written: they count as this member's share."""
        if records:
            key = (records[0].position.topic, records[0].position.partition)
            self.folded[key] = self.folded.get(key, 0) + len(records)

    async def _revoked(self, revoked: Sequence[Any]) -> None:
        self.generation += 1
        for tp in revoked:
            self.positions.pop(tp, None)
            self.ends.pop(tp, None)
        if self.before_revoke is not None:
            await self.before_revoke()

    async def _assigned(self, assigned: Sequence[Any]) -> None:
        for tp in assigned:
            done = await self.checkpoint(tp.topic, tp.partition)
            self.positions[tp] = 0 if done is None else done + 1
            self.consumer.seek(tp, self.positions[tp])
        await self._refresh_ends()
        self.assignments += 1

    async def read(self, finished: Callable[[], Awaitable[bool]], *, at_end: bool) -> AsyncIterator[list[Record]]:
        next_look = 0.0
        while True:
            if time.monotonic() >= next_look:
                next_look = time.monotonic() + 0.5
                if await finished():
                    return
                await self._refresh_ends()
            limit = self.batch * max(1, min(len(self.positions), 16))
            batches = await self.consumer.getmany(timeout_ms=200, max_records=limit)
            for tp, messages in batches.items():
                generation, counts = self.generation, (self.read_count, self.skipped)
                if not messages or tp not in self.positions:
                    continue
                records: list[Record] = []
                for start in range(0, len(messages), DECODE_SLICE):
                    records += self._decode(tp.topic, tp.partition, messages[start : start + DECODE_SLICE])
                    await asyncio.sleep(0)  # the write in flight takes its next round trip meanwhile
                if generation != self.generation or tp not in self.positions:
                    self.read_count, self.skipped = counts  # revoked meanwhile: not this member's any more
                    continue
                self.positions[tp] = messages[-1].offset + 1
                if records:
                    self.handed = generation  # the write of this batch checks it is still current
                    yield records


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, source: GroupSource) -> None:
        self.source = source

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.source._revoked(list(revoked))

    async def on_partitions_assigned(self, assigned: Any) -> None:
        await self.source._assigned(list(assigned))


async def group_state(admin: Any, group: str) -> tuple[str, list[str]]:
    """Consumer group `group`'s state (`Stable` once its partitions are dealt out) and its members' client ids."""
    described = (await admin.describe_consumer_groups([group]))[0].to_object()
    for g in described["groups"]:
        if g["group"] == group:
            return g["state"], [m["client_id"] for m in g["members"]]
    return "Dead", []


async def group_clients(admin: Any, group: str) -> list[str]:
    """The client ids of consumer group `group`'s members ([] for a group nobody is in)."""
    return (await group_state(admin, group))[1]


class GroupWatch:
    """Who is in a consumer group, for a process that is not in it (or not yet)."""

    def __init__(self, bootstrap_servers: str, group: str) -> None:
        self.group = group
        self.admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap_servers)
        self._started = False

    async def members(self) -> list[str]:
        if not self._started:
            await self.admin.start()
            self._started = True
        return await group_clients(self.admin, self.group)

    async def close(self) -> None:
        if self._started:
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
        decode, check = self.codec.decode, self.check
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
                        event = decode(data)
                        check(event, reader.topic, event.session_id.encode())
                        records.append(Record(event, Position(reader.topic, 0, offset)))
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
