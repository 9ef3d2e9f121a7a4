"""A projection: one view and the store it lives in, as both sides use it.

The worker side (the Kafka runner, or the embedded backend inline) calls `apply` with the
records of one topic-partition and `checkpoint`. The read side calls `get`/`search`, which
answer None while the view has not applied the caller's last write (`want`), so the
client can wait and retry. Session views (conversation, windows, summary, smart) share one
implementation over a `ViewStore`; views whose store answers queries itself (long-term,
vector) implement this protocol directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from helix_es.model.events import Event, Position, Record
from helix_es.model.message import Message
from helix_es.projection.fold import project
from helix_es.stores.ports import SessionKey, ViewStore
from helix_es.views import View


@dataclass(frozen=True, slots=True)
class Applied:
    """What one `apply` did: events folded, and derived events the driver must append to the log."""

    events: int
    derived: tuple[Event, ...] = ()


class Projection(Protocol):
    name: str  # the view's name: consumer group, keys, checkpoints
    kind: str  # the store's kind: memory | redis | postgres

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        """Fold one topic-partition's records (offset order) and its checkpoint in one atomic step.

        `live` is False while replaying history the log already has: a projection that records
        derived events (a model's summary) must not ask for them again then.
        """
        ...

    async def checkpoint(self, topic: str, partition: int) -> int | None: ...

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        """Move the checkpoint past records that were dead-lettered (never backwards)."""
        ...

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None: ...

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        ...

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        """The offset the view has applied that `want` is compared with (for error messages)."""
        ...

    async def close(self) -> None: ...


@dataclass
class SessionProjection:
    """A session view (one pure fold) over a shared `ViewStore`; the store's owner closes it."""

    view: View
    store: ViewStore
    name: str = field(init=False)
    kind: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.view.name
        self.kind = self.store.kind

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        return Applied(await project(self.view, self.store, records))

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
