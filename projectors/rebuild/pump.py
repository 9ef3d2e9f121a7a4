"""Moving the log into a target: the replay reader for a log config, and the loop that folds it into a sink."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence

from helix_es.config import LogConfig
from helix_es.log.check import Checker
from helix_es.log.replay import Checkpoint, EmbeddedSource, KafkaSource, Source
from helix_es.projection.driver import rare_collections
from projectors.rebuild.sinks import Sink
from projectors.rebuild.status import ProgressCallback, Status


async def drain(
    source: Source,
    sink: Sink,
    status: Status,
    finished: Callable[[], Awaitable[bool]],
    *,
    at_end: bool,
    on_progress: ProgressCallback | None,
) -> None:
    """Fold what `source` yields into `sink`, one write in flight while the next batch is decoded."""
    with rare_collections():
        await _fold_all(source, sink, status, finished, at_end=at_end, on_progress=on_progress)


async def _fold_all(
    source: Source,
    sink: Sink,
    status: Status,
    finished: Callable[[], Awaitable[bool]],
    *,
    at_end: bool,
    on_progress: ProgressCallback | None,
) -> None:
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


def open_source(
    log_config: LogConfig,
    checkpoint: Checkpoint,
    batch: int,
    only: Sequence[tuple[str, int]] | None = None,
    namespaces: Sequence[str] | None = None,
) -> Source:
    """Where a rebuild reads `log_config`'s log from: `namespaces` (names or globs; every one if None), from
    `checkpoint` on."""
    # What the projector dead-letters, the rebuild skips.
    check = Checker(log_config.topic_prefix)
    if log_config.kind.broker:
        return KafkaSource(
            log_config.bootstrap_servers,
            log_config.topic_prefix,
            checkpoint,
            check=check,
            batch=batch,
            only=only,
            namespaces=namespaces,
        )
    return EmbeddedSource(
        log_config.path, log_config.topic_prefix, checkpoint, check=check, batch=batch, only=only, namespaces=namespaces
    )


async def always() -> bool:
    """A `finished` for a build: done as soon as the source is caught up."""
    return True
