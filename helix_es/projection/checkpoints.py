"""A checkpoint view as a `Projection`, for what folds the log: the backend, the projector service, rebuild."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from helix_es.model.events import Position, Record
from helix_es.model.message import Message
from helix_es.stores.ports import Applied, CheckpointStore, SessionKey


@dataclass
class CheckpointProjection:
    """Folds a checkpoint store; it holds no messages, so the memory reads find none. The saver reads
    `store` (through the alias: the target readers use)."""

    store: CheckpointStore
    reentrant = True  # batches of different partitions touch different threads and checkpoints

    @property
    def name(self) -> str:
        return self.store.name

    @name.setter
    def name(self, name: str) -> None:  # a rebuild target: its rows and checkpoints are under its name
        self.store.name = name

    @property
    def kind(self) -> str:
        return self.store.kind

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        return await self.store.apply(records, live=live)

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self.store.checkpoint(topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await self.store.advance(topic, partition, offset)

    async def behind(self, wants: Iterable[Position]) -> Position | None:
        """The first of `wants` this view has not applied (None: it has applied them all)."""
        for want in wants:
            applied = await self.store.checkpoint(want.topic, want.partition)
            if applied is None or applied < want.offset:
                return want
        return None

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        return []

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        return []

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.store.checkpoint(want.topic, want.partition)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        await self.store.drop(namespaces, topics)

    async def close(self) -> None:
        await self.store.close()
