"""Worker processes: a big rebuild's partitions shared out, one process per core.

`plan_shards` deals the work left out to shards; `run_workers` starts `python -m projectors.rebuild`
(`__main__`: `worker_main`) once per shard, hands it its shard as JSON on stdin and adds up the
progress it prints as JSON lines. A worker folds whole partitions, or, with fewer partitions than
workers, its slice of a session view's sessions of every partition (`Shard.k` of `Shard.n`); the
slices' own checkpoints are joined into the partitions' when every slice is done.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from helix_es.config import Config, LogConfig, MemoryConfig
from helix_es.log.replay import DEFAULT_BATCH, Checkpoint
from helix_es.projection.aliases import target_projection, target_store
from helix_es.projection.factory import open_idempotency, open_store
from helix_es.stores.ports import IdempotencyStore
from helix_es.views.base import View
from projectors.rebuild.bulk import defer_indexes
from projectors.rebuild.pump import always, drain, open_source
from projectors.rebuild.selection import ConfigSource, select
from projectors.rebuild.sinks import ProjectionSink, SessionSink, Sink
from projectors.rebuild.status import ProgressCallback, RebuildError, Status

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


def worker_count(workers: int | None) -> int:
    """Processes to share a rebuild: `workers`, else one per core, at most 4."""
    return max(1, workers if workers is not None else min(os.cpu_count() or 1, 4))


def _config_spec(config: ConfigSource) -> Any:
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


async def plan_shards(
    log_config: LogConfig, checkpoint: Checkpoint, workers: int, config: ConfigSource, part: MemoryConfig
) -> list[Shard]:
    """The work left, dealt out to `workers` shards of about equal size; [] to do it in this process.

    Partitions go whole to the least loaded shard. With fewer partitions than workers (an embedded
    log of one namespace is one partition), a session view's partitions are sliced by session
    instead: every worker reads them all and folds only its own sessions.
    """
    if workers < 2 or _config_spec(config) is None:
        return []
    source = open_source(log_config, checkpoint, DEFAULT_BATCH, namespaces=part.served)
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


async def run_workers(
    config: ConfigSource,
    part: MemoryConfig,
    target: str,
    shards: list[Shard],
    batch: int,
    status: Status,
    on_progress: ProgressCallback | None,
) -> None:
    """Run `python -m projectors.rebuild` once per shard; their progress (JSON lines) adds up in `status`."""
    root = str(Path(__file__).resolve().parents[2])  # the directory holding projectors/ and helix_es/
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
            spec = {
                "config": _config_spec(config),
                "view": part.view.name,
                "store": part.store,
                "target": target,
                "shard": asdict(shard),
                "batch": batch,
            }
            proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "projectors.rebuild",
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
            )
            assert proc.stdin is not None
            proc.stdin.write(json.dumps(spec).encode())
            proc.stdin.close()
            procs.append(proc)
        errors = await asyncio.gather(
            *(
                asyncio.gather(follow(i, p), p.stderr.read())  # type: ignore[union-attr]
                for i, p in enumerate(procs)
            )
        )
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
    log_config, part = select(spec["config"], spec["view"], store=spec["store"])
    target = spec["target"]
    shard = Shard([(t, int(p)) for t, p in spec["shard"]["partitions"]], spec["shard"]["k"], spec["shard"]["n"])
    store = open_store(part) if isinstance(part.view, View) else None
    projection = target_projection(part, target, store)
    defer_indexes(projection)
    keys: IdempotencyStore | None = None
    if store is not None:
        assert isinstance(part.view, View)
        keys = open_idempotency(part)
        sink: Sink = SessionSink(
            part.view,
            target_store(store, part.view, target),
            target=target,
            keys=keys,
            checkpoint_partition=shard.scratch if shard.n > 1 else None,
        )
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
    source = open_source(log_config, checkpoint, int(spec["batch"]), only=shard.partitions, namespaces=part.served)
    source.slice = (shard.k, shard.n)
    every = [0.0]

    def emit(status: Status, *, final: bool = False) -> None:
        if final or time.monotonic() >= every[0]:
            every[0] = time.monotonic() + 0.5
            line: dict[str, Any] = {
                "read": status.read,
                "events": status.events,
                "skipped": status.skipped,
                "lag": status.lag,
            }
            if final:
                line["positions"] = source.reached()
            sys.stdout.write(json.dumps(line) + "\n")
            sys.stdout.flush()

    try:
        await source.start()
        status = Status(part.view.name, target, "building")
        await drain(source, sink, status, always, at_end=True, on_progress=emit)
        emit(status, final=True)
    finally:
        await source.close()
        await projection.close()
        if keys is not None:
            await keys.close()
        if store is not None:
            await store.close()


def worker_main() -> int:
    """A worker process (`python -m projectors.rebuild`): its shard as JSON on stdin, progress on stdout."""
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    asyncio.run(_worker(json.loads(sys.stdin.read())))
    return 0
