"""The Projection protocol: one view and the store it lives in, as both sides use it.

The worker side (the Kafka runner, or the embedded backend inline) calls `apply` with the
records of one topic-partition and `checkpoint`. The read side calls `get`/`search`, which
answer None while the view has not applied the caller's last write (`want`), so the
client can wait and retry. Session views (conversation, windows, summary, smart) share one
implementation over a `ViewStore`; views whose store answers queries itself (long-term,
vector) implement this protocol directly.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol, runtime_checkable

from helix_es.model.events import Position, Record
from helix_es.model.facts import Fact, FactsAsk
from helix_es.model.message import Message
from helix_es.model.recall import Recall, RecallHit
from helix_es.stores.ports import Applied, SessionKey


class Projection(Protocol):
    @property
    def name(self) -> str:
        """The view's (or its target's) name: consumer group, keys, checkpoints."""
        ...

    @property
    def kind(self) -> str:
        """The store's kind: memory | redis | postgres."""
        ...

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

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None: ...

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        """The offset the view has applied that `want` is compared with (for error messages)."""
        ...

    async def close(self) -> None: ...


class WideProjection(Projection, Protocol):
    """A namespace-wide view's projection (long-term, vector, LangGraph items and checkpoints): its own
    store, named by a settable `name` (a rebuild target's), which can drop its data."""

    name: str

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        """Delete this view's (`name`'s) data in `namespaces` and its checkpoints of `topics`."""
        ...


@runtime_checkable
class Recaller(Protocol):
    """A projection that answers `Memory.recall` (vector and long-term views)."""

    async def recall(self, key: SessionKey, recall: Recall, want: Position | None) -> list[RecallHit] | None:
        """The best hits, or None while the view has not applied `want`."""
        ...


@runtime_checkable
class Knower(Protocol):
    """A projection that answers `Memory.facts` (the facts view)."""

    async def facts(self, namespace: str, ask: FactsAsk, want: Position | None = None) -> list[Fact] | None:
        """The facts `ask` wants, or None while the view has not applied `want`."""
        ...
