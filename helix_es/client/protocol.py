"""The `Memory` protocol every client memory and middleware implements (the seed's interface)."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from helix_es.model.events import Position
from helix_es.model.message import Message


@runtime_checkable
class Memory(Protocol):
    """The seed's Memory interface."""

    async def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
        """Append `message`. A write retried with the same `idempotency_key` in the session shows once."""
        ...

    async def get(self) -> list[Message]: ...

    async def search(self, query: str, limit: int = 10) -> list[Message]: ...

    async def clear(self, *, idempotency_key: str | None = None) -> Position: ...
