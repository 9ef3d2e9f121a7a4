"""The event log port: the one source of truth. Adapters: embedded file, Kafka."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from helix_es.events import Event, Position, Record

MAX_EVENT_BYTES = 900_000  # below Kafka's default 1 MiB message limit, with room for headers


class EventLog(Protocol):
    """Append events, read them back in order. Appends return the event's `Position`."""

    topic_prefix: str

    async def append(self, event: Event) -> Position:
        """Write one event durably; raise before writing anything if it is invalid."""
        ...

    def read(self, namespace: str, *, session_id: str | None = None) -> AsyncIterator[Record]:
        """Every event of a namespace (optionally one session) from the start, in log order."""
        ...

    async def namespaces(self) -> list[str]:
        """Namespaces that have a log."""
        ...

    async def close(self) -> None: ...
