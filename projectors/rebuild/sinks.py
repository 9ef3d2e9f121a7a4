"""Where a rebuild writes: a session view's target (`SessionSink`) or a namespace-wide projection's.

Both apply through the one driver, never live: the history holds what was derived from it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from helix_es.model.events import Record
from helix_es.projection.driver import Driver
from helix_es.projection.idempotency import IdempotentProjection
from helix_es.projection.protocol import Projection
from helix_es.projection.session import SessionProjection
from helix_es.stores.ports import IdempotencyStore, SessionKey, Snapshot, StaleWrite, ViewStore
from helix_es.views.base import View


class Sink(Protocol):
    def apply(self, records: Sequence[Record]) -> Awaitable[int]: ...


class ProjectionSink:
    """A projection's own atomic apply (long-term and vector views keep their own stores)."""

    def __init__(self, projection: Projection) -> None:
        self.driver = Driver(projection)

    async def apply(self, records: Sequence[Record]) -> int:
        return (await self.driver.apply(records, live=False)).events


class SessionSink(ProjectionSink):
    """Folds a session view into its target, with every session's state kept between batches.

    The rebuild is the target's only writer until the switch, so its own states are the truth and a
    batch is one write (the store's atomic step, with the guards it checks) and no read: the one fold
    with a state cache (`SessionProjection.cache`). Should another writer move a guard (a projector
    service after the switch), the write fails as `StaleWrite` and those sessions are read again.
    Past `max_sessions` the least recently written are forgotten (and read again if they come back).
    """

    def __init__(
        self,
        view: View,
        store: ViewStore,
        *,
        target: str,
        keys: IdempotencyStore,
        max_sessions: int = 200_000,
        checkpoint_partition: Callable[[int], int] | None = None,
    ) -> None:
        # A worker folding a slice of a partition's sessions keeps its progress under another partition
        # number: the partition's own checkpoint is written once every slice is done (see `workers`).
        self.cache: dict[SessionKey, Snapshot] = {}
        projection = SessionProjection(
            view, store, cache=self.cache, max_cached=max_sessions, checkpoint_partition=checkpoint_partition, retries=4
        )
        projection.name = target  # the name its idempotency keys are kept under (its rows: `store`'s)
        super().__init__(IdempotentProjection(projection, keys))
        self.view = view

    def forget(self) -> None:
        """Read every session again before its next write: another writer may have moved it (a rebuild
        sharing its partitions with other processes, after a rebalance)."""
        self.cache.clear()

    async def apply(self, records: Sequence[Record]) -> int:
        try:
            return await super().apply(records)
        except StaleWrite as exc:
            raise StaleWrite(f"{self.view.name}: sessions kept changing under the rebuild") from exc
