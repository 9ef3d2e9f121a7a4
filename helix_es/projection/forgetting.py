"""What a forgetting policy sees of a view, and what it decides: `MemoryForgotten` events.

`PolicyIndex` keeps, for one view of one namespace, every item the view holds with when it was
said and when it was last used. It is a fold of the log (adds, clears, erasures, retractions and
earlier forgettings, with the same rules as the views) plus the reads it is told of (`used`), so
it needs no store of its own: a worker rebuilds it by reading the log on start. Reads are not on
the log, so a restarted worker counts an item's last write as its last use until it is read again.

`due` applies the policy at one moment and returns the events that record its decision, one per
session and rule (a session's events share its partition, so the offsets an event names are
always on its own partition, before it). The views fold those events (`MemoryForgotten`), and a
rebuild folds the same ones: it never asks the policy again.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Generator, Iterable, Iterator, Sequence
from datetime import datetime

from helix_es.model.events import (
    Event,
    MemoryCleared,
    MemoryForgotten,
    MessageAdded,
    MessageRetracted,
    Record,
    SessionErased,
    micros,
)
from helix_es.model.facts import Fact
from helix_es.views.forgetting import Forget

Key = tuple[str, int, int]  # (session id, partition, offset): a message; (session id, -1, -1): a whole session
MAX_OFFSETS = 2_000  # offsets one event names: a session with more is forgotten in several events
STEP = 2_048  # items a decision looks at between two pauses (`PolicyIndex.deciding`)
FACTS_SESSION = "facts"  # where a fact with no session of its own (asserted elsewhere) is forgotten


class PolicyIndex:
    """The items of `views` (one view and the views that fold with it) in one namespace.

    `whole_sessions`: the view's items are sessions (session views), else messages (long-term, vector).
    """

    def __init__(self, namespace: str, views: tuple[str, ...], policy: Forget, *, whole_sessions: bool) -> None:
        self.namespace = namespace
        self.views = views
        self.policy = policy
        self.whole_sessions = whole_sessions
        self._items: dict[Key, list[int]] = {}  # -> [said µs, used µs, written µs, reads that returned it]
        self._sessions: dict[str, set[Key]] = {}  # messages of each session (messages only)
        self._seen: dict[int, int] = {}  # partition -> the last offset noted: a record noted twice counts once
        self._everything_used = 0  # µs of the last read that returned every item (a long-term `get`)

    def __len__(self) -> int:
        return len(self._items)

    def note(self, record: Record) -> None:
        """Fold one record of the namespace's log into the index (records of a partition in order)."""
        p = record.position
        if p.offset <= self._seen.get(p.partition, -1):
            return
        self._seen[p.partition] = p.offset
        event = record.event
        if record.duplicate_of is not None or event.namespace != self.namespace:
            return
        payload, sid = event.payload, event.session_id
        if isinstance(payload, MessageAdded):
            at = micros(event.timestamp)
            said = at if payload.message.occurred_at is None else micros(payload.message.occurred_at)
            if self.whole_sessions:
                found = self._items.get((sid, -1, -1))
                if found is None:
                    self._items[(sid, -1, -1)] = [said, at, at, 0]
                else:  # a session is as old as its newest message
                    found[0], found[1], found[2] = max(found[0], said), max(found[1], at), at
            else:
                key = (sid, p.partition, p.offset)
                self._items[key] = [said, at, at, 0]
                self._sessions.setdefault(sid, set()).add(key)
        elif isinstance(payload, MemoryCleared):
            if self.whole_sessions:
                self._drop([(sid, -1, -1)])
            else:  # a long-term or vector view's clear empties the namespace up to its time
                at = micros(event.timestamp)
                self._drop([k for k, v in self._items.items() if v[2] <= at])
        elif isinstance(payload, SessionErased):
            self._forget_session(sid, p.partition, p.offset)
        elif isinstance(payload, MessageRetracted) and not self.whole_sessions:
            mine = [k for k in self._sessions.get(sid, ()) if k[1] == p.partition and k[2] < p.offset]
            if mine:
                self._drop([max(mine, key=lambda k: k[2])])
        elif isinstance(payload, MemoryForgotten) and any(payload.names(v) for v in self.views):
            if payload.session:
                self._forget_session(sid, p.partition, p.offset)
            self._drop([(sid, p.partition, o) for o in payload.offsets])

    def used(self, at: datetime, session_id: str, *, messages: Iterable[Key] = (), whole: bool = False) -> None:
        """A read by `session_id` at `at` returned items: of a session view, that session; of a namespace
        view, `messages` (session id, partition, offset: recall hits), or every item when the read
        returned the `whole` view (a long-term `get`). A substring search names no positions: not counted."""
        now = micros(at)
        if self.whole_sessions:
            keys: Iterable[Key] = [(session_id, -1, -1)]
        elif whole:
            self._everything_used = max(self._everything_used, now)
            return
        else:
            keys = messages
        for key in keys:
            found = self._items.get(key)
            if found is not None:
                found[1] = max(found[1], now)
                found[3] += 1

    def due(self, now: datetime) -> list[Event]:
        """The events recording what the policy forgets at `now`, decided in one go (`deciding`)."""
        return drain(self.deciding(now))

    async def adue(self, now: datetime) -> list[Event]:
        """`due`, letting the loop's other work (adds, folds) run between its steps."""
        decision = Decision(self.deciding(now))
        for _ in decision:
            await asyncio.sleep(0)
        return decision.events

    def deciding(self, now: datetime) -> Generator[None, None, list[Event]]:
        """`due`, one step at a time: it yields after every `STEP` items, so a worker sharing its loop
        with adds can let them run between steps (records noted meanwhile wait for the next round).
        The index drops the items it decides to forget: an append that fails leaves them to the log."""
        policy, clock = self.policy, micros(now)
        everything = self._everything_used
        age = None if policy.max_age is None else clock - int(policy.max_age * 1e6)
        idle = None if policy.inactive_for is None else clock - int(policy.inactive_for * 1e6)
        keys = list(self._items)  # the items now; a clear or erasure noted meanwhile may drop some
        gone: dict[Key, str] = {}
        kept: list[tuple[int, int, Key]] = []  # (reads, last use, item) of the rest, what a budget keeps by
        relevant = policy.keep == "relevant"
        for start in range(0, len(keys), STEP):
            for key in keys[start : start + STEP]:
                found = self._items.get(key)
                if found is None:
                    continue
                said, used, _, hits = found
                if age is not None and said < age:
                    gone[key] = "max_age"
                elif idle is not None and max(used, everything) < idle:
                    gone[key] = "inactive_for"
                elif policy.budget is not None:
                    kept.append((hits if relevant else 0, max(used, everything), key))
            yield
        if policy.budget is not None and len(kept) > policy.budget:
            runs = []  # sorted runs, merged: the least read (with keep: relevant), least recently used first
            for start in range(0, len(kept), STEP):
                runs.append(sorted(kept[start : start + STEP]))
                yield
            merged = heapq.merge(*runs)
            for n, (_, _, key) in enumerate(itertools.islice(merged, len(kept) - policy.budget), 1):
                gone[key] = "budget"
                if n % STEP == 0:
                    yield
        return (yield from self._events(gone))

    def _events(self, gone: dict[Key, str]) -> Generator[None, None, list[Event]]:
        reasons = self.policy.settings()
        grouped: dict[tuple[str, str], list[tuple[int, int]]] = {}
        for n, ((sid, partition, offset), rule) in enumerate(gone.items(), 1):
            grouped.setdefault((sid, rule), []).append((partition, offset))
            if n % STEP == 0:
                yield
        events = []
        for sid, rule in sorted(grouped, key=lambda g: (g[0], min(grouped[g]))):  # a session's rules, oldest first
            if self.whole_sessions:
                payload = MemoryForgotten(self.views, rule, reasons[rule], session=True)
                events.append(Event(self.namespace, sid, payload))
                continue
            offsets = [offset for _, offset in sorted(grouped[(sid, rule)])]
            for i in range(0, len(offsets), MAX_OFFSETS):
                chunk = tuple(offsets[i : i + MAX_OFFSETS])
                events.append(
                    Event(self.namespace, sid, MemoryForgotten(self.views, rule, reasons[rule], offsets=chunk))
                )
        doomed = list(gone)
        for start in range(0, len(doomed), STEP):
            self._drop(doomed[start : start + STEP])
            yield
        return events

    def _forget_session(self, sid: str, partition: int, offset: int) -> None:
        if self.whole_sessions:
            self._drop([(sid, -1, -1)])
        else:
            self._drop([k for k in self._sessions.get(sid, ()) if k[1] != partition or k[2] < offset])

    def _drop(self, keys: Iterable[Key]) -> None:
        for key in keys:
            if self._items.pop(key, None) is not None and not self.whole_sessions:
                held = self._sessions.get(key[0])
                if held is not None:
                    held.discard(key)
                    if not held:
                        del self._sessions[key[0]]


