"""What goes on the log: an envelope around one payload, and where it landed."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from helix_es.model.errors import InvalidInput
from helix_es.model.fact_events import (
    ExtractedFact,
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    FactsMerged,
    FactsUnmerged,
    SourceTurn,
)
from helix_es.model.forget_events import MemoryForgotten, SessionCompacted, SubjectErased, content_id
from helix_es.model.message import Message
from helix_es.model.positions import Position

__all__ = [
    "ExtractedFact",
    "FactAsserted",
    "FactRetracted",
    "FactsExtracted",
    "FactsMerged",
    "FactsUnmerged",
    "MemoryForgotten",
    "Position",
    "SessionCompacted",
    "SourceTurn",
    "SubjectErased",
    "content_id",
]


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


@dataclass(frozen=True, slots=True)
class MessageRetracted:
    """The session's latest message still in its views is taken back (schema v5; an Agents SDK `pop_item`).

    The message stays on the log (audit shows both); every session view drops its latest message.
    """

    retracted: str | None = None  # event id of the MessageAdded the writer saw as latest (for audit)
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Serialized:
    """A value as a serializer wrote it: its type tag and bytes (LangGraph's `dumps_typed` pair)."""

    type: str
    data: bytes


@dataclass(frozen=True, slots=True)
class ChannelBlob:
    channel: str
    version: str  # JSON text of the channel version (a string or a number)
    value: Serialized  # type "empty": the channel has no value at this version


@dataclass(frozen=True, slots=True)
class CheckpointSaved:
    """A LangGraph checkpoint of the thread (the event's session id), schema v5.

    `checkpoint` is the checkpoint without its channel values; `blobs` carry the values of the
    channels it gives new versions. `run_id` is the metadata's, readable without the serializer.
    """

    checkpoint_ns: str
    checkpoint_id: str
    parent_checkpoint_id: str | None
    checkpoint: Serialized
    metadata: Serialized
    run_id: str | None = None
    blobs: tuple[ChannelBlob, ...] = ()


@dataclass(frozen=True, slots=True)
class PendingWrite:
    idx: int  # negative for LangGraph's special channels, which replace rather than add
    channel: str
    value: Serialized


@dataclass(frozen=True, slots=True)
class WritesSaved:
    """Pending writes of one task against a checkpoint of the thread (schema v5)."""

    checkpoint_ns: str
    checkpoint_id: str
    task_id: str
    task_path: str
    writes: tuple[PendingWrite, ...]


DELETE_SCOPES = ("thread", "runs", "keep_latest", "checkpoints")


@dataclass(frozen=True, slots=True)
class CheckpointsDeleted:
    """Checkpoints of the thread leave the checkpoint view; they stay on the log (schema v5).

    `scope`: "thread" (all, with their writes), "runs" (those whose run_id is in `run_ids`),
    "keep_latest" (all but the latest of each checkpoint namespace) or "checkpoints" (those in
    `checkpoints`, schema v6). `blobs` (v6) go too, whatever the scope: the saver lists the channel
    blobs only deleted checkpoints referred to (the view cannot tell: a checkpoint's channel
    versions are inside its serialized value).
    """

    scope: str
    run_ids: tuple[str, ...] = ()
    checkpoints: tuple[tuple[str, str], ...] = ()  # (checkpoint_ns, checkpoint_id)
    blobs: tuple[tuple[str, str, str], ...] = ()  # (checkpoint_ns, channel, version)

    def __post_init__(self) -> None:
        if self.scope not in DELETE_SCOPES:
            raise InvalidInput("scope", f"must be one of {', '.join(DELETE_SCOPES)}, got {self.scope!r}")


@dataclass(frozen=True, slots=True)
class ItemPut:
    """A LangGraph store item written, created or replaced (schema v5)."""

    namespace: tuple[str, ...]  # the item's namespace path
    key: str
    value: str  # JSON text of the item's value (an object)
    index: bool | tuple[str, ...] | None = None  # None: the store's index config; False: not indexed
    ttl_minutes: float | None = None


@dataclass(frozen=True, slots=True)
class ItemDeleted:
    """A LangGraph store item deleted (schema v5)."""

    namespace: tuple[str, ...]
    key: str


@dataclass(frozen=True, slots=True)
class ItemTouched:
    """A LangGraph store item read with `refresh_ttl` (schema v7): an item with a TTL that is live at
    the event's time expires its TTL after it. On the log, so a rebuild folds the same expiries."""

    namespace: tuple[str, ...]
    key: str


Payload = (
    MessageAdded
    | MemoryCleared
    | SummaryRecorded
    | EmbeddingRecorded
    | SessionErased
    | MessageRetracted
    | CheckpointSaved
    | WritesSaved
    | CheckpointsDeleted
    | ItemPut
    | ItemDeleted
    | ItemTouched
    | FactsExtracted
    | FactAsserted
    | FactRetracted
    | FactsMerged
    | FactsUnmerged
    | MemoryForgotten
    | SessionCompacted
    | SubjectErased
)


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True, slots=True)
class Event:
    namespace: str
    session_id: str
    payload: Payload
    event_id: uuid.UUID = field(default_factory=uuid.uuid4)
    timestamp: datetime = field(default_factory=_now)
    # The caller's key for this add or clear (schema v4): a later event of the session with the
    # same key is its retry, which every view ignores (docs/usage.md,
    # "Retries and idempotency keys").
    idempotency_key: str | None = None


