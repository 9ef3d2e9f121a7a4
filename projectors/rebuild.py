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
   second look finds at most `CAUGHT_UP_LAG` more (under steady writes "none" may never come;
   those few are folded after the switch, never lost). A big rebuild shares the work with worker
   processes (`--workers`): whole partitions each, or slices of a session view's sessions.
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

import argparse
import asyncio
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

from helix_es.config import Config, LogConfig, MemoryConfig
from helix_es.log.replay import DEFAULT_BATCH, Checkpoint, EmbeddedSource, KafkaSource, Source
from helix_es.model import names
from helix_es.model.errors import ConfigError, HelixError
from helix_es.model.events import Record
from helix_es.model.names import alias_id, check_target, next_target
from helix_es.projection.aliases import (
    drop_target_data,
    resolve_alias,
    target_projection,
    target_store,
)
from helix_es.projection.factory import open_aliases
from helix_es.projection.fold import fold_batch
from helix_es.projection.protocol import Projection
from helix_es.stores import registry
from helix_es.stores.ports import AliasStore, SessionKey, Snapshot, StaleWrite, ViewStore
from helix_es.views import View
from projectors.deadletter import Checker

log = logging.getLogger(__name__)

HANDOVER_SECONDS = 30.0
HANDOVER_GRACE = 2.0  # folding on after a service announced the target: it joins its group meanwhile


class RebuildError(HelixError):
    """The rebuild could not finish as asked (the alias moved meanwhile, a target in use, ...)."""


# --- what the display shows, and what the rebuild reports ---


@dataclass
class Status:
    view: str
    target: str
    phase: str = "starting"  # building | built | switching | handover
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
    workers: int = 0  # processes that shared the partitions out (0: this one alone)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


ProgressCallback = Callable[[Status], None]


# --- choosing the view ---


def select(config: Mapping[str, Any] | str | os.PathLike[str] | Config, view: str | None = None, *,
           store: str | None = None) -> tuple[LogConfig, MemoryConfig]:
    """The log and the one memory (view in its store) `view` names in `config`: every agent, every part."""
    from helix_es.config import load_configs

    configs = [config] if isinstance(config, Config) else load_configs(config)
    parts: dict[tuple[str, str], MemoryConfig] = {}
    for cfg in configs:
        for part in cfg.memory.parts:
            if store is None or part.store == store:
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

    def __init__(self, view: View, store: ViewStore, *, max_sessions: int = 200_000,
                 checkpoint_partition: Callable[[int], int] | None = None) -> None:
        self.view = view
        self.store = store
        self.max_sessions = max_sessions
        self.states: dict[SessionKey, Snapshot] = {}
        # A worker folding a slice of a partition's sessions keeps its progress under another partition
        # number: the partition's own checkpoint is written once every slice is done (see _in_workers).
        self.checkpoint_partition = checkpoint_partition

    async def apply(self, records: Sequence[Record]) -> int:
        if not records:
            return 0
        partition = records[0].position.partition
        where = None if self.checkpoint_partition is None else self.checkpoint_partition(partition)
        try:
            folded = await fold_batch(self.view, self.store, records, retries=4, cache=self.states,
                                      checkpoint_partition=where)
        except StaleWrite as exc:
            raise StaleWrite(f"{self.view.name}: sessions kept changing under the rebuild") from exc
        while len(self.states) > self.max_sessions:
            del self.states[next(iter(self.states))]
        return folded.applied


class ProjectionSink:
    """Long-term and vector views: their projection's own atomic apply, never live."""

    def __init__(self, projection: Projection) -> None:
        self.projection = projection

    async def apply(self, records: Sequence[Record]) -> int:
        return (await self.projection.apply(records, live=False)).events if records else 0


# --- progress on stderr ---


