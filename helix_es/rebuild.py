"""`helix-es rebuild`: build a view from the start of the log into a new target while the current one serves.

    helix-es rebuild --config F [--view V] [--into NAME] [--switch/--no-switch] [--drop-old] [--json]
    helix-es rebuild --config F [--view V] --drop NAME

1. **Target.** `--into NAME`, else `<view>@v<N>`, one past every target built so far
   (`projectors.aliases` names them; a long-term memory in PostgreSQL gets its own table).
2. **Build.** Every namespace topic of the deployment (every log file, embedded) is read from
   the start, or from the target's checkpoint + 1 when an unfinished target is resumed, with
   large fetches, and folded with `live=False`: recorded summaries and embeddings are replayed,
   no model is called. Each batch (one topic-partition, up to `--batch-size` events) is one
   atomic write with its checkpoint; session views keep their states in process between
   batches, so a batch costs one write and no read. Records a projector would dead-letter
   are skipped the same way, so the rebuilt view equals the one the projector built.
3. **Caught up** when every partition has been consumed to the end offsets seen last, and a
   second look finds no more.
4. **Switch** (unless `--no-switch`): the alias moves to the target in one compare-and-set
   write, so two rebuilds cannot both win. Open memories follow within about a second. On
   Kafka the rebuild keeps folding the new target until a projector service announces it
   projects it (`projectors.aliases.TargetFollower`), at most `--handover` seconds, so readers
   never wait on a target nobody writes.
5. **Drop**, only when asked (`--drop-old`, or later `--drop NAME`): the old target's keys or
   rows and its checkpoints, for this deployment's namespaces. The target readers use is never
   dropped.

Progress goes to stderr: a bar on a terminal (events done, events/s, remaining lag, ETA),
else a line every `--progress` seconds; `--json` prints the final report on stdout.
Views kept in memory (memory and file stores) live in the process that serves them: they are
rebuilt there, with `await rebuild(config)` in that process (the memories' backend), not by the CLI.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import struct
import time
import zlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from helix_es import names
from helix_es.codec import Codec
from helix_es.config import Config, LogConfig, MemoryConfig, load_config
from helix_es.errors import ConfigError, HelixError, LogCorrupted
from helix_es.events import Position, Record
from helix_es.views import View
from projectors.projection import Projection
from projectors.stores import Change, SessionKey, Snapshot, StaleWrite, ViewStore

log = logging.getLogger(__name__)

DEFAULT_BATCH = 5000  # events per atomic write: big enough that a write costs little per event
FETCH_BYTES = 4 << 20  # per partition and fetch
HANDOVER_SECONDS = 30.0
HANDOVER_GRACE = 2.0  # folding on after a service announced the target: it joins its group meanwhile


class RebuildError(HelixError):
    """The rebuild could not finish as asked (the alias moved meanwhile, a target in use, ...)."""


# --- what the display shows, and what the rebuild reports ---


@dataclass
class Status:
    view: str
    target: str
    phase: str = "starting"  # building | checking | handover | switching | done
    read: int = 0  # records read from the log
    events: int = 0  # events folded into the target
    skipped: int = 0  # records a projector would dead-letter (undecodable or invalid)
    lag: int = 0  # records between what was read and the log's end, as last seen
    started: float = field(default_factory=time.monotonic)

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    @property
    def rate(self) -> float:
        return self.read / self.seconds if self.seconds > 0 else 0.0


@dataclass
class RebuildReport:
    """What `rebuild` did; `--json` prints it."""

    view: str
    store: str
    old_target: str
    target: str
    events: int  # folded into the target (records at or below a resumed target's checkpoint not counted)
    read: int  # records read from the log
    skipped: int  # undecodable or invalid records, skipped as the projector dead-letters them
    seconds: float
    events_per_second: float  # records read per second, build phase
    namespaces: int
    switched: bool
    handed_over: bool | None  # a projector service announced the new target (None: not waited for)
    dropped: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


ProgressCallback = Callable[[Status], None]


# --- choosing the view ---


def select(config: Mapping[str, Any] | str | os.PathLike[str] | Config, view: str | None = None,
           ) -> tuple[LogConfig, MemoryConfig]:
    """The log and the one memory (view in its store) `view` names in `config`: every agent, every part."""
    if isinstance(config, Config):
        configs = [config]
    else:
        from helix_es.config import load_configs

        configs = load_configs(config) if not isinstance(config, Mapping) or "agents" in config else [
            load_config(config)]
    parts: dict[tuple[str, str], MemoryConfig] = {}
    for cfg in configs:
        for part in cfg.memory.parts:
            parts.setdefault((part.view.name, part.store), part)
    if view is None:
        if len(parts) != 1:
            raise ConfigError("--view", f"the config has several views; name one of {sorted(n for n, _ in parts)}")
        (part,) = parts.values()
    else:
        found = [p for (name, _), p in parts.items() if view in (name, p.type)]
        if not found:
            raise ConfigError("--view", f"no view {view!r} in the config; it has {sorted(n for n, _ in parts)}")
        if len(found) > 1:
            raise ConfigError("--view", f"{view!r} names {len(found)} views ({sorted(p.view.name for p in found)} in "
                                        f"{sorted(p.store for p in found)}); give a config with one of them")
        part = found[0]
    return configs[0].log, part


# --- where the target is written ---


class Sink(Protocol):
    async def apply(self, records: Sequence[Record]) -> int: ...


class SessionSink:
    """Folds a session view into its target, with every session's state kept here between batches.

    The rebuild is the target's only writer until the switch, so its own states are the truth and a
    batch is one write (the store's atomic step, with the guards it checks) and no read. Should
    another writer move a guard (a projector service after the switch), the write fails as
    `StaleWrite` and those sessions are read again. Past `max_sessions` the least recently written
    are forgotten (and read again if they come back).
    """

    def __init__(self, view: View, store: ViewStore, *, max_sessions: int = 200_000) -> None:
        self.view = view
        self.store = store
        self.max_sessions = max_sessions
        self.states: dict[SessionKey, Snapshot] = {}

    async def apply(self, records: Sequence[Record]) -> int:
        if not records:
            return 0
        topic, partition = records[0].position.topic, records[0].position.partition
        groups: dict[tuple[str, str], list[Record]] = {}
        for r in records:
            e = r.event
            key = (e.namespace, e.session_id)
            group = groups.get(key)
            if group is None:
                groups[key] = [r]
            else:
                group.append(r)
        keyed = [(SessionKey(ns, sid), recs) for (ns, sid), recs in groups.items()]
        fold = self.view.fold
        for _attempt in range(5):
            missing = [k for k, _ in keyed if k not in self.states]
            if missing:
                self.states.update(await self.store.load(self.view, missing))
            changes: list[Change] = []
            applied = 0
            for key, recs in keyed:
                before = self.states[key]
                state, last = before.state, before.applied
                for r in recs:
                    offset = r.position.offset
                    if last is not None and offset <= last:
                        continue  # a resumed target has it already
                    state, last = fold(state, r.event), offset
                    applied += 1
                if last is not None and last != before.applied:
                    changes.append(Change(key, before, state, last))
            try:
                await self.store.apply(self.view, topic, partition, changes, records[-1].position.offset)
            except StaleWrite:
                for key, _ in keyed:
                    self.states.pop(key, None)
                continue
            for c in changes:
                self.states.pop(c.key, None)  # re-inserted last: the dict's order is least recently written first
                self.states[c.key] = Snapshot(c.after, c.applied)
            while len(self.states) > self.max_sessions:
                del self.states[next(iter(self.states))]
            return applied
        raise StaleWrite(f"{self.view.name}: sessions kept changing under the rebuild")


class ProjectionSink:
    """Long-term and vector views: their projection's own atomic apply, never live."""

    def __init__(self, projection: Projection) -> None:
        self.projection = projection

    async def apply(self, records: Sequence[Record]) -> int:
        return (await self.projection.apply(records, live=False)).events if records else 0


# --- where the events come from ---


class Source(Protocol):
    read_count: int
    skipped: int

    def lag(self) -> int: ...

    def read(self, finished: Callable[[], Awaitable[bool]], *, at_end: bool) -> AsyncIterator[list[Record]]:
        """Batches of one topic-partition each. With `at_end`, `finished` is asked once everything seen
        is read; else about twice a second."""
        ...

    async def namespaces(self) -> list[str]: ...

    async def close(self) -> None: ...


Checkpoint = Callable[[str, int], Awaitable["int | None"]]


class KafkaSource:
    """Every `<prefix>.<namespace>` topic, every partition, from a checkpoint on: no consumer group."""

    def __init__(self, log_config: LogConfig, checkpoint: Checkpoint, *, batch: int = DEFAULT_BATCH,
                 codec: Codec | None = None) -> None:
        from aiokafka import AIOKafkaConsumer

        self.prefix = log_config.topic_prefix
        self.pattern = re.compile(names.topic_pattern(self.prefix))
        self.checkpoint = checkpoint
        self.batch = batch
        self.codec = codec or Codec()
        self.consumer = AIOKafkaConsumer(
            bootstrap_servers=log_config.bootstrap_servers, enable_auto_commit=False,
            auto_offset_reset="earliest", isolation_level="read_committed",
            max_partition_fetch_bytes=FETCH_BYTES, fetch_max_bytes=16 * FETCH_BYTES, fetch_max_wait_ms=100,
        )
        self.positions: dict[Any, int] = {}  # TopicPartition -> next offset to read
        self.ends: dict[Any, int] = {}
        self.read_count = 0
        self.skipped = 0
        self._started = False

    async def start(self) -> None:
        await self.consumer.start()
        self._started = True
        await self._discover()
        await self._refresh_ends()

    async def _discover(self) -> None:
        """Assign every partition of every namespace topic; new ones start at their checkpoint + 1."""
        from aiokafka import TopicPartition

        topics = sorted(t for t in await self.consumer.topics() if self.pattern.fullmatch(t))
        found = [TopicPartition(t, p) for t in topics for p in sorted(self.consumer.partitions_for_topic(t) or ())]
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
        return sum(max(0, end - self.positions.get(tp, 0)) for tp, end in self.ends.items())

    async def namespaces(self) -> list[str]:
        if not self._started:
            await self.consumer.start()
            self._started = True
        return sorted(names.namespace_of(t, self.prefix) for t in await self.consumer.topics()
                      if self.pattern.fullmatch(t))

    def _decode(self, topic: str, partition: int, messages: Sequence[Any]) -> list[Record]:
        from projectors.deadletter import check

        decode, prefix = self.codec.decode, self.prefix
        out = []
        for m in messages:
            try:
                event = decode(m.value)
                check(event, topic, m.key, prefix)
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
                if self._read_all() and await finished():
                    return
                continue
            if not at_end and time.monotonic() >= next_look:
                next_look = time.monotonic() + 0.5
                if await finished():
                    return
                await self._discover()
                await self._refresh_ends()
            batches = await self.consumer.getmany(timeout_ms=200, max_records=self.batch)
            quiet = 0 if batches else quiet + 1
            for tp, messages in batches.items():
                if not messages:
                    continue
                self.positions[tp] = messages[-1].offset + 1
                self.read_count += len(messages)
                records = self._decode(tp.topic, tp.partition, messages)
                if records:
                    yield records
            if quiet >= 5:  # nothing for a second: the fetcher may sit past gaps (control records)
                for tp in self.positions:
                    self.positions[tp] = max(self.positions[tp], await self.consumer.position(tp))
                quiet = 0

    async def close(self) -> None:
        if self._started:
            await self.consumer.stop()


_FRAME = struct.Struct(">II")


class _LogReader:
    """One embedded log file, read without its writer's lock: the serving process keeps appending."""

    def __init__(self, path: Path, topic: str) -> None:
        from helix_es.log.embedded import MAGIC

        self.path = path
        self.topic = topic
        self.file = open(path, "rb", buffering=1 << 20)  # noqa: SIM115 (closed by close())
        if self.file.read(len(MAGIC)) != MAGIC:
            self.file.close()
            raise LogCorrupted(f"{path} is not a helix-es log (bad magic)")
        self.pos = len(MAGIC)  # byte position of the next frame
        self.index = 0  # its offset
        self.bad: int | None = None  # a complete frame whose checksum fails: corrupt unless it heals

    def skip(self, start: int) -> None:
        """Move past the frames before offset `start`, reading only their headers."""
        f = self.file
        f.seek(self.pos)
        while self.index < start:
            head = f.read(_FRAME.size)
            if len(head) < _FRAME.size:
                break
            length = _FRAME.unpack(head)[0]
            if self.pos + _FRAME.size + length > os.fstat(f.fileno()).st_size:
                break
            f.seek(length, os.SEEK_CUR)
            self.pos += _FRAME.size + length
            self.index += 1

    def frames(self, limit: int) -> list[tuple[int, bytes]]:
        f = self.file
        f.seek(self.pos)
        out: list[tuple[int, bytes]] = []
        while len(out) < limit:
            head = f.read(_FRAME.size)
            if len(head) < _FRAME.size:
                break
            length, crc = _FRAME.unpack(head)
            data = f.read(length)
            if len(data) < length:
                break  # still being appended
            if zlib.crc32(data) != crc:
                self.bad = self.pos
                break
            self.bad = None
            out.append((self.index, data))
            self.pos += _FRAME.size + length
            self.index += 1
        return out

    def ready(self) -> bool:
        """A whole frame waits at the read position (it is not consumed)."""
        f = self.file
        f.seek(self.pos)
        head = f.read(_FRAME.size)
        if len(head) < _FRAME.size or self.bad == self.pos:
            return False
        return self.pos + _FRAME.size + _FRAME.unpack(head)[0] <= os.fstat(f.fileno()).st_size

    def remaining_bytes(self) -> int:
        return max(0, os.fstat(self.file.fileno()).st_size - self.pos)

    def close(self) -> None:
        self.file.close()


class EmbeddedSource:
    """Every namespace file of an embedded log, from a checkpoint on, while its owner keeps appending."""

    def __init__(self, log_config: LogConfig, checkpoint: Checkpoint, *, batch: int = DEFAULT_BATCH,
                 codec: Codec | None = None) -> None:
        self.path = Path(log_config.path).resolve()
        self.prefix = log_config.topic_prefix
        self.checkpoint = checkpoint
        self.batch = batch
        self.codec = codec or Codec()
        self.readers: dict[str, _LogReader] = {}
        self.read_count = 0
        self.skipped = 0
        self._bytes = 0

    async def namespaces(self) -> list[str]:
        if not self.path.is_dir():
            return []
        head = self.prefix + "."
        found = (p.name[len(head) : -len(".log")] for p in self.path.glob(f"{head}*.log"))
        return sorted(ns for ns in found if names.NAMESPACE_RE.fullmatch(ns))

    async def _discover(self) -> None:
        for ns in await self.namespaces():
            if ns not in self.readers:
                topic = names.topic(ns, self.prefix)
                reader = _LogReader(self.path / f"{topic}.log", topic)
                done = await self.checkpoint(topic, 0)
                reader.skip(0 if done is None else done + 1)
                self.readers[ns] = reader

    def lag(self) -> int:
        left = sum(r.remaining_bytes() for r in self.readers.values())
        per_event = self._bytes / self.read_count if self.read_count else 200
        return round(left / max(per_event, 1))

    async def read(self, finished: Callable[[], Awaitable[bool]], *, at_end: bool) -> AsyncIterator[list[Record]]:
        decode = self.codec.decode
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
                self.read_count += len(frames)
                records = []
                for offset, data in frames:
                    self._bytes += len(data) + _FRAME.size
                    try:
                        records.append(Record(decode(data), Position(reader.topic, 0, offset)))
                    except Exception as exc:
                        self.skipped += 1
                        log.warning("%s@%d cannot be decoded (%s); skipped", reader.topic, offset, exc)
                yield records
                await asyncio.sleep(0)
            if at_end and not got_any:
                await asyncio.sleep(0.05)  # "then checked again": a frame may be landing right now
                await self._discover()
                if any(r.ready() for r in self.readers.values()):
                    continue
                damaged = [r for r in self.readers.values() if r.bad is not None]
                if damaged:
                    # A frame being written can read torn for a moment; one that stays so is damage.
                    strikes += 1
                    r = damaged[0]
                    if strikes >= 3:
                        raise LogCorrupted(f"{r.path} is damaged at byte {r.bad} (frame {r.index}): "
                                           "a checksum mismatch; its owner refuses to open it too")
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
