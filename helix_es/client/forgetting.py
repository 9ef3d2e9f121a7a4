"""Embedded forgetting: each view's policy worker runs in the process, in the background.

An inline backend starts one worker per view with `forget:` and namespace when it attaches the view.
A message or session view's worker reads the namespace's log once into a `PolicyIndex`, is told of
every record appended after that (`note`) and of the reads that return items (`used`); a facts
view's worker reads the view's facts at each round (`FactsPolicy`). Every `every` seconds it records
what the policy lets go of as `MemoryForgotten` events, appended in small slices between adds (an add
waits for one slice at most, never for a round); the views fold them like any event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial

from helix_es.model.events import Event, Record
from helix_es.model.facts import Fact
from helix_es.projection.extraction import AppendMany
from helix_es.projection.forgetting import FactsPolicy, Key, PolicyIndex, forgotten_items

log = logging.getLogger(__name__)
SLICE = 1  # events a round appends (and folds) at a time: an add waits for one event at most


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Rounds:
    """A policy worker's life: a round every `every` seconds in the background, until stopped."""

    append: AppendMany
    clock: Callable[[], datetime] = field(default=_now, kw_only=True)
    forgotten: int = field(default=0, kw_only=True)  # items this worker forgot
    _task: asyncio.Task[None] | None = field(default=None, kw_only=True)

    @property
    def rule(self) -> PolicyIndex | FactsPolicy:
        """What decides: its `views` and its `policy` (`every`) are the worker's."""
        raise NotImplementedError

    @property
    def views(self) -> tuple[str, ...]:
        return self.rule.views

    @property
    def every(self) -> float:
        return self.rule.policy.every

    def start(self) -> None:
        """Start the rounds in the background (once: every attach of the view asks)."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=f"forget {self.views[0]}")

    async def decide(self) -> list[Event]:
        """The events recording what the policy forgets now."""
        raise NotImplementedError

    async def step(self) -> int:
        """Apply the policy now: record what it forgets; the items forgotten. The events go in slices, each
        one write and one fold, with the loop free between them: an add waits for one slice at most."""
        events = await self.decide()
        if not events:
            return 0
        for start in range(0, len(events), SLICE):
            await self.append(events[start : start + SLICE])
            await asyncio.sleep(0)
        count = sum(forgotten_items(e) for e in events)
        self.forgotten += count
        return count

    async def prepare(self) -> None:
        """What a worker does once before its first round (reading the log)."""

    async def _run(self) -> None:
        await self.prepare()  # at once: a first round then costs no read
        while True:
            await asyncio.sleep(self.every)
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # what it knows stays; the next round decides again
                log.warning("forgetting for view %s failed: %s", self.views[0], exc)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


@dataclass
class Forgetting(Rounds):
    """The policy worker of a message or session view in one namespace."""

    index: PolicyIndex = field(kw_only=True)
    read: Callable[[], AsyncIterator[Record]] = field(kw_only=True)  # the namespace's log from its start
    _loaded: asyncio.Event = field(default_factory=asyncio.Event, kw_only=True)
    _early: list[Record] | None = field(default_factory=list, kw_only=True)  # appended while the log was read
    _early_uses: list[Callable[[], None]] | None = field(default_factory=list, kw_only=True)  # reads meanwhile

    @property
    def rule(self) -> PolicyIndex:
        return self.index

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

    @property
    def loaded(self) -> bool:
        return self._loaded.is_set()

    def read_along(self) -> None:
        """The index was shown the whole log by another reader (the view's first catch-up): it is loaded."""
        self._done_loading()

    async def prepare(self) -> None:
        """Read the log into the index (once); records appended meanwhile follow it."""
        if self._loaded.is_set():
            return
        n = 0
        async for record in self.read():
            self.index.note(record)
            n += 1
            if n % 256 == 0:
                await asyncio.sleep(0)  # adds go on while a long log is read
        self._done_loading()

    def _done_loading(self) -> None:
        if self._loaded.is_set():
            return
        early, self._early = self._early or [], None
        for r in early:
            self.index.note(r)  # what the read already saw is skipped by offset
        uses, self._early_uses = self._early_uses or [], None
        for use in uses:
            use()
        self._loaded.set()

    load = prepare

    async def decide(self) -> list[Event]:
        await self.prepare()
        return await self.index.adue(self.clock())  # adds run between its steps


@dataclass
class FactsForgetting(Rounds):
    """The policy worker of a facts view in one namespace: it reads the view's facts each round."""

    policy: FactsPolicy = field(kw_only=True)
    facts: Callable[[], Awaitable[list[Fact]]] = field(kw_only=True)  # the view's facts now, caught up

    @property
    def rule(self) -> FactsPolicy:
        return self.policy

    def note(self, records: Sequence[Record]) -> None:
        """Nothing: a facts policy reads the view itself."""

    def used_facts(self, ids: Iterable[str]) -> None:
        self.policy.used(self.clock(), ids)

    async def decide(self) -> list[Event]:
        return self.policy.due(await self.facts(), self.clock())
