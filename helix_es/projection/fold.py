"""Fold a batch of one topic-partition into a view: the step shared by embedded mode and projectors."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from helix_es.model.events import Record
from helix_es.stores.ports import Change, SessionKey, StaleWrite, ViewStore
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
) -> Folded:
    """Apply `records` (one topic-partition, in offset order) to `view` and write them atomically.

    Events at or below a session's guard are skipped, so a re-delivered batch changes nothing.
    `observer()` makes a fresh observer for each attempt, which sees the state after every
    event, so work that depends on the state at a point (a summary) does not depend on batching.
    """
    if not records:
        return Folded()
    topic, partition = records[0].position.topic, records[0].position.partition
    by_session: dict[SessionKey, list[Record]] = {}
    for r in records:
        by_session.setdefault(SessionKey(r.event.namespace, r.event.session_id), []).append(r)
    for attempt in range(retries + 1):
        snapshots = await store.load(view, list(by_session))
        changes = []
        states: dict[SessionKey, State] = {}
        observe = observer() if observer is not None else None
        applied = 0
        for key, recs in by_session.items():
            before = snapshots[key]
            state, last = before.state, before.applied
            for r in recs:
                if last is not None and r.position.offset <= last:
                    continue
                state, last = view.fold(state, r.event), r.position.offset
                applied += 1
                if observe is not None:
                    observe(key, state)
            states[key] = state
            if last is not None and last != before.applied:
                changes.append(Change(key, before, state, last))
        try:
            await store.apply(view, topic, partition, changes, records[-1].position.offset)
            return Folded(applied, states)
        except StaleWrite:
            if attempt == retries:
                raise
    raise AssertionError("unreachable")


async def project(view: View, store: ViewStore, records: Sequence[Record], *, retries: int = 3) -> int:
    """`fold_batch`, counting the events applied."""
    return (await fold_batch(view, store, records, retries=retries)).applied
