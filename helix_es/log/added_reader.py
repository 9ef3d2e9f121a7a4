"""MessageAdded events read by hand from their Avro body: 2-3x faster than fastavro's reader.

Nearly every event on the log is a MessageAdded, and a rebuild decodes every one of them. fastavro
reads a body through its file object a few bytes at a time and builds dicts the codec then turns
into an `Event`; this reads the bytes in place and builds the `Event` directly. It reads only the
plain shape a writer of `schemas/` produces (one block per array and map, no negative counts, no
bytes left over); for anything else it returns None and the codec reads the body with fastavro,
so what an event decodes to, or the error it raises, does not depend on this reader.
It also returns None for a message that breaks Message()'s rules (`_valid`), so what it returns
needs no further check of its message (`Codec.read`, `Checker`).
`shape_ok` says whether a schema version is one this reader knows field by field.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from helix_es.model.events import Event, added_event
from helix_es.model.message import ROLES, Message, ToolCall

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)  # fastavro's timestamp-micros: this + timedelta
_NEW = object.__new__
# Message's slots set directly, as `events.added_event` does: faster than setting them by name.
_MESSAGE_SET = tuple(
    getattr(Message, f).__set__
    for f in ("role", "content", "name", "tool_calls", "tool_call_id", "metadata", "occurred_at", "_tokens", "_json")
)
_ROLES = ROLES


class _Odd(Exception):
    """Bytes outside the plain shape: fastavro decides."""


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of more than one byte at `pos`: (value, position after it)."""
    n = data[pos] & 0x7F  # IndexError past the end: the caller falls back
    shift, last = 7, pos + 9  # ten bytes at most
    while True:
        pos += 1
        byte = data[pos]
        n |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (n >> 1) ^ -(n & 1), pos + 1
        if pos >= last:
            raise _Odd
        shift += 7


