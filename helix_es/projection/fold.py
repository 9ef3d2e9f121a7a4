"""Fold a batch of one topic-partition into a view: the step shared by embedded mode and projectors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from helix_es.model.events import Record, SessionCompacted
from helix_es.stores.ports import Change, SessionKey, Snapshot, StaleWrite, ViewStore
from helix_es.views.base import State, View


@dataclass(frozen=True, slots=True)
class Folded:
    """Events applied, and the new state of every session the batch touched."""

    applied: int = 0
    states: dict[SessionKey, State] = field(default_factory=dict)


Observer = Callable[[SessionKey, State], None]


async def fold_batch(
    view: View,
    store: ViewStore,
    records: Sequence[Record],
    *,
    retries: int = 3,
    observer: Callable[[], Observer] | None = None,
    cache: dict[SessionKey, Snapshot] | None = None,
    checkpoint_partition: int | None = None,
) -> Folded:
    """Apply `records` (one topic-partition, in offset order) to `view` and write them atomically.

    Events at or below a session's guard are skipped, so a re-delivered batch changes nothing; a
    retry (`Record.duplicate_of`) changes nothing either, and moves the guard.
    `observer()` makes a fresh observer for each attempt, which sees the state after every
    event, so work that depends on the state at a point (a summary) does not depend on batching.

    With a `cache`, snapshots are taken from it and only sessions missing from it are loaded; after
    the write it holds every session's new snapshot, the ones written last at its end (dict order:
    least recently written first). A store writes only if each session's guard is still the one
    its snapshot names (compare-and-set), so a session another writer moved meanwhile fails the
    write as `StaleWrite`, which drops the batch's sessions from the cache: the next attempt loads
    them afresh.
    `checkpoint_partition` writes the checkpoint under another partition number than the records'.
    """
    if not records:
        return Folded()
    topic, partition = records[0].position.topic, records[0].position.partition
    if checkpoint_partition is not None:
        partition = checkpoint_partition
    groups: dict[tuple[str, str], list[Record]] = {}
    for r in records:
        e = r.event
        ident = (e.namespace, e.session_id)
        group = groups.get(ident)
        if group is None:
            groups[ident] = [r]
        else:
            group.append(r)
    by_session = {SessionKey(ns, sid): recs for (ns, sid), recs in groups.items()}
    fold, restarts = view.fold, view.restarts
    for attempt in range(retries + 1):
        if cache is None:
            snapshots = await store.load(view, list(by_session))
        else:
            # Taken before the load: a batch of another partition, folded meanwhile, may trim the cache.
            # A snapshot may say what to write, never what to skip: records at or below its guard
            # come again after a seek back, as when the store lost data (FLUSHALL): load those.
            snapshots = {}
            for k, recs in by_session.items():
                snap = cache.get(k)
                if snap is not None and (snap.applied is None or recs[0].position.offset > snap.applied):
                    snapshots[k] = snap
            missing = [k for k in by_session if k not in snapshots]
            if missing:
                loaded = await store.load(view, missing)
                snapshots.update(loaded)
                cache.update(loaded)
        changes = []
        states: dict[SessionKey, State] = {}
        observe = observer() if observer is not None else None
        applied = 0
        for key, recs in by_session.items():
            before = snapshots[key]
            state, last = before.state, before.applied
            if restarts and observe is None and len(recs) > 1:
                # After a clear the state does not depend on what came before it: fold from the last one.
                start = _last_restart(recs, restarts, last)
                if start:
                    applied += start if last is None else sum(1 for r in recs[:start] if r.position.offset > last)
                    recs = recs[start:]
            for r in recs:
                offset = r.position.offset
                if last is not None and offset <= last:
                    continue
                if r.duplicate_of is not None:  # a retry: nothing changes, but the guard moves past it
                    last = offset
                    applied += 1
                    continue
                event = r.event
                if type(event.payload) is SessionCompacted:  # its summary names its position: not in `fold`
                    state = view.compacted(state, event.payload, r.position)
                else:
                    state = fold(state, event)
                last = offset
                applied += 1
                if observe is not None:
                    observe(key, state)
            states[key] = state
            if last is not None and last != before.applied:
                changes.append(Change(key, before, state, last))
        try:
            await store.apply(view, topic, partition, changes, records[-1].position.offset)
        except StaleWrite:
            if cache is not None:
                for key in by_session:
                    cache.pop(key, None)
            if attempt == retries:
                raise
            continue
        if cache is not None:
            for c in changes:
                cache.pop(c.key, None)  # re-inserted last: the dict's order is least recently written first
                cache[c.key] = Snapshot(c.after, c.applied)
        return Folded(applied, states)
    raise AssertionError("unreachable")


def _last_restart(recs: list[Record], restarts: tuple[type, ...], guard: int | None) -> int:
    """The index of the last record past `guard` whose payload is of a type in `restarts` (not a retry),
    or 0: where a session's fold may start with the same result."""
    for i in range(len(recs) - 1, 0, -1):
        r = recs[i]
        if type(r.event.payload) in restarts and r.duplicate_of is None:
            return i if guard is None or r.position.offset > guard else 0
    return 0


async def project(view: View, store: ViewStore, records: Sequence[Record], *, retries: int = 3) -> int:
    """`fold_batch`, counting the events applied."""
    return (await fold_batch(view, store, records, retries=retries)).applied
