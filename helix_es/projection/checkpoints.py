"""A checkpoint view as a `Projection`, for what folds the log: the embedded saver, the projector service, rebuild."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from helix_es.model.errors import ConfigError
from helix_es.model.events import Position, Record
from helix_es.model.message import Message
from helix_es.projection.checkpoint_config import CheckpointsConfig
from helix_es.stores import registry
from helix_es.stores.ports import Applied, CheckpointStore, SessionKey
from helix_es.views.checkpoints import VIEW_NAME


def open_checkpoints(config: CheckpointsConfig, name: str = VIEW_NAME) -> CheckpointStore:
    """The checkpoint store `config` names (its owner closes it)."""
    kind = registry.kind(config.store, "checkpoints.store")
    if kind.checkpoints is None:
        raise ConfigError("checkpoints.store", f"{kind.name} keeps no checkpoints")
    return kind.checkpoints(config.location, name)


@dataclass
class CheckpointProjection:
    """Folds a checkpoint store; it holds no messages, so the memory reads find none."""

    store: CheckpointStore
    reentrant = True  # batches of different partitions touch different threads and checkpoints

    @property
    def name(self) -> str:
        return self.store.name

    @property
    def kind(self) -> str:
        return self.store.kind

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        return await self.store.apply(records, live=live)

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self.store.checkpoint(topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await self.store.advance(topic, partition, offset)

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        return []

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        return []

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.store.checkpoint(want.topic, want.partition)

    async def close(self) -> None:
        await self.store.close()
