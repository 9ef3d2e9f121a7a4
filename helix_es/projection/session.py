"""A session view (conversation, windows, smart; summary builds on it): one pure fold over a `ViewStore`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import ClassVar

from helix_es.model.events import Position, Record
from helix_es.model.message import Message
from helix_es.projection.fold import fold_batch
from helix_es.stores.ports import Applied, SessionKey, Snapshot, ViewStore
from helix_es.views.base import View


@dataclass
class SessionProjection:
    """A session view (one pure fold) over a shared `ViewStore`; the store's owner closes it.

    With a `cache` of its sessions' snapshots between batches, a batch of sessions written before
    is one write and no read (at most `max_cached` sessions, the least recently written forgotten
    first; a session another writer moved meanwhile fails the guard's compare-and-set and is
    loaded again); `checkpoint_partition` maps a batch's partition to the one its checkpoint is
    kept under (a rebuild worker folding a slice of a partition).
    """

    # Batches of different partitions may be applied at once: they touch different sessions and checkpoints.
    reentrant: ClassVar[bool] = True
    view: View
    store: ViewStore
    name: str = field(init=False)
    kind: str = field(init=False)
    cache: dict[SessionKey, Snapshot] | None = field(default=None, kw_only=True)
    max_cached: int = field(default=200_000, kw_only=True)
    checkpoint_partition: Callable[[int], int] | None = field(default=None, kw_only=True)
    retries: int = field(default=3, kw_only=True)

    def __post_init__(self) -> None:
        self.name = self.view.name
        self.kind = self.store.kind

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        where = self.checkpoint_partition
        folded = await fold_batch(
            self.view,
            self.store,
            records,
            retries=self.retries,
            cache=self.cache,
            checkpoint_partition=where(records[0].position.partition) if where is not None and records else None,
        )
        if self.cache is not None:
            while len(self.cache) > self.max_cached:
                del self.cache[next(iter(self.cache))]
        return Applied(folded.applied)

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self.store.checkpoint(self.view, topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        current = await self.store.checkpoint(self.view, topic, partition)
        if current is None or current < offset:
            await self.store.apply(self.view, topic, partition, [], offset)

    async def _state(self, key: SessionKey, want: Position | None) -> tuple[Message, ...] | None:
        # Without `want` the caller has seen its writes already: the state alone is one round trip.
        snap = await self.store.read(self.view, key, guard=want is not None)
        if want is not None and (snap.applied is None or snap.applied < want.offset):
            if snap.applied is None and await self._expired(key, want):
                return ()
            return None
        return snap.state

    async def _expired(self, key: SessionKey, want: Position) -> bool:
        """No guard, yet the partition checkpoint covers the write: the session expired (Redis ttl)."""
        checkpoint = await self.store.checkpoint(self.view, want.topic, want.partition)
        if checkpoint is None or checkpoint < want.offset:
            return False
        # The guard is written with the checkpoint: read again, the write may have landed in between.
        return (await self.store.read(self.view, key)).applied is None

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        state = await self._state(key, want)
        return None if state is None else self.view.render(state)

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        state = await self._state(key, want)
        return None if state is None else self.view.search(state, query, limit)

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return (await self.store.read(self.view, key)).applied

    async def close(self) -> None:
        pass
