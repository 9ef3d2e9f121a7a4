"""Embedded forgetting: each view's policy worker runs in the process, in the background.

An inline backend starts one task per view with `forget:` and namespace when it attaches the view.
The task reads the namespace's log once into a `PolicyIndex`, is told of every record appended
after that (`note`) and of the reads that return items (`used`), and every `every` seconds records
what the policy lets go of as `MemoryForgotten` events. Those ride on the next add's write
(`Backend.append_derived`), so adds never wait for it; the views fold them like any event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from helix_es.model.events import Record
from helix_es.projection.extraction import AppendMany
from helix_es.projection.forgetting import Key, PolicyIndex, forgotten_items

log = logging.getLogger(__name__)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Forgetting:
    """The policy worker of one view in one namespace."""

    index: PolicyIndex
    read: Callable[[], AsyncIterator[Record]]  # the namespace's log from its start
    append: AppendMany
    clock: Callable[[], datetime] = _now
    forgotten: int = 0  # items forgotten by this worker
    _loaded: asyncio.Event = field(default_factory=asyncio.Event)
    _early: list[Record] | None = field(default_factory=list)  # appended while the log was read
    _early_uses: list[Callable[[], None]] | None = field(default_factory=list)  # reads meanwhile
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        name = f"forget {self.index.views[0]}"
        self._task = asyncio.get_running_loop().create_task(self._run(), name=name)

    def note(self, records: Sequence[Record]) -> None:
        """Records just appended: folded into the index (held back until the log has been read)."""
        if self._early is not None:
            self._early.extend(records)
            return
        for r in records:
            self.index.note(r)

    def used(self, session_id: str, *, messages: Iterable[Key] = (), whole: bool = False) -> None:
        use = partial(self.index.used, self.clock(), session_id, messages=list(messages), whole=whole)
        if self._early_uses is not None:
            self._early_uses.append(use)  # the items it names are not in the index yet
        else:
            use()

    async def load(self) -> None:
        """Read the log into the index (once); records appended meanwhile follow it."""
        if self._loaded.is_set():
            return
        n = 0
        async for record in self.read():
            self.index.note(record)
            n += 1
            if n % 256 == 0:
                await asyncio.sleep(0)  # adds go on while a long log is read
        early, self._early = self._early or [], None
        for r in early:
            self.index.note(r)  # what the read already saw is skipped by offset
        uses, self._early_uses = self._early_uses or [], None
        for use in uses:
            use()
        self._loaded.set()

    async def step(self) -> int:
        """Apply the policy now: record what it forgets; the items forgotten."""
        await self.load()
        events = self.index.due(self.clock())
        if not events:
            return 0
        await self.append(events)
        count = sum(forgotten_items(e) for e in events)
        self.forgotten += count
        return count

    async def _run(self) -> None:
        # The log is read at once (a first round then costs no read); rounds come every `every`.
        await self.load()
        while True:
            await asyncio.sleep(self.index.policy.every)
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the index keeps what it knows; the next round decides again
                log.warning("forgetting for view %s failed: %s", self.index.views[0], exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