class Decision:
    """A paced decision (`PolicyIndex.deciding`): iterate it to run it, step by step; then `events`."""

    def __init__(self, steps: Generator[None, None, list[Event]]) -> None:
        self._steps = steps
        self.events: list[Event] = []

    def __iter__(self) -> Iterator[None]:
        self.events = yield from self._steps


def drain(steps: Generator[None, None, list[Event]]) -> list[Event]:
    """Run a paced decision to its end at once."""
    decision = Decision(steps)
    for _ in decision:
        pass
    return decision.events


def forgotten_items(event: Event) -> int:
    """How many items a `MemoryForgotten` names (a whole session counts as one)."""
    p = event.payload
    if not isinstance(p, MemoryForgotten):
        return 0
    return max(len(p.offsets) + len(p.ids), 1 if p.session else 0)


class FactsPolicy:
    """A facts view's forgetting policy: its items are facts, read from the view at each round (a fact is
    a fold of extractions, corrections and merges, not one event), with the reads it is told of.

    A fact's age counts from when the memory learned it (`known_from`): a fact is not stale for being
    about the past. Its last use is that, or the last read that returned it. The events go in the
    session the fact came from (the facts view folds a forgetting in any partition order).
    """

    def __init__(self, namespace: str, view: str, policy: Forget) -> None:
        self.namespace = namespace
        self.views = (view,)
        self.policy = policy
        self._used: dict[str, int] = {}  # fact id -> µs of the last read that returned it
        self._hits: dict[str, int] = {}  # fact id -> reads that returned it

    def used(self, at: datetime, ids: Iterable[str]) -> None:
        now = micros(at)
        for fact_id in ids:
            self._used[fact_id] = max(self._used.get(fact_id, 0), now)
            self._hits[fact_id] = self._hits.get(fact_id, 0) + 1

    def due(self, facts: Sequence[Fact], now: datetime) -> list[Event]:
        policy, clock = self.policy, micros(now)
        age = None if policy.max_age is None else clock - int(policy.max_age * 1e6)
        idle = None if policy.inactive_for is None else clock - int(policy.inactive_for * 1e6)
        learned = {f.id: micros(f.known_from) for f in facts}
        sessions = {f.id: f.session_id or FACTS_SESSION for f in facts}
        last = {i: max(t, self._used.get(i, 0)) for i, t in learned.items()}
        gone: dict[str, str] = {}
        for fact_id, at in learned.items():
            if age is not None and at < age:
                gone[fact_id] = "max_age"
            elif idle is not None and last[fact_id] < idle:
                gone[fact_id] = "inactive_for"
        if policy.budget is not None and len(learned) - len(gone) > policy.budget:
            relevant = policy.keep == "relevant"
            kept = ((self._hits.get(i, 0) if relevant else 0, t, i) for i, t in last.items() if i not in gone)
            for _, _, fact_id in heapq.nsmallest(len(learned) - len(gone) - policy.budget, kept):
                gone[fact_id] = "budget"
        reasons = policy.settings()
        grouped: dict[tuple[str, str], list[str]] = {}
        for fact_id, rule in sorted(gone.items()):
            grouped.setdefault((sessions[fact_id], rule), []).append(fact_id)
            self._used.pop(fact_id, None)
            self._hits.pop(fact_id, None)
        return [
            Event(self.namespace, sid, MemoryForgotten(self.views, rule, reasons[rule], ids=tuple(ids)))
            for (sid, rule), ids in grouped.items()
        ]