class Display:
    """Progress on `stream`: a bar redrawn in place on a terminal, else a plain line every `interval` s."""

    def __init__(self, stream: TextIO | None = None, *, interval: float = 5.0, tty: bool | None = None) -> None:
        self.stream = stream or sys.stderr
        self.tty = self.stream.isatty() if tty is None else tty
        self.interval = 0.2 if self.tty else interval
        self._next = 0.0
        self._drawn = False
        self._phase = ""

    def __call__(self, status: Status, *, force: bool = False) -> None:
        now = time.monotonic()
        moved = status.phase != self._phase  # a new phase is always shown, on a line of its own
        if not force and not moved and now < self._next:
            return
        self._next = now + self.interval
        if self.tty:
            if moved and self._drawn:
                self.stream.write("\n")
            self.stream.write("\r" + self.bar(status).ljust(118)[:118])
            self._drawn = True
        else:
            self.stream.write(self.line(status) + "\n")
        self._phase = status.phase
        self.stream.flush()

    def finish(self) -> None:
        if self.tty and self._drawn:
            self.stream.write("\n")
            self.stream.flush()
            self._drawn = False

    @staticmethod
    def bar(status: Status, width: int = 24) -> str:
        total = status.read + status.lag
        frac = status.read / total if total else 1.0
        filled = round(frac * width)
        rate = status.rate
        eta = f"{status.lag / rate:,.0f}s" if rate > 0 and status.lag else "-"
        return (f"{status.target} [{'#' * filled}{'.' * (width - filled)}] {frac:4.0%} {status.phase}  "
                f"{status.read:,} events  {rate:,.0f}/s  lag {status.lag:,}  eta {eta}")

    @staticmethod
    def line(status: Status) -> str:
        return (f"rebuild {status.view} -> {status.target}: {status.phase}, {status.read} read, {status.events} "
                f"folded, {status.skipped} skipped, {status.rate:.0f} events/s, lag {status.lag}")


# --- the rebuild ---


@contextmanager
def _rare_collections() -> Iterator[None]:
    """Fewer garbage collections while folding: a rebuild keeps millions of objects alive, and Python's
    default (a collection every 700 allocations, walking more of them each time) costs a quarter of it."""
    before = gc.get_threshold()
    gc.set_threshold(max(before[0], 100_000), max(before[1], 50), max(before[2], 100))
    try:
        yield
    finally:
        gc.set_threshold(*before)


async def _drain(source: Source, sink: Sink, status: Status, finished: Callable[[], Awaitable[bool]], *,
                 at_end: bool, on_progress: ProgressCallback | None) -> None:
    """Fold what `source` yields into `sink`, one write in flight while the next batch is decoded."""
    with _rare_collections():
        await _fold_all(source, sink, status, finished, at_end=at_end, on_progress=on_progress)


async def _fold_all(source: Source, sink: Sink, status: Status, finished: Callable[[], Awaitable[bool]], *,
                    at_end: bool, on_progress: ProgressCallback | None) -> None:
    inflight: asyncio.Future[int] | None = None
    # What others counted before (workers, an earlier pass of this source): added to this source's totals.
    base_read, base_skipped = status.read - source.read_count, status.skipped - source.skipped
    batches = source.read(finished, at_end=at_end)
    try:
        async for records in batches:
            if inflight is not None:
                status.events += await inflight
            inflight = asyncio.ensure_future(sink.apply(records))
            await asyncio.sleep(0)  # let it send its write before the next batch is decoded
            status.read, status.skipped = base_read + source.read_count, base_skipped + source.skipped
            status.lag = source.lag()
            if on_progress is not None:
                on_progress(status)
        if inflight is not None:
            status.events += await inflight
            inflight = None
    finally:
        if inflight is not None and not inflight.done():
            inflight.cancel()
        await batches.aclose()  # type: ignore[attr-defined]
    status.read, status.skipped = base_read + source.read_count, base_skipped + source.skipped
    status.lag = source.lag()


def _open_source(log_config: LogConfig, checkpoint: Checkpoint, batch: int,
                 only: Sequence[tuple[str, int]] | None = None) -> Source:
    """Where a rebuild reads `log_config`'s log from: every namespace, from `checkpoint` on."""
    if log_config.type == "kafka":
        # What the projector dead-letters, the rebuild skips.
        return KafkaSource(log_config.bootstrap_servers, log_config.topic_prefix, checkpoint,
                           check=Checker(log_config.topic_prefix), batch=batch, only=only)
    return EmbeddedSource(log_config.path, log_config.topic_prefix, checkpoint, batch=batch, only=only)