def _varint_any(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint of any length at `pos`: (value, position after it)."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _varint(data, pos)


def _text(data: bytes, pos: int, size: int) -> tuple[str, int]:
    """The Avro string at `pos`: (text, position after it)."""
    b = data[pos]  # IndexError past the end: the caller falls back
    if b < 0x80:
        n, pos = b >> 1, pos + 1
        if b & 1:
            raise _Odd
    else:
        b2 = data[pos + 1]
        if b2 < 0x80:  # under 8 KiB: two bytes, a positive length
            n = (b & 0x7F) | (b2 << 7)
            if n & 1:
                raise _Odd
            n, pos = n >> 1, pos + 2
        else:
            n, pos = _varint(data, pos)
            if n < 0:
                raise _Odd
    end = pos + n
    if end > size:
        raise _Odd
    return data[pos:end].decode(), end  # UnicodeDecodeError: the caller falls back


def _optional(data: bytes, pos: int, size: int) -> tuple[str | None, int]:
    """A ["null", "string"] union at `pos`."""
    b = data[pos]
    if b == 0:
        return None, pos + 1
    if b != 2:
        raise _Odd
    return _text(data, pos + 1, size)


def _count(data: bytes, pos: int) -> tuple[int, int]:
    """An array's or map's block count at `pos` (a negative one, with a block size, is not the plain shape)."""
    b = data[pos]
    if b < 0x80:
        if b & 1:
            raise _Odd
        return b >> 1, pos + 1
    n, pos = _varint(data, pos)
    if n < 0:
        raise _Odd
    return n, pos


def reader(
    branch: int, keyed: bool, dated: bool, make_uuid: Callable[[str], uuid.UUID]
) -> Callable[[bytes, int], Event | None]:
    """A reader of bodies (from `start`) of a schema whose payload union has MessageAdded at `branch`,
    with (`keyed`) or without an idempotency_key field at the end, and whose message has (`dated`, v8 on)
    or has not an occurred_at field after its metadata."""
    tag = branch << 1  # the union index as its one-byte zigzag varint (fine for the few branches there are)

    def read(data: bytes, start: int) -> Event | None:
        size = len(data)
        try:
            event_id, pos = _text(data, start, size)
            namespace, pos = _text(data, pos, size)
            session_id, pos = _text(data, pos, size)
            b = data[pos]
            if b < 0x80:
                micros, pos = (b >> 1) ^ -(b & 1), pos + 1
            else:
                micros, pos = _varint(data, pos)
            if data[pos] != tag:
                return None  # another payload type
            role, pos = _text(data, pos + 1, size)
            content, pos = _text(data, pos, size)
            name, pos = _optional(data, pos, size)
            calls: list[ToolCall] = []
            n, pos = _count(data, pos)
            while n:
                for _ in range(n):
                    call_id, pos = _text(data, pos, size)
                    call_name, pos = _text(data, pos, size)
                    arguments, pos = _text(data, pos, size)
                    calls.append(ToolCall(call_id, call_name, arguments))
                n, pos = _count(data, pos)
            tool_call_id, pos = _optional(data, pos, size)
            metadata: dict[str, str] = {}
            n, pos = _count(data, pos)
            while n:
                for _ in range(n):
                    key, pos = _text(data, pos, size)
                    metadata[key], pos = _text(data, pos, size)
                n, pos = _count(data, pos)
            occurred_at = None
            if dated:
                b = data[pos]
                if b == 2:  # ["null", timestamp-micros]: branch 1, then the µs
                    at, pos = _varint_any(data, pos + 1)
                    occurred_at = _EPOCH + timedelta(0, 0, at)
                elif b == 0:
                    pos += 1
                else:
                    raise _Odd
            key_value = None
            if keyed:
                key_value, pos = _optional(data, pos, size)
            if pos != size:
                return None  # bytes left over
            timestamp = _EPOCH + timedelta(0, 0, micros)
        except (_Odd, IndexError, UnicodeDecodeError, OverflowError):
            return None
        msg = _NEW(Message)  # as `Message.from_record`, then Message()'s rules: see `_valid`
        s_role, s_content, s_name, s_calls, s_call_id, s_metadata, s_at, s_tokens, s_json = _MESSAGE_SET
        s_role(msg, role)
        s_content(msg, content)
        s_name(msg, name)
        s_calls(msg, tuple(calls))
        s_call_id(msg, tool_call_id)
        s_metadata(msg, metadata)
        s_at(msg, occurred_at)
        s_tokens(msg, None)
        s_json(msg, None)
        if not _valid(msg):
            return None  # fastavro decodes it, and the reader's check says what is wrong with it
        return added_event(namespace, session_id, msg, make_uuid(event_id), timestamp, key_value)

    return read


def _valid(m: Message) -> bool:
    """Whether `m` keeps Message()'s rules. Its texts are decoded UTF-8 (valid str), so what is left to
    test for a plain message is cheap; a tool call's or a metadata's message runs the whole check."""
    role = m.role
    if m.tool_calls or m.metadata or role not in _ROLES or "\x00" in m.content:
        try:
            m.check()
        except Exception:  # InvalidInput, or what json raises on arguments nested too deep: the check's to say
            return False
        return True
    name = m.name
    if name is not None and (not name or "\x00" in name):
        return False
    call_id = m.tool_call_id
    if role == "tool":
        return call_id is not None and call_id != "" and "\x00" not in call_id
    return call_id is None


_STRING = "string"
_OPTIONAL = ["null", "string"]
_OPTIONAL_MICROS = ["null", {"type": "long", "logicalType": "timestamp-micros"}]
_MESSAGE_FIELDS = ["role", "content", "name", "tool_calls", "tool_call_id", "metadata"]


def _fields(record: Any) -> list[tuple[str, Any]]:
    if not isinstance(record, Mapping) or record.get("type") != "record":
        return []
    return [(f.get("name"), f.get("type")) for f in record.get("fields", [])]


def _plain(t: Any, name: str) -> bool:
    """`t` is the Avro primitive `name`, with no logical type."""
    return t == name or (isinstance(t, Mapping) and set(t) == {"type"} and t["type"] == name)


def shape_ok(schema: Mapping[str, Any]) -> tuple[int, bool, bool] | None:
    """(MessageAdded's payload branch, has idempotency_key, message has occurred_at) if `schema` (parsed) is
    the envelope this reader reads, field for field; else None."""
    top = _fields(schema)
    names = [n for n, _ in top]
    keyed = names == ["event_id", "namespace", "session_id", "timestamp", "payload", "idempotency_key"]
    if not keyed and names != ["event_id", "namespace", "session_id", "timestamp", "payload"]:
        return None
    types = dict(top)
    event_id, timestamp, payload = types["event_id"], types["timestamp"], types["payload"]
    if not (isinstance(event_id, Mapping) and event_id.get("type") == _STRING):
        return None  # uuid or plain: text either way, which the codec turns into a UUID
    if not (isinstance(timestamp, Mapping) and set(timestamp) == {"type", "logicalType"}):
        return None
    if (timestamp["type"], timestamp["logicalType"]) != ("long", "timestamp-micros"):
        return None
    if not (_plain(types["namespace"], _STRING) and _plain(types["session_id"], _STRING)):
        return None
    if keyed and types["idempotency_key"] != _OPTIONAL:
        return None
    if not isinstance(payload, list) or len(payload) > 63:
        return None
    branches = [b.get("name") if isinstance(b, Mapping) else None for b in payload]
    if "helix.memory.MessageAdded" not in branches:
        return None
    branch = branches.index("helix.memory.MessageAdded")
    added = _fields(payload[branch])
    if len(added) != 1 or added[0][0] != "message":
        return None
    message = _fields(added[0][1])
    names = [n for n, _ in message]
    dated = names == [*_MESSAGE_FIELDS, "occurred_at"]
    if not dated and names != _MESSAGE_FIELDS:
        return None
    m = dict(message)
    if dated and m["occurred_at"] != _OPTIONAL_MICROS:
        return None
    if not (_plain(m["role"], _STRING) and _plain(m["content"], _STRING)):
        return None
    if m["name"] != _OPTIONAL or m["tool_call_id"] != _OPTIONAL:
        return None
    calls, metadata = m["tool_calls"], m["metadata"]
    if not (isinstance(calls, Mapping) and calls.get("type") == "array"):
        return None
    call = _fields(calls.get("items"))
    if [n for n, _ in call] != ["id", "name", "arguments"] or not all(_plain(t, _STRING) for _, t in call):
        return None
    if not (isinstance(metadata, Mapping) and metadata.get("type") == "map"):
        return None
    if not _plain(metadata.get("values"), _STRING):
        return None
    return branch, keyed, dated
