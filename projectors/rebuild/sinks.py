"""Where a rebuild writes: a session view's target (`SessionSink`) or a namespace-wide projection's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from helix_es.model.events import Record
from helix_es.projection.fold import fold_batch
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import SessionKey, Snapshot, StaleWrite, ViewStore
from helix_es.views.base import View


class Sink(Protocol):
    async def apply(self, records: Sequence[Record]) -> int: ...


class SessionSink:
    """Folds a session view into its target, with every session's state kept here between batches.

    The rebuild is the target's only writer until the switch, so its own states are the truth and a
    batch is one write (the store's atomic step, with the guards it checks) and no read: the one fold,
    `fold_batch`, with this sink's `states` as its cache. Should another writer move a guard (a
    projector service after the switch), the write fails as `StaleWrite` and those sessions are read
    again. Past `max_sessions` the least recently written are forgotten (and read again if they come
    back).
    """

    def __init__(self, view: View, store: ViewStore, *, max_sessions: int = 200_000,
                 checkpoint_partition: Callable[[int], int] | None = None) -> None:
        self.view = view
        self.store = store
        self.max_sessions = max_sessions
        self.states: dict[SessionKey, Snapshot] = {}
        # A worker folding a slice of a partition's sessions keeps its progress under another partition
        # number: the partition's own checkpoint is written once every slice is done (see `workers.run_workers`).
        self.checkpoint_partition = checkpoint_partition

    async def apply(self, records: Sequence[Record]) -> int:
        if not records:
            return 0
        partition = records[0].position.partition
        where = None if self.checkpoint_partition is None else self.checkpoint_partition(partition)
        try:
            folded = await fold_batch(self.view, self.store, records, retries=4, cache=self.states,
                                      checkpoint_partition=where)
        except StaleWrite as exc:
            raise StaleWrite(f"{self.view.name}: sessions kept changing under the rebuild") from exc
        while len(self.states) > self.max_sessions:
            del self.states[next(iter(self.states))]
        return folded.applied


class ProjectionSink:
    """Long-term and vector views: their projection's own atomic apply, never live."""

    def __init__(self, projection: Projection) -> None:
        self.projection = projection

    async def apply(self, records: Sequence[Record]) -> int:
        return (await self.projection.apply(records, live=False)).events if records else 0