async def _always() -> bool:
    return True


async def rebuild(
    config: Mapping[str, Any] | str | os.PathLike[str] | Config,
    *,
    view: str | None = None,
    into: str | None = None,
    switch: bool = True,
    drop_old: bool = False,
    batch_size: int = DEFAULT_BATCH,
    handover: float = HANDOVER_SECONDS,
    on_progress: ProgressCallback | None = None,
    workers: int | None = None,
) -> RebuildReport:
    """Build `view` of `config` from the start of the log into a new target, then switch readers to it.

    The config names the store to build in (a Postgres long-term memory for history that only
    went to Redis: give a config with `store: postgres`). See the module's doc for the steps.
    """
    log_config, part = select(config, view)
    if drop_old and not switch:
        raise ConfigError("--drop-old", "needs --switch: without it the old target is the one readers use")
    if batch_size < 1:
        raise ConfigError("--batch-size", f"must be >= 1, got {batch_size}")
    if registry.kind(part.store).in_process:
        return await _rebuild_in_process(log_config, part, into=into, switch=switch, drop_old=drop_old)
    from helix_es.projection.factory import open_store

    name = part.view.name
    kafka = log_config.type == "kafka"
    alias = alias_id(name, log_config.topic_prefix)
    aliases = open_aliases(part)
    store = open_store(part) if isinstance(part.view, View) else None
    projection: Projection | None = None
    source: Source | None = None
    try:
        old = await resolve_alias(aliases, alias, name)
        target = check_target(into) if into else next_target(name, sorted({*await aliases.targets(alias), old}))
        if target == old:
            raise RebuildError(f"{target} is the target readers use now: rebuild into another one (--into NAME)")
        await aliases.add_target(alias, target)
        projection = target_projection(part, target, store)
        sink: Sink = (SessionSink(part.view, target_store(store, part.view, target)) if store is not None
                      else ProjectionSink(projection))
        status = Status(name, target, "building")
        log.info("rebuilding %s (%s) into %s; readers use %s", name, part.store, target, old)
        shards = await _shards(log_config, projection.checkpoint, _worker_count(workers), config, part)
        if shards:  # the bulk, partitions shared out to worker processes (one core each)
            await _in_workers(config, part, target, shards, batch_size, status, on_progress)
        # What is left (all of it without workers, else what arrived meanwhile), in this process.
        source = _open_source(log_config, projection.checkpoint, batch_size)
        await source.start()
        await _drain(source, sink, status, _always, at_end=True, on_progress=on_progress)
        build_seconds, build_read = status.seconds, status.read
        status.phase = "built"
        if on_progress is not None:
            on_progress(status)
        if isinstance(on_progress, Display):
            on_progress.finish()  # log lines that follow start on a line of their own
        namespaces = await source.namespaces()
        report = RebuildReport(name, part.store, old, target, status.events, build_read, status.skipped,
                               round(build_seconds, 3), round(build_read / build_seconds if build_seconds else 0.0),
                               len(namespaces), False, None, workers=len(shards))
        if not switch:
            return report
        status.phase = "switching"
        served_before = await aliases.served(alias) if kafka else set()
        found = await aliases.switch(alias, target, expect=old, base=name)
        if found is not None:
            raise RebuildError(f"the alias of {name} moved to {found} while this rebuild ran: {target} is built "
                               "but readers were not switched to it")
        switched_at = time.monotonic()
        report.switched = True
        log.info("readers of %s switched from %s to %s", name, old, target)
        if kafka and handover > 0:
            if old in served_before:
                report.handed_over = await _hand_over(source, sink, status, aliases, alias, target, handover,
                                                      on_progress)
            else:
                log.warning("no projector service announces it projects %s: start `helix-es project` (it follows "
                            "the alias) so that %s takes the events written from now on", old, target)
        report.events, report.read, report.skipped = status.events, status.read, status.skipped
        if drop_old:
            # Readers still on the old target move within a second; only then is it taken away.
            await asyncio.sleep(max(0.0, switched_at + 2 * _refresh_seconds() - time.monotonic()))
            await drop_target(part, log_config, old, namespaces)
            await aliases.forget_target(alias, old)
            report.dropped.append(old)
        return report
    finally:
        if source is not None:
            await source.close()
        if projection is not None:
            await projection.close()
        if store is not None:
            await store.close()
        await aliases.close()


