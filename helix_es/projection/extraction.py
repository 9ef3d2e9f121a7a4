"""The extraction worker: a facts view's pending turns become `FactsExtracted` events on the log.

It runs beside the hot path (`add` never waits for it): it reads the view's pending turns (the
fold queues every user and assistant turn), asks the extractor once per batch of one session's
turns (`Batching`: by count, or once the session has been quiet), at most `concurrency` calls at
once, retries what may pass later with backoff, and parks what still fails as a dead letter with
the reason. What it appends is folded like any event: the view drops the batch's pending turns and
keeps its facts, so a crash between the call and the append only asks again, and an append made
twice states the same fact ids (`helix_es.views.facts.fact_id`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

from helix_es.model.events import Event, FactsExtracted, Position, SourceTurn
from helix_es.projection.facts import FactsRows
from helix_es.providers.extract import ExtractionError, Extractor, Turn
from helix_es.views.facts import Batching
from helix_es.views.rows import Row

log = logging.getLogger(__name__)

# Appends events of one namespace together: a round's finished batches share one write (and one fold inline).
AppendMany = Callable[[Sequence[Event]], Awaitable[Sequence[Position]]]
DeadLetter = Callable[[dict[str, object]], Awaitable[None]]  # parks a `note_of` document
RETRIES = 4
YIELD_EVERY = 32  # pending turns looked at between two chances for the loop to run something else
BACKOFF = 0.5


@dataclass
class Stats:
    """What the worker did: calls made, turns covered, facts found, tokens, batches parked."""

    calls: int = 0
    turns: int = 0
    facts: int = 0
    prompt_tokens: int = 0
    parked: int = 0
    retries: int = 0


def note_of(
    view: str, namespace: str, session: str, turns: Sequence[Turn], error: ExtractionError
) -> dict[str, object]:
    """A dead letter's document: which turns were not extracted, by which model, and why."""
    return {
        "at": datetime.now(UTC).isoformat(),
        "kind": "extraction",
        "view": view,
        "namespace": namespace,
        "session_id": session,
        "model": error.model,
        "reason": error.reason,
        "status": error.status,
        "turns": [
            {
                "event_id": t.event_id,
                "topic": t.position.topic,
                "partition": t.position.partition,
                "offset": t.position.offset,
            }
            for t in turns
        ],
    }


def turn_of(row: Row) -> Turn:
    return Turn(
        event_id=row["event_id"],
        position=Position(row["topic"], row["partition"], row["offset"]),
        said_at=row["said_at"],
        role=row["role"],
        name=row["name"] or None,
        content=row["content"],
    )


@dataclass
class ExtractionWorker:
    """One facts view's worker; `step` does what is due now (`force`: everything pending)."""

    view: str
    facts: FactsRows
    extractor: Extractor
    append: AppendMany
    batching: Batching = field(default_factory=Batching)
    dead_letter: DeadLetter | None = None
    partitions: Callable[[], Collection[int] | None] = lambda: None  # None: every partition
    backoff: float = BACKOFF
    stats: Stats = field(default_factory=Stats)
    _parked: set[str] = field(default_factory=set)  # event ids parked by this process: not asked again
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one round at a time: no turn asked twice
    _added: dict[str, datetime] = field(default_factory=dict)  # a pending turn's log time, by event id
    # Turns whose FactsExtracted this worker appended but the view may not have folded yet (a projector
    # elsewhere folds it): not asked again while they still show as pending.
    _asked: set[str] = field(default_factory=set)
    _ready: list[Event] = field(default_factory=list)  # FactsExtracted asked, not appended yet
    _appending: asyncio.Lock = field(default_factory=asyncio.Lock)

    async def step(self, namespace: str, *, force: bool = False, now: datetime | None = None) -> int:
        """Extract every batch due in `namespace` (`force`: every pending turn); the turns covered."""
        async with self._lock:
            return await self._step(namespace, force, now)

    async def _step(self, namespace: str, force: bool, now: datetime | None) -> int:
        rows = await self.facts.pending(namespace) or []
        self._asked &= {row["event_id"] for row in rows}  # folded ones are no longer pending
        mine = self.partitions()
        by_session: dict[str, list[Turn]] = {}
        latest: dict[str, datetime] = {}  # when each session's newest pending turn was appended
        for n, row in enumerate(rows, 1):
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # an embedded worker shares the loop with adds: let one run
            if row["event_id"] in self._parked or row["event_id"] in self._asked:
                continue
            if mine is not None and row["partition"] not in mine:
                continue
            session = row["session_id"]
            self._added[row["event_id"]] = row["added_at"]
            by_session.setdefault(session, []).append(turn_of(row))
            latest[session] = max(latest.get(session, row["added_at"]), row["added_at"])
        now = now or datetime.now(UTC)
        size, idle = self.batching.turns, self.batching.idle
        batches: list[tuple[str, list[Turn]]] = []
        for session, turns in by_session.items():
            turns.sort(key=lambda t: t.position.offset)
            quiet = (now - latest[session]).total_seconds() >= idle
            for start in range(0, len(turns), size):
                chunk = turns[start : start + size]
                if len(chunk) == size or force or quiet:
                    batches.append((session, chunk))
        if not batches:
            return 0
        gate = asyncio.Semaphore(self.batching.concurrency)

        async def run(session: str, turns: list[Turn]) -> int:
            async with gate:
                return await self._batch(namespace, session, turns)

        done = await asyncio.gather(*(run(s, t) for s, t in batches))
        return sum(done)

    async def _batch(self, namespace: str, session: str, turns: list[Turn]) -> int:
        error: ExtractionError | None = None
        for attempt in range(RETRIES + 1):
            try:
                extraction = await self.extractor.extract(session, turns)
                break
            except ExtractionError as exc:
                error = exc
                self.stats.calls += 1
                if not exc.retryable or attempt == RETRIES:
                    await self._park(namespace, session, turns, exc)
                    return 0
                self.stats.retries += 1
                await asyncio.sleep(self.backoff * 2**attempt)
        else:  # pragma: no cover - the loop returns or breaks
            raise AssertionError(error)
        self.stats.calls += 1
        self.stats.prompt_tokens += extraction.prompt_tokens or 0
        sources = tuple(SourceTurn(t.event_id, t.position, t.said_at, self._added.pop(t.event_id, None)) for t in turns)
        payload = FactsExtracted(
            self.view,
            extraction.model,
            extraction.prompt_sha256,
            extraction.facts,
            sources,
            extraction.prompt_tokens,
            extraction.completion_tokens,
        )
        self._ready.append(Event(namespace, session, payload))
        await self._flush()
        return len(turns)

    async def _flush(self) -> None:
        """Append what is asked: batches finished while an append was under way go together in the next."""
        async with self._appending:
            ready, self._ready = self._ready, []
            if not ready:
                return
            await self.append(ready)  # failing, its turns stay pending: asked again
        for event in ready:
            payload = event.payload
            assert isinstance(payload, FactsExtracted)
            self._asked.update(s.event_id for s in payload.sources)
            self.stats.turns += len(payload.sources)
            self.stats.facts += len(payload.facts)

    async def _park(self, namespace: str, session: str, turns: Sequence[Turn], error: ExtractionError) -> None:
        self._parked.update(t.event_id for t in turns)
        self.stats.parked += 1
        log.error(
            "facts view %s: %d turns of %s/%s not extracted: %s", self.view, len(turns), namespace, session, error
        )
        if self.dead_letter is not None:
            await self.dead_letter(note_of(self.view, namespace, session, turns, error))
