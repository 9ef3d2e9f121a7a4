"""Fold a batch of one topic-partition into a view: the step shared by embedded mode and projectors."""

from __future__ import annotations

from collections.abc import Sequence

from helix_es.events import Record
from helix_es.views import View
from projectors.stores import Change, SessionKey, StaleWrite, ViewStore


async def project(view: View, store: ViewStore, records: Sequence[Record], *, retries: int = 3) -> int:
    """Apply `records` (one topic-partition, in offset order) to `view`; returns events applied.

    Events at or below a session's guard are skipped, so a re-delivered batch changes nothing.
    """
    if not records:
        return 0
    topic, partition = records[0].position.topic, records[0].position.partition
    by_session: dict[SessionKey, list[Record]] = {}
    for r in records:
        by_session.setdefault(SessionKey(r.event.namespace, r.event.session_id), []).append(r)
    for attempt in range(retries + 1):
        snapshots = await store.load(view, list(by_session))
        changes = []
        applied = 0
        for key, recs in by_session.items():
            before = snapshots[key]
            state, last = before.state, before.applied
            for r in recs:
                if last is not None and r.position.offset <= last:
                    continue
                state, last = view.fold(state, r.event), r.position.offset
                applied += 1
            if last != before.applied:
                changes.append(Change(key, before, state, last))  # type: ignore[arg-type]
        try:
            await store.apply(view, topic, partition, changes, records[-1].position.offset)
            return applied
        except StaleWrite:
            if attempt == retries:
                raise
    return 0