def _refresh_seconds() -> float:
    from helix_es.projection import aliases

    return aliases.REFRESH_SECONDS


async def _hand_over(source: Source, sink: Sink, status: Status, aliases: AliasStore, alias: str, target: str,
                     timeout: float, on_progress: ProgressCallback | None) -> bool:
    """Fold the new target until a projector service announces it (then `HANDOVER_GRACE` more), or `timeout`."""
    status.phase = "handover"
    deadline = time.monotonic() + timeout
    seen: list[float] = []

    async def finished() -> bool:
        if seen:
            return time.monotonic() >= seen[0] + HANDOVER_GRACE
        if target in await aliases.served(alias):
            seen.append(time.monotonic())
            return False
        return time.monotonic() >= deadline

    await _drain(source, sink, status, finished, at_end=False, on_progress=on_progress)
    if not seen:
        log.warning("no projector service took %s over within %.0fs: start `helix-es project`, which follows "
                    "the alias, or readers of it wait for their writes", target, timeout)
    return bool(seen)


# --- dropping a target ---


async def drop_target(part: MemoryConfig, log_config: LogConfig, target: str, namespaces: Sequence[str]) -> None:
    """Delete `target`'s data and checkpoints for `namespaces` (this deployment's), in `part`'s store."""
    topics = [names.topic(ns, log_config.topic_prefix) for ns in namespaces]
    await drop_target_data(part, target, namespaces, topics)


async def _namespaces(log_config: LogConfig) -> list[str]:
    source = _open_source(log_config, _no_checkpoint, DEFAULT_BATCH)
    try:
        return await source.namespaces()
    finally:
        await source.close()


async def _no_checkpoint(topic: str, partition: int) -> int | None:
    return None


@dataclass
class DropReport:
    view: str
    store: str
    dropped: str
    namespaces: int

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


async def drop(config: Mapping[str, Any] | str | os.PathLike[str] | Config, target: str, *,
               view: str | None = None) -> DropReport:
    """Delete a target of `view` that readers do not use: its keys or rows, and its checkpoints."""
    log_config, part = select(config, view)
    check_target(target, "--drop")
    if registry.kind(part.store).in_process:
        raise ConfigError("memory.store", f"{part.store} views live in their process: nothing to drop from here")
    name = part.view.name
    alias = alias_id(name, log_config.topic_prefix)
    aliases = open_aliases(part)
    try:
        current = await resolve_alias(aliases, alias, name)
        if target == current:
            raise RebuildError(f"{target} is the target readers of {name} use: switch them to another one first")
        known = await aliases.targets(alias) | {name}
        if target not in known:
            raise RebuildError(f"{target} is not a target of {name}; its targets: {sorted(known)}")
        namespaces = await _namespaces(log_config)
        await drop_target(part, log_config, target, namespaces)
        await aliases.forget_target(alias, target)
        return DropReport(name, part.store, target, len(namespaces))
    finally:
        await aliases.close()


# --- views kept in memory: rebuilt in the process that serves them ---


