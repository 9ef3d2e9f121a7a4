"""What goes on the log: an envelope around one payload, and where it landed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from helix_es.model.message import Message


@dataclass(frozen=True, slots=True, order=True)
class Position:
    """Where an event sits on the log: Kafka's (topic, partition, offset)."""

    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class MessageAdded:
    message: Message


@dataclass(frozen=True, slots=True)
class MemoryCleared:
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SummaryRecorded:
    """Derived: a summariser's output for a summary view (schema v2)."""

    view: str
    epoch: str
    covers: int
    text: str
    model: str | None = None


@dataclass(frozen=True, slots=True)
class EmbeddingRecorded:
    """Derived: a paid embedding, keyed by the SHA-256 of the text (schema v2)."""

    model: str
    content_sha256: str
    vector: bytes  # float32 little-endian


@dataclass(frozen=True, slots=True)
class SessionErased:
    """The session was forgotten (schema v3): its data keys are destroyed and every view drops it.

    Its earlier events stay on the log, sealed with keys that no longer exist (`helix_es.erasure`).
    """

    reason: str | None = None
    key_ids: tuple[str, ...] = ()  # the destroyed keys' ids, as named in helix-enc envelopes


Payload = MessageAdded | MemoryCleared | SummaryRecorded | EmbeddingRecorded | SessionErased


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Event:
    namespace: str
    session_id: str
    payload: Payload
    event_id: uuid.UUID = field(default_factory=uuid.uuid4)
    timestamp: datetime = field(default_factory=_now)


@dataclass(frozen=True, slots=True)
class Record:
    """An event read back from the log, with its position."""

    event: Event
    position: Position


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def micros(at: datetime) -> int:
    """Microseconds since the Unix epoch, exactly (the wire's timestamp-micros); a naive time is taken as UTC."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - _EPOCH) // timedelta(microseconds=1)
