"""Embedded extraction: the facts views' workers run in the process, in the background.

An inline backend (the embedded log) starts one task per facts view and namespace when it attaches
the view; an append of a turn wakes it. The task asks the extractor when a batch is due (by count
or idle time), so `add` never waits on a model. Turns that still fail after the retries go to the
embedded log's dead-letter file with the reason (`dead-letters.jsonl` beside the log's topics).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from helix_es.model.events import Event
from helix_es.projection.extraction import AppendMany, DeadLetter, ExtractionWorker
from helix_es.projection.facts import facts_rows_of
from helix_es.projection.protocol import Projection
from helix_es.views.facts import Facts

log = logging.getLogger(__name__)
DEAD_LETTERS = "dead-letters.jsonl"


def file_dead_letter(directory: Path) -> DeadLetter:
    """A dead-letter writer for `ExtractionWorker`: one JSON line per batch that could not be extracted."""

    async def park(note: dict[str, object]) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / DEAD_LETTERS).open("a", encoding="utf-8") as out:
            out.write(json.dumps(note) + "\n")

    return park


SETTLE = 0.05  # seconds a woken worker waits for the rest of a burst of turns


@dataclass
class Extracting:
    """The background extraction of one facts view in one namespace."""

    view: Facts
    projection: Projection
    namespace: str
    append: AppendMany
    current: Callable[[], Awaitable[None]]  # catches the view up from the log: adds do not fold it
    dead_letters: Path | None = None
    worker: ExtractionWorker | None = None
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _task: asyncio.Task[None] | None = None
    _stopping: bool = False

    def start(self) -> None:
        rows = facts_rows_of(self.projection)
        if rows is None or self.view.extract is None:
            return
        dead = file_dead_letter(self.dead_letters) if self.dead_letters is not None else None
        self.worker = ExtractionWorker(
            self.view.name, rows, self.view.extract, self.append, self.view.batching, dead_letter=dead
        )
        self._task = asyncio.get_running_loop().create_task(self._run(), name=f"extract {self.view.name}")
        self._wake.set()  # turns the log held before this process started

    def wake(self, events: Sequence[Event]) -> None:
        self._wake.set()

    async def _run(self) -> None:
        assert self.worker is not None
        while not self._stopping:
            # asyncio.wait, not wait_for: wait_for swallows a cancel that lands as the wake-up does (3.11)
            waiter = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({waiter}, timeout=max(self.view.batching.idle, 0.05))
            finally:
                waiter.cancel()
            self._wake.clear()
            if waiter.done() and not self._stopping:
                # A burst of adds is one round, not one scan of the pending turns per add: the adds stay fast.
                await asyncio.sleep(SETTLE)
            try:
                await self.current()
                await self.worker.step(self.namespace)
            except Exception as exc:  # a store hiccup: the turns stay pending, the next round asks again
                log.warning("facts view %s of %s: extraction round failed: %s", self.view.name, self.namespace, exc)

    async def drain(self) -> int:
        """Extract every pending turn now (tests, the demo, a CLI command that waits)."""
        if self.worker is None:
            return 0
        await self.current()
        total = 0
        while covered := await self.worker.step(self.namespace, force=True):
            total += covered
            await self.current()  # what it appended, folded: those turns are no longer pending
        return total

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