async def _rebuild_in_process(log_config: LogConfig, part: MemoryConfig, *, into: str | None, switch: bool,
                              drop_old: bool) -> RebuildReport:
    from helix_es.client import backend as backends

    if not switch:
        raise ConfigError("--no-switch", f"a {part.store} view lives in this process and only its readers could "
                                         "use a new target: it is rebuilt by switching to it")
    started = time.monotonic()
    backend = await backends.acquire(log_config)
    try:
        name = part.view.name
        aliases = backend.aliases(part)
        alias = alias_id(name, log_config.topic_prefix)
        old = await resolve_alias(aliases, alias, name)
        target = check_target(into) if into else next_target(name, sorted({*await aliases.targets(alias), old}))
        if target == old:
            raise RebuildError(f"{target} is the target readers use now: rebuild into another one (into=...)")
        namespaces = await backend.log.namespaces()
        found = await aliases.switch(alias, target, expect=old, base=name)
        if found is not None:
            raise RebuildError(f"the alias of {name} moved to {found} meanwhile")
        events = 0
        aliased: Any = None
        for ns in namespaces:
            projection = await backend.attach(part, ns)
            await backend.current(projection, ns)  # follows the alias: the new target, caught up from the log
            aliased = projection
            done = await projection.checkpoint(names.topic(ns, log_config.topic_prefix), 0)
            events += 0 if done is None else done + 1
        dropped = []
        if drop_old and aliased is not None:
            await _drop_in_process(aliased, part, old, await backend.log.namespaces(), log_config.topic_prefix)
            await aliases.forget_target(alias, old)
            dropped.append(old)
        seconds = time.monotonic() - started
        return RebuildReport(name, part.store, old, target, events, events, 0, round(seconds, 3),
                             round(events / seconds if seconds else 0.0), len(namespaces), True, None, dropped)
    finally:
        await backends.release(log_config, backend)


async def _drop_in_process(aliased: Any, part: MemoryConfig, target: str, namespaces: Sequence[str],
                           topic_prefix: str) -> None:
    """Forget an in-process target: its projection, and for session views its states in the shared store."""
    await aliased.forget(target)
    store: ViewStore | None = getattr(aliased, "shared_store", None)
    if store is not None and isinstance(part.view, View):
        topics = [names.topic(ns, topic_prefix) for ns in namespaces]
        await target_store(store, part.view, target).drop(part.view, namespaces, topics)


# --- worker processes: the partitions shared out, one process per core ---

PARALLEL_MIN_EVENTS = 100_000  # below this, starting processes costs more than it saves


@dataclass(frozen=True)
class Shard:
    """One worker's share: whole partitions, or (session views) slice `k` of `n` of each partition's sessions."""

    partitions: list[tuple[str, int]]
    k: int = 0
    n: int = 1

    def scratch(self, partition: int) -> int:
        """Where a slice keeps its own progress: a partition number no log has (negative)."""
        return -1 - (partition * self.n + self.k)


def _worker_count(workers: int | None) -> int:
    return max(1, workers if workers is not None else min(os.cpu_count() or 1, 4))


def _config_spec(config: Mapping[str, Any] | str | os.PathLike[str] | Config) -> Any:
    """`config` as a worker process can read it again (JSON), or None if it cannot be passed on."""
    if isinstance(config, Config):
        return None
    if isinstance(config, os.PathLike) or (isinstance(config, str) and "\n" not in config and Path(config).is_file()):
        return str(Path(config).resolve())
    try:
        json.dumps(config)
    except (TypeError, ValueError):
        return None
    return config


async def _shards(log_config: LogConfig, checkpoint: Checkpoint, workers: int,
                  config: Mapping[str, Any] | str | os.PathLike[str] | Config, part: MemoryConfig) -> list[Shard]:
    """The work left, dealt out to `workers` shards of about equal size; [] to do it in this process.

    Partitions go whole to the least loaded shard. With fewer partitions than workers (an embedded
    log of one namespace is one partition), a session view's partitions are sliced by session
    instead: every worker reads them all and folds only its own sessions.
    """
    if workers < 2 or _config_spec(config) is None:
        return []
    source = _open_source(log_config, checkpoint, DEFAULT_BATCH)
    try:
        await source.start()
        left = source.remaining()
    finally:
        await source.close()
    left = {tp: n for tp, n in left.items() if n > 0}
    if not left or sum(left.values()) < PARALLEL_MIN_EVENTS:
        return []
    if len(left) < workers:
        if not isinstance(part.view, View):
            return []  # namespace-wide views keep one writer per partition
        return [Shard(sorted(left), k, workers) for k in range(workers)]
    shares: list[list[tuple[str, int]]] = [[] for _ in range(workers)]
    loads = [0] * workers
    for tp, n in sorted(left.items(), key=lambda kv: -kv[1]):  # biggest first, to the least loaded
        i = loads.index(min(loads))
        shares[i].append(tp)
        loads[i] += n
    return [Shard(share) for share in shares]