@dataclass(frozen=True, slots=True)
class Record:
    """An event read back from the log, with its position.

    `duplicate_of` is set by the projection that found the event to be a retry: the offset of the
    session's first event with the same idempotency key, which the folds applied instead.
    """

    event: Event
    position: Position
    duplicate_of: int | None = None


REMEMBERED_KEYS = 10_000
"""Idempotency keys each view remembers per session: a retry within the session's last this many
keyed writes shows once (older keys are forgotten, newest kept)."""
MAX_KEY_LENGTH = 255


def check_idempotency_key(key: object) -> str | None:
    """`key` if it is a valid idempotency key (or None); else `InvalidInput` naming it."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise InvalidInput("idempotency_key", f"must be a string or None, got {type(key).__name__}")
    if not key or len(key) > MAX_KEY_LENGTH or not key.isprintable():
        raise InvalidInput(
            "idempotency_key",
            f"must be 1-{MAX_KEY_LENGTH} printable characters (a UUID, a request id), got {key[:40]!r}",
        )
    return key


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)  # made once: long-term stores ask for every row


def micros(at: datetime) -> int:
    """Microseconds since the Unix epoch, exactly (the wire's timestamp-micros); a naive time is taken as UTC."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return (at - _EPOCH) // _MICROSECOND


# Readers build an Event, a Record and a Position for every record of the log: set through the slots
# directly, without the frozen dataclasses' __init__ (which sets each field by name: 2-3x slower).
_new = object.__new__
_EVENT_SET = tuple(
    getattr(Event, f).__set__
    for f in ("namespace", "session_id", "payload", "event_id", "timestamp", "idempotency_key")
)
_ADDED_SET = vars(MessageAdded)["message"].__set__
_RECORD_SET = tuple(getattr(Record, f).__set__ for f in ("event", "position", "duplicate_of"))
_POSITION_SET = tuple(getattr(Position, f).__set__ for f in ("topic", "partition", "offset"))


def added_event(
    namespace: str,
    session_id: str,
    message: Message,
    event_id: uuid.UUID,
    timestamp: datetime,
    idempotency_key: str | None,
) -> Event:
    """`Event(namespace, session_id, MessageAdded(message), event_id, timestamp, idempotency_key)`, faster."""
    event = _new(Event)
    s_ns, s_sid, s_payload, s_id, s_time, s_key = _EVENT_SET
    added = _new(MessageAdded)
    _ADDED_SET(added, message)
    s_ns(event, namespace)
    s_sid(event, session_id)
    s_payload(event, added)
    s_id(event, event_id)
    s_time(event, timestamp)
    s_key(event, idempotency_key)
    return event


def record_at(event: Event, topic: str, partition: int, offset: int) -> Record:
    """`Record(event, Position(topic, partition, offset))`, faster."""
    s_topic, s_partition, s_offset = _POSITION_SET
    position = _new(Position)
    s_topic(position, topic)
    s_partition(position, partition)
    s_offset(position, offset)
    s_event, s_position, s_duplicate = _RECORD_SET
    record = _new(Record)
    s_event(record, event)
    s_position(record, position)
    s_duplicate(record, None)
    return record
