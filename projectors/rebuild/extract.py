"""`helix-es rebuild --re-extract`: a facts view rebuilt with its extractor run over history.

A facts view folds only the extractions of its configured model, so a target built for a new
model holds every turn of history as pending. `--re-extract` asks the new model about them
(one call per batch of a session's turns, the view's `batch:` and `concurrency:`), appends the
`FactsExtracted` events to the log, folds them into the target, and only then lets the rebuild
switch readers: the blue/green switch of any rebuild. `--dry-run` stops before any call and says
what it would cost: the calls and the prompt tokens the extractor estimates. A plain rebuild never
gets here and calls no model.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from helix_es.config import LogConfig, MemoryConfig
from helix_es.model.errors import ConfigError
from helix_es.model.events import Event, Position
from helix_es.projection.extraction import ExtractionWorker, turn_of
from helix_es.projection.factory import open_log
from helix_es.projection.facts import facts_rows_of
from helix_es.projection.protocol import Projection
from helix_es.views.facts import Facts

log = logging.getLogger(__name__)


@dataclass
class ExtractReport:
    """What a re-extraction did (or, dry, would do)."""

    dry_run: bool
    model: str
    turns: int  # pending in the target before
    calls: int  # model calls made (dry: that it would make)
    prompt_tokens: int  # prompt tokens sent (dry: the extractor's estimate)
    facts: int
    parked: int  # batches that still failed: dead letters
    appended: list[Position] = field(default_factory=list)  # where its events landed: the target folds up to them

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        del out["appended"]
        return out


def check_re_extract(part: MemoryConfig) -> Facts:
    """The facts view `--re-extract` needs, or `ConfigError` saying why not."""
    view = part.view
    if not isinstance(view, Facts):
        raise ConfigError("--re-extract", f"re-extracts a facts view; {view.name} is a {part.type} view")
    if view.extract is None:
        raise ConfigError("memory.extract", "--re-extract needs the view's extractor (extract: {provider: ...})")
    return view


async def re_extract(
    part: MemoryConfig,
    log_config: LogConfig,
    projection: Projection,
    namespaces: Sequence[str],
    *,
    dry_run: bool,
    progress: Callable[[int, int], None] | None = None,
) -> ExtractReport:
    """Ask the view's extractor about every turn the target holds as pending (dry: only count the cost)."""
    view = check_re_extract(part)
    assert view.extract is not None
    rows = facts_rows_of(projection)
    assert rows is not None, projection
    pending = {ns: await rows.pending(ns) or [] for ns in namespaces}
    total = sum(len(p) for p in pending.values())
    report = ExtractReport(dry_run, view.extract.model, total, 0, 0, 0, 0)
    if dry_run:
        size = view.batching.turns
        for found in pending.values():
            by_session: dict[str, list[Any]] = {}
            for row in found:
                by_session.setdefault(row["session_id"], []).append(turn_of(row))
            for session, turns in by_session.items():
                for start in range(0, len(turns), size):
                    report.calls += 1
                    report.prompt_tokens += view.extract.prompt_tokens(session, turns[start : start + size])
        return report
    target_log = open_log(log_config)

    async def append(events: Sequence[Event]) -> Sequence[Position]:
        positions = await target_log.append_many(events)
        report.appended += positions
        return positions

    worker = ExtractionWorker(view.name, rows, view.extract, append, view.batching)
    done = 0
    try:
        for ns in namespaces:
            while covered := await worker.step(ns, force=True):
                done += covered
                if progress is not None:
                    progress(done, total)
    finally:
        await target_log.close()
    stats = worker.stats
    report.calls, report.prompt_tokens, report.facts, report.parked = (
        stats.calls,
        stats.prompt_tokens,
        stats.facts,
        stats.parked,
    )
    return report


def folded(projection: Projection, positions: Sequence[Position]) -> Callable[[], Awaitable[bool]]:
    """A rebuild's `finished`: the target has folded every event at `positions`."""

    async def done() -> bool:
        for p in positions:
            applied = await projection.checkpoint(p.topic, p.partition)
            if applied is None or applied < p.offset:
                return False
        return True

    return done


def bar(done: int, total: int) -> None:
    """A progress line on stderr (a bar on a terminal)."""
    if sys.stderr.isatty():
        width = 30
        filled = int(width * done / total) if total else width
        print(f"\rre-extract [{'#' * filled}{'.' * (width - filled)}] {done}/{total} turns", end="", file=sys.stderr)
        if done >= total:
            print(file=sys.stderr)
    else:
        print(f"re-extract: {done}/{total} turns", file=sys.stderr)