async def _in_workers(config: Mapping[str, Any] | str | os.PathLike[str] | Config, part: MemoryConfig,
                      target: str, shards: list[Shard], batch: int, status: Status,
                      on_progress: ProgressCallback | None) -> None:
    """Run `python -m helix_es.rebuild` once per shard; their progress (JSON lines) adds up in `status`."""
    root = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    latest: list[dict[str, Any]] = [{} for _ in shards]
    base = (status.read, status.events, status.skipped)
    procs: list[asyncio.subprocess.Process] = []

    async def follow(i: int, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        async for line in proc.stdout:
            try:
                latest[i] = json.loads(line)
            except ValueError:
                continue
            status.read = base[0] + sum(w.get("read", 0) for w in latest)
            status.events = base[1] + sum(w.get("events", 0) for w in latest)
            status.skipped = base[2] + sum(w.get("skipped", 0) for w in latest)
            status.lag = sum(w.get("lag", 0) for w in latest)
            if on_progress is not None:
                on_progress(status)

    try:
        for shard in shards:
            spec = {"config": _config_spec(config), "view": part.view.name, "store": part.store, "target": target,
                    "shard": asdict(shard), "batch": batch}
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "projectors.rebuild", stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, env=env)
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
            procs.append(proc)
        errors = await asyncio.gather(*(asyncio.gather(follow(i, p), p.stderr.read())  # type: ignore[union-attr]
                                        for i, p in enumerate(procs)))
        for proc, (_, err) in zip(procs, errors, strict=True):
            if await proc.wait() != 0:
                raise RebuildError(f"a rebuild worker failed: {err.decode(errors='replace').strip()[-2000:]}")
    finally:
        for proc in procs:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    if shards[0].n > 1:
        await _join_slices(part, target, shards, latest)


async def _join_slices(part: MemoryConfig, target: str, shards: list[Shard], latest: list[dict[str, Any]]) -> None:
    """Every slice of a partition is done: its checkpoint moves to where all of them got, scratch ones go.

    Events past the lowest slice's end are read again by the final pass; session guards skip them.
    """
    from helix_es.projection.factory import open_store

    assert isinstance(part.view, View)
    reached: dict[tuple[str, int], int] = {}
    for worker in latest:
        for topic, partition, offset in worker.get("positions", ()):
            key = (topic, int(partition))
            reached[key] = min(reached.get(key, offset), offset)
    scratch = {(t, p) for shard in shards for t, q in shard.partitions for p in [shard.scratch(q)]}
    store = open_store(part)
    try:
        into = target_store(store, part.view, target)
        for (topic, partition), offset in reached.items():
            done = await into.checkpoint(part.view, topic, partition)
            if offset - 1 > (-1 if done is None else done):
                await into.apply(part.view, topic, partition, [], offset - 1)
        await into.forget_checkpoints(part.view, scratch)
    finally:
        await store.close()


async def _worker(spec: Mapping[str, Any]) -> None:
    """One worker: fold its shard into the target, printing progress as JSON lines."""
    from helix_es.projection.factory import open_store

    log_config, part = select(spec["config"], spec["view"], store=spec["store"])
    target = spec["target"]
    shard = Shard([(t, int(p)) for t, p in spec["shard"]["partitions"]], spec["shard"]["k"], spec["shard"]["n"])
    store = open_store(part) if isinstance(part.view, View) else None
    projection = target_projection(part, target, store)
    if store is not None:
        sink: Sink = SessionSink(part.view, target_store(store, part.view, target),
                                 checkpoint_partition=shard.scratch if shard.n > 1 else None)
        # A slice resumes from its own scratch checkpoint, else from the partition's.
        checkpoint = projection.checkpoint
        if shard.n > 1:
            async def sliced(topic: str, partition: int) -> int | None:
                mine = await projection.checkpoint(topic, shard.scratch(partition))
                whole = await projection.checkpoint(topic, partition)
                return max(x for x in (mine, whole, -1) if x is not None)
            checkpoint = sliced
    else:
        sink, checkpoint = ProjectionSink(projection), projection.checkpoint
    source = _open_source(log_config, checkpoint, int(spec["batch"]), only=shard.partitions)
    source.slice = (shard.k, shard.n)
    every = [0.0]

    def emit(status: Status, *, final: bool = False) -> None:
        if final or time.monotonic() >= every[0]:
            every[0] = time.monotonic() + 0.5
            line: dict[str, Any] = {"read": status.read, "events": status.events, "skipped": status.skipped,
                                    "lag": status.lag}
            if final:
                line["positions"] = source.reached()
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()

    try:
        await source.start()
        status = Status(part.view.name, target, "building")
        await _drain(source, sink, status, _always, at_end=True, on_progress=emit)
        emit(status, final=True)
    finally:
        await source.close()
        await projection.close()
        if store is not None:
            await store.close()


