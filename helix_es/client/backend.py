"""A backend joins a log and a view store. Memories with the same log and store share one: a
`helix_es.client.runtime.Runtime` keeps it, and closes it when its last user releases it.

With the embedded log, the backend is also the projector: each append is folded into
every view attached to its namespace before `append` returns, and views are caught up
from the log (from their checkpoint on) when they are attached. A facts view is the exception:
it lags by design (a model answers later), so an add does not fold it; its reads and its
extraction worker catch it up from the log first (`current`), off the hot path as on Kafka.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from helix_es.client.extracting import Extracting
from helix_es.client.forgetting import FactsForgetting, Forgetting
from helix_es.config import MemoryConfig
from helix_es.log.check import Skipped
from helix_es.log.port import EventLog
from helix_es.model import names
from helix_es.model.events import Event, MessageAdded, Position, Record, micros
from helix_es.model.facts import Fact, make_facts_ask
from helix_es.model.forget_events import Use
from helix_es.projection.aliases import AliasedProjection
from helix_es.projection.driver import Append, Driver, rare_collections
from helix_es.projection.factory import open_aliases, open_store, store_key
from helix_es.projection.forgetting import FACTS_SESSION, FactsPolicy, Key, PolicyIndex
from helix_es.projection.protocol import Knower, Projection
from helix_es.stores.ports import AliasStore, ViewStore
from helix_es.views.base import View
from helix_es.views.facts import Facts

log = logging.getLogger(__name__)


Ident = tuple[str, str, str | None]  # a projection: view name, store kind, store location


@dataclass
class Backend:
    """One log, and the projections (with their stores) that memories on it read."""

    log: EventLog
    inline: bool  # fold on append (embedded log)
    skipped: int = 0  # records catch-ups passed over (the projector dead-letters them); a rebuild reports them
    _stores: dict[tuple[str, str | None], ViewStore] = field(default_factory=dict)
    _projections: dict[Ident, Projection] = field(default_factory=dict)
    _attached: dict[str, dict[Ident, Projection]] = field(default_factory=dict)  # namespace -> projections
    _behind: set[tuple[Ident, str]] = field(default_factory=set)  # inline folds that failed, per namespace
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _deferred: set[tuple[Ident, str]] = field(default_factory=set)  # folded on read, not by an add (facts views)
    _deferred_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # one such catch-up at a time
    _riders: dict[str, list[tuple[Event, asyncio.Future[Position]]]] = field(default_factory=dict)  # see append_derived
    _extracting: dict[tuple[str, str], Extracting] = field(default_factory=dict)  # (view, namespace): workers
    _forgetting: dict[tuple[str, str], Forgetting | FactsForgetting] = field(default_factory=dict)  # (view, ns)
    _uses_sent: set[tuple[str, str]] = field(default_factory=set)  # (view, ns) whose reads go to a policy elsewhere
    _aliases: dict[tuple[str, str | None], AliasStore] = field(default_factory=dict)  # per store location

    def aliases(self, memory: MemoryConfig) -> AliasStore:
        """Where the aliases of `memory`'s view live (one per store location; in process for memory stores)."""
        where = store_key(memory)
        found = self._aliases.get(where)
        if found is None:
            found = self._aliases[where] = open_aliases(memory)
        return found

    async def attach(self, memory: MemoryConfig, namespace: str) -> Projection:
        """Serve `memory`'s view for `namespace`; inline backends catch it up from the log first.

        The projection serves the target the view's alias names (`projectors.aliases`), resolved
        here once and followed about once a second by `current`.
        """
        where = store_key(memory)
        ident: Ident = (memory.view.name, *where)
        projection = self._projections.get(ident)
        if projection is None:
            store = None
            if isinstance(memory.view, View):  # session views share one store per location
                store = self._stores.get(where)
                if store is None:
                    store = self._stores[where] = open_store(memory)
            projection = self._projections[ident] = AliasedProjection(
                memory,
                self.aliases(memory),
                self.log.topic_prefix,
                store=store,
                install=self._install if self.inline else None,
            )
        if isinstance(projection, AliasedProjection):
            await projection.ready(strict=False)
        attached = self._attached.setdefault(namespace, {})
        job = self._forget(memory, projection, namespace)
        self._count_uses(memory, namespace)
        if ident not in attached:
            async with self._lock:
                if self.inline and ident not in attached:
                    # A forgetting policy's index reads along with the view's first catch-up: one read of the log.
                    along = job if isinstance(job, Forgetting) and not job.loaded else None
                    whole = await self._catch_up(projection, namespace, seen=along.index.note if along else None)
                    if along is not None and whole:
                        along.read_along()
                attached[ident] = projection
                if self.inline and isinstance(memory.view, Facts):
                    self._deferred.add((ident, namespace))
        self._extract(memory, projection, namespace)
        if job is not None:
            job.start()
        return projection

    def _forget(
        self, memory: MemoryConfig, projection: Projection, namespace: str
    ) -> Forgetting | FactsForgetting | None:
        """An inline backend's worker of the view's forgetting policy (`forget:`), made once, started by `attach`."""
        policy = memory.forget
        if not self.inline or policy is None:
            return None
        made = self._forgetting.get((memory.view.name, namespace))
        if made is not None:
            return made
        job: Forgetting | FactsForgetting
        if isinstance(memory.view, Facts):
            ask = make_facts_ask()

            async def facts() -> list[Fact]:
                await self.current(projection, namespace)
                found = await cast(Knower, projection).facts(namespace, ask)
                return found or []

            job = FactsForgetting(
                self.append_many, policy=FactsPolicy(namespace, memory.view.name, policy), facts=facts
            )
        else:
            views = tuple(part.view.name for part in memory.parts)  # a long-term view's recall index forgets with it
            index = PolicyIndex(namespace, views, policy, whole_sessions=isinstance(memory.view, View))
            job = Forgetting(
                self.append_many, index=index, read=lambda: self.log.read(namespace, on_bad=self._passed_over)
            )
        self._forgetting[(memory.view.name, namespace)] = job
        return job

    async def forget(self, namespace: str) -> int:
        """Apply every forgetting policy of `namespace` now; the items forgotten."""
        return sum([await job.step() for (_, ns), job in self._forgetting.items() if ns == namespace])

    def _count_uses(self, memory: MemoryConfig, namespace: str) -> None:
        """On a log whose policies run in another process (Kafka), the reads of a view whose policy counts
        uses (`inactive_for`, `budget`) are sent to it (`helix_es.log.kafka_uses`)."""
        policy = memory.forget
        if self.inline or policy is None or (policy.inactive_for is None and policy.budget is None):
            return
        if getattr(self.log, "uses", None) is not None:
            self._uses_sent.update((part.view.name.partition("@")[0], namespace) for part in memory.parts)

    def _send_use(self, namespace: str, view: str, session_id: str, **what: Any) -> None:
        if (view, namespace) in self._uses_sent:  # else nothing is built: reads without such a policy pay nothing
            use = Use(view, session_id, micros(datetime.now(UTC)), **what)
            cast(Any, self.log).uses.note(namespace, use)

    def used(
        self, view: str, namespace: str, session_id: str, *, messages: Sequence[Key] = (), whole: bool = False
    ) -> None:
        """A read of `view` returned items (see `PolicyIndex.used`): its policy counts them as used."""
        base = view.partition("@")[0]
        if not self.inline:
            self._send_use(namespace, base, session_id, whole=whole, messages=tuple(messages))
            return
        for (_, ns), job in self._forgetting.items():
            if ns == namespace and base in job.views and isinstance(job, Forgetting):  # an index: its owner's policy
                job.used(session_id, messages=messages, whole=whole)

    def used_facts(self, view: str, namespace: str, ids: Sequence[str]) -> None:
        """A read of facts view `view` returned these facts: its policy counts them as used."""
        if not self.inline:
            self._send_use(namespace, view.partition("@")[0], FACTS_SESSION, facts=tuple(ids))
            return
        job = self._forgetting.get((view.partition("@")[0], namespace))
        if isinstance(job, FactsForgetting):
            job.used_facts(ids)

    def _extract(self, memory: MemoryConfig, projection: Projection, namespace: str) -> None:
        """An inline backend runs the facts view's extraction worker in the background."""
        view = memory.view
        if not self.inline or not isinstance(view, Facts) or view.extract is None:
            return
        if (view.name, namespace) not in self._extracting:
            path = getattr(self.log, "path", None)
            job = Extracting(
                view,
                projection,
                namespace,
                self.append_derived,
                lambda: self.current(projection, namespace),
                dead_letters=path,
            )
            self._extracting[(view.name, namespace)] = job
            job.start()

    async def extract(self, namespace: str) -> int:
        """Run every facts view's extraction of `namespace` to the end now; the turns covered."""
        return sum([await job.drain() for (_, ns), job in self._extracting.items() if ns == namespace])

    async def current(self, projection: Projection, namespace: str) -> None:
        """Before a read: follow the view's alias (at most about once a second), and on an inline
        backend fold what a failed inline projection left behind."""
        if isinstance(projection, AliasedProjection):
            await projection.ready()  # a store unreachable when it was attached: now it must answer
            await projection.refresh()
        if not self._behind and not self._deferred:
            return
        behind = next(((i, namespace) for i, p in self._projections.items() if p is projection), None)
        if behind in self._deferred:
            async with self._deferred_lock:  # not the append lock: adds go on meanwhile
                await self._catch_up(projection, namespace, locked=False)
        elif behind in self._behind:
            async with self._lock:
                if behind in self._behind:
                    await self._catch_up(projection, namespace)
                    self._behind.discard(behind)

    async def _install(self, aliased: AliasedProjection, projection: Projection, target: str) -> None:
        """Inline backends fold into the new target from now on, caught up from the log first.

        Under the lock no append runs: the new target misses nothing, and readers that had seen their
        last write wait for it again (the generation moved), so they never read it unfinished.
        """
        async with self._lock:
            aliased.swap(projection, target)
            for namespace, attached in self._attached.items():
                for ident, attached_projection in attached.items():
                    if attached_projection is aliased:
                        try:
                            await self._catch_up(aliased, namespace)
                        except Exception as exc:
                            log.warning("view %s of %s is behind the log: %s", target, namespace, exc)
                            self._behind.add((ident, namespace))

    async def _catch_up(
        self,
        projection: Projection,
        namespace: str,
        *,
        locked: bool = True,
        seen: Callable[[Record], None] | None = None,
    ) -> bool:
        """Fold what the log holds past the checkpoint; only the last batch is live.

        What the live batch derives (a summary a crash left unasked) lands past where the read ended,
        and `_append_locked` folds it into the attached views only, not into this one (not attached
        yet, or behind): so read on from there until a round derives nothing. Not `locked` (a deferred
        view, while adds go on), it folds in small batches and lets the loop run adds between them.
        `seen` is shown every record read; True when the read began at the log's start.
        """
        derived: list[Event] = []

        async def append(event: Event) -> Position:
            derived.append(event)
            return await (self._append_locked(event) if locked else self.append(event))

        driver = Driver(projection, append=append)
        start = await self._checkpoints(projection, namespace)
        whole = not start or not any(start.values())
        while True:
            derived.clear()
            ends: dict[int, int] = {}
            # The same rules as the projector's: a record it would dead-letter is passed over, not folded.
            records = self.log.read(namespace, on_bad=self._passed_over, start=start, on_end=ends.__setitem__)
            if seen is not None:
                records = _shown(records, seen)
            if locked:
                with rare_collections():
                    await driver.replay(records, live_tail=True, from_checkpoint=True)
            else:
                await driver.replay(_yielding(records, SLICE), batch=SLICE, live_tail=True, from_checkpoint=True)
            if not derived:
                return whole
            start = ends

    async def _checkpoints(self, projection: Projection, namespace: str) -> dict[int, int] | None:
        """Where to start reading: past each partition's checkpoint, not from the log's start."""
        topic = names.topic(namespace, self.log.topic_prefix)
        start: dict[int, int] = {}
        for partition in await self.log.ends(namespace):
            done = await projection.checkpoint(topic, partition)
            start[partition] = 0 if done is None else done + 1
        return start or None

    def _passed_over(self, bad: Skipped) -> None:
        self.skipped += 1
        p = bad.position
        log.warning("%s[%d]@%d cannot be used (%s); passed over", p.topic, p.partition, p.offset, bad.error)

    async def append(self, event: Event) -> Position:
        if not self.inline:
            return await self.log.append(event)
        async with self._lock:  # log order and fold order must agree
            return await self._append_locked(event)

    async def append_many(self, events: Sequence[Event]) -> list[Position]:
        """Append `events` (of one namespace) in order, together: one batch on the log, and on an inline
        backend one fold of them all. Their positions, in order."""
        if not events:
            return []
        if not self.inline:
            return await _append_all(self.log, events)
        async with self._lock:
            return await self._append_locked_many(events)

    async def append_derived(self, events: Sequence[Event]) -> list[Position]:
        """Append what a background worker derived (facts extracted). Inline, the events ride on the next
        add's write, one sync for both: an add never waits behind a sync of theirs on the one log file.
        With no add for `RIDE` seconds they are written on their own. Their positions, in order."""
        if not events:
            return []
        if not self.inline:
            return await _append_all(self.log, events)
        namespace = events[0].namespace
        prepare = getattr(self.log, "prepare", None)
        if prepare is not None:
            for event in events:  # encoded now, one at a time, not in the add that carries them
                prepare(event)
                await asyncio.sleep(0)
        loop = asyncio.get_running_loop()
        riding = [(event, loop.create_future()) for event in events]
        self._riders.setdefault(namespace, []).extend(riding)
        waits = [w for _, w in riding]
        try:
            await asyncio.wait(waits, timeout=RIDE)
            if not all(w.done() for w in waits):
                async with self._lock:
                    if not all(w.done() for w in waits):  # no add took them meanwhile
                        await self._append_locked_many([], namespace)
            return [await w for w in waits]
        finally:
            mine = {id(w) for w in waits}  # a cancelled worker's events stay off the log
            queued = self._riders.get(namespace, [])
            for event, _ in (r for r in queued if id(r[1]) in mine):
                getattr(self.log, "unprepare", lambda _: None)(event)
            queued[:] = [r for r in queued if id(r[1]) not in mine]

    async def _append_locked(self, event: Event) -> Position:
        return (await self._append_locked_many([event]))[0]

    async def _append_locked_many(self, events: Sequence[Event], namespace: str | None = None) -> list[Position]:
        namespace = events[0].namespace if events else namespace
        assert namespace is not None
        riders = self._riders.pop(namespace, [])
        written = [e for e, _ in riders] + list(events)
        try:
            try:
                positions = await _append_all(self.log, written)
            except Exception as exc:
                if not riders:
                    raise
                for _, w in riders:  # the worker asks again; the add must not fail for a rider's sake
                    w.set_exception(exc)
                riders, written = [], list(events)
                positions = await _append_all(self.log, written)
        except asyncio.CancelledError:
            # The write may land yet (the log finishes it): the next read folds it in from the log.
            self._behind.update((ident, namespace) for ident in self._attached.get(namespace, {}))
            for _, w in riders:  # an error, not a cancel: the worker goes on (it asks again)
                w.set_exception(ConnectionError("the add that carried them was cancelled"))
            raise
        for (_, w), p in zip(riders, positions, strict=False):
            w.set_result(p)
        records = [Record(e, p) for e, p in zip(written, positions, strict=True)]
        derived: list[Event] = []  # appended once every view has these events: the log order is the fold order
        for ident, projection in self._attached.get(namespace, {}).items():
            if (ident, namespace) in self._behind or (ident, namespace) in self._deferred:
                continue  # folded in order by the next catch-up
            try:
                await Driver(projection, append=_collect(derived)).apply(records, live=True)
            except Exception as exc:
                # The events are on the log, so the write succeeded; the view catches up on the next read.
                log.warning("view %s of %s is behind the log: %s", projection.name, namespace, exc)
                self._behind.add((ident, namespace))
        for (_, ns), forgetting in self._forgetting.items():
            if ns == namespace:
                forgetting.note(records)
        if any(isinstance(e.payload, MessageAdded) for e in events):
            for (_, ns), job in self._extracting.items():
                if ns == namespace:
                    job.wake(events)
        start = 0  # derived events together, one batch per namespace run: one sync and one fold each
        while start < len(derived):
            end = start + 1
            while end < len(derived) and derived[end].namespace == derived[start].namespace:
                end += 1
            await self._append_locked_many(derived[start:end])
            start = end
        return positions[len(riders) :]

    async def close(self) -> None:
        for job in self._extracting.values():
            await job.stop()
        for forgetting in self._forgetting.values():
            await forgetting.stop()
        for projection in self._projections.values():
            await projection.close()
        for store in self._stores.values():
            await store.close()
        for aliases in self._aliases.values():
            await aliases.close()
        await self.log.close()


async def _append_all(log: EventLog, events: Sequence[Event]) -> list[Position]:
    """`log.append_many`, or one by one for a log without it (one a caller wrapped)."""
    if len(events) == 1:  # an add: the log's own path for one
        return [await log.append(events[0])]
    many = getattr(log, "append_many", None)
    if many is not None:
        return list(await many(events))
    return [await log.append(e) for e in events]


RIDE = 0.2  # seconds a worker's derived events wait for an add to carry them
SLICE = 4  # records a deferred catch-up folds before it lets the loop run an add


async def _yielding(records: AsyncIterator[Record], every: int) -> AsyncIterator[Record]:
    n = 0
    async for record in records:
        yield record
        n += 1
        if n % every == 0:
            await asyncio.sleep(0)


async def _shown(records: AsyncIterator[Record], seen: Callable[[Record], None]) -> AsyncIterator[Record]:
    async for record in records:
        seen(record)
        yield record


def _collect(into: list[Event]) -> Append:
    async def append(event: Event) -> None:
        into.append(event)

    return append