def _worker_main() -> int:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(_worker(json.loads(sys.stdin.read())))
    return 0


# --- the command ---


def add_command(sub: Any) -> None:
    """`helix-es rebuild` (registered through `helix_es.cli.COMMAND_MODULES`)."""
    p = sub.add_parser(
        "rebuild", help="build a view from the start of the log into a new target, then switch readers to it",
        description="Build a view from the start of the log into a new, versioned target while the current one "
                    "keeps serving; switch readers to it atomically once it has caught up.",
    )
    p.add_argument("--config", required=True, help="YAML file; it names the store to build in")
    p.add_argument("--view", help="the view to rebuild, by name (token-window-4000) or type, if the config has several")
    p.add_argument("--into", metavar="NAME",
                   help="the target to build (default <view>@v<N>); an unfinished one resumes")
    p.add_argument("--switch", action=argparse.BooleanOptionalAction, default=True,
                   help="switch readers to the target once it has caught up (default: yes)")
    p.add_argument("--drop-old", action="store_true", help="after the switch, delete the old target's data")
    p.add_argument("--drop", metavar="NAME", help="only delete target NAME (never the one readers use)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help=f"events per write (default {DEFAULT_BATCH})")
    p.add_argument("--handover", type=float, default=HANDOVER_SECONDS,
                   help="seconds to keep folding after the switch until a projector service takes over")
    p.add_argument("--workers", type=int, help="processes sharing the partitions of a big rebuild "
                                               "(default: one per core, at most 4; 1: this process only)")
    p.add_argument("--progress", type=float, default=5.0, help="seconds between progress lines when not a terminal")
    p.add_argument("--json", action="store_true", help="print the final report as JSON on stdout")
    p.set_defaults(run=_run)


async def _run(args: argparse.Namespace) -> int:
    if args.drop is not None:
        if args.into is not None or args.drop_old:
            raise ConfigError("--drop", "drops a target only: leave out --into and --drop-old")
        dropped = await drop(args.config, args.drop, view=args.view)
        if args.json:
            print(json.dumps(dropped.to_json()))
        print(f"helix-es: dropped {dropped.dropped} of {dropped.view} ({dropped.store}, "
              f"{dropped.namespaces} namespaces)", file=sys.stderr)
        return 0
    _, part = select(args.config, args.view)
    if registry.kind(part.store).in_process:
        raise ConfigError("memory.store", f"a {part.store} view lives in the process that serves it and is built "
                                          "from the log when it starts; rebuild it there: await rebuild(config)")
    display = Display(interval=args.progress)
    try:
        report = await rebuild(args.config, view=args.view, into=args.into, switch=args.switch,
                               drop_old=args.drop_old, batch_size=args.batch_size, handover=args.handover,
                               on_progress=display, workers=args.workers)
    finally:
        display.finish()
    if args.json:
        print(json.dumps(report.to_json()))
    moved = (f"; readers switched from {report.old_target}" if report.switched
             else f"; readers still use {report.old_target} (--no-switch)")
    dropped = f"; dropped {', '.join(report.dropped)}" if report.dropped else ""
    print(f"helix-es: rebuilt {report.view} into {report.target}: {report.read:,} events read, {report.events:,} "
          f"folded, {report.skipped} skipped, in {report.seconds:.1f}s ({report.events_per_second:,} events/s)"
          f"{moved}{dropped}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # a worker process (see _in_workers)
    sys.exit(_worker_main())
