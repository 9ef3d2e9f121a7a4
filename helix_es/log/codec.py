"""Avro single-object encoding of events: `C3 01`, CRC-64-AVRO fingerprint, binary body."""

from __future__ import annotations

import copy
import io
import json
import re
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any, cast

import fastavro
import fastavro.schema

from helix_es.log import added_reader
from helix_es.log.records import NS
from helix_es.log.records import event_to_record as event_to_record  # re-exported: readers look here
from helix_es.log.records import record_to_event as record_to_event
from helix_es.model.errors import InvalidInput, UnknownSchema
from helix_es.model.events import Event, MessageAdded
from helix_es.model.message import Message, ToolCall

MAGIC = b"\xc3\x01"
HEADER_LEN = 10
_VERSION_RE = re.compile(r"envelope\.v(\d+)\.avsc$")
_NS = NS


@dataclass(frozen=True)
class SchemaVersion:
    version: int
    schema: dict[str, Any]  # parsed by fastavro
    fingerprint: bytes  # 8 bytes, little-endian, as written on the wire


def fingerprint(schema: Mapping[str, Any] | str) -> bytes:
    canonical = fastavro.schema.to_parsing_canonical_form(cast(Any, schema))
    # fastavro prints the CRC-64-AVRO value little-endian, which is the wire order.
    return bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))


def schema_version(version: int, schema: Mapping[str, Any]) -> SchemaVersion:
    parsed: dict[str, Any] = cast(dict[str, Any], fastavro.parse_schema(dict(schema), _write_hint=False))
    return SchemaVersion(version, parsed, fingerprint(parsed))


def load_schemas(directory: Path | None = None) -> list[SchemaVersion]:
    """Every envelope version in `schemas/`, oldest first."""
    if directory is None:
        # A source checkout has schemas/ beside the package; an installed wheel carries a copy.
        beside = Path(__file__).resolve().parents[2] / "schemas"
        files: Iterable[Any] = beside.iterdir() if beside.is_dir() else resources.files("helix_es.schemas").iterdir()
    else:
        files = directory.iterdir()
    found = []
    for f in files:
        m = _VERSION_RE.search(f.name)
        if m:
            found.append(schema_version(int(m.group(1)), json.loads(f.read_text())))
    if not found:
        raise UnknownSchema(f"no envelope.v<N>.avsc schema found in {directory or 'helix_es.schemas'}")
    return sorted(found, key=lambda s: s.version)


def session_id_of(data: bytes) -> bytes | None:
    """The session id of an encoded event, read without decoding it (None if it cannot be read so).

    Every envelope version starts with event_id, namespace and session_id, three Avro strings: a
    zig-zag varint length, then the bytes. A rebuild worker uses it to skip other workers' sessions
    cheaply.
    """
    pos = HEADER_LEN
    try:
        for field_no in range(3):
            length = shift = 0
            while True:
                byte = data[pos]
                pos += 1
                length |= (byte & 0x7F) << shift
                if byte < 0x80:
                    break
                shift += 7
            length = (length >> 1) ^ -(length & 1)
            if field_no == 2:
                return data[pos : pos + length] if 0 <= length <= len(data) - pos else None
            pos += length
    except IndexError:
        return None
    return None


class Codec:
    """Encodes with one writer version; decodes anything written with a known version."""

    def __init__(
        self,
        versions: Iterable[SchemaVersion] | None = None,
        *,
        writer: int | None = None,
        reader: int | None = None,
    ) -> None:
        known = sorted(versions if versions is not None else load_schemas(), key=lambda v: v.version)
        self._high: tuple[int, bytes] = (-1, b"")  # `_micros`'s last timestamp tail
        self._by_fp = {v.fingerprint: v for v in known}
        by_version = {v.version: v for v in known}
        self.writer = by_version[writer] if writer is not None else known[-1]
        self.reader = by_version[reader] if reader is not None else known[-1]
        # Unpinned, each payload type is written with the oldest version that has it, so readers
        # that predate a new event type keep reading every event of the types they know.
        # An event with an idempotency key needs a version with that field (v4 on): the oldest that has it.
        self._writer_for: dict[str, SchemaVersion] = {}
        self._keyed_writer_for: dict[str, SchemaVersion] = {}
        # A payload that sets a field only later versions have needs the oldest version with it.
        self._later: dict[str, list[tuple[SchemaVersion, frozenset[str]]]] = {}
        # A message with `occurred_at` needs a version whose Message has it (v8 on): the oldest that has it.
        self._dated_writer: SchemaVersion | None = None
        for v in reversed(known if writer is None else [self.writer]):
            for name in _payload_names(v.schema):
                self._writer_for[name] = v
                if _has_key_field(v.schema):
                    self._keyed_writer_for[name] = v
                if name == _ADDED and _DATED in _payload_fields(v.schema, name):
                    self._dated_writer = v
                self._later.setdefault(name, []).insert(0, (v, _payload_fields(v.schema, name)))
        # Parsed with fastavro's hint, so it does not parse the schema again on every call (2x faster).
        self._write_schemas = {v.fingerprint: fastavro.parse_schema(copy.deepcopy(v.schema)) for v in known}
        # Reading with the newest schema, resolution only adds defaults that `record_to_event` fills in
        # itself, so `decode` reads with the writer's schema alone (no resolution: 2x faster), and
        # `event_id` as plain text (fastavro's UUID conversion costs more than the rest of a field).
        self._fast_read: dict[bytes, dict[str, Any]] = {}
        if self.reader is known[-1]:
            self._fast_read = {v.fingerprint: _fast_schema(v.schema) for v in known}
        # MessageAdded bodies read by hand (`added_reader`), for the versions it knows field by field, and
        # only if it reads the probes as fastavro does.
        self._hand: dict[bytes, Callable[[bytes, int], Event | None]] = {}
        for v in known if self._fast_read else []:
            shape = added_reader.shape_ok(v.schema)
            if shape is not None:
                read = added_reader.reader(*shape, _uuid)
                if all(read(d, HEADER_LEN) == self._decode_fastavro(d) for d in self._probe_bytes(v)):
                    self._hand[v.fingerprint] = read
        # `encode` writes MessageAdded (nearly every event) by hand, 2-3x faster than fastavro; used only
        # if it writes the very bytes fastavro writes for a probe covering every field.
        # (keyed?, dated?) -> (prefix, branch, has the key field, has occurred_at)
        self._added: dict[tuple[bool, bool], tuple[bytes, bytes, bool, bool]] = {}
        for keyed, dated in ((False, False), (True, False), (False, True), (True, True)):
            added = self._dated_writer if dated else (self._keyed_writer_for if keyed else self._writer_for).get(_ADDED)
            if added is not None and (not keyed or _has_key_field(added.schema)):
                index = _payload_names(added.schema).index(_ADDED)
                has_date = _DATED in _payload_fields(added.schema, _ADDED)
                self._added[keyed, dated] = (
                    MAGIC + added.fingerprint,
                    _long(index),
                    _has_key_field(added.schema),
                    has_date,
                )
        for probe in _probes():
            if _shape(probe) in self._added and self._encode_added(probe) != self.encode_record(event_to_record(probe)):
                self._added = {}
                break

    # --- records (plain dicts), as any Avro program sees them ---

    def encode_record(self, record: Mapping[str, Any]) -> bytes:
        payload = record.get("payload")
        name = payload[0] if isinstance(payload, tuple) else None
        if record.get("idempotency_key") is not None:
            writer = self._keyed_writer_for.get(name) if name else None
            if writer is None:
                raise InvalidInput(
                    "idempotency_key",
                    f"schema v{self.writer.version} has no idempotency keys (v4 on has); "
                    "unpin the log's writer version to send keyed writes",
                )
        else:
            writer = self._writer_for.get(name, self.writer) if name else self.writer
        if name and isinstance(payload, tuple):
            writer = self._with_fields(name, payload[1], writer)
        buf = io.BytesIO()
        buf.write(MAGIC + writer.fingerprint)
        fastavro.schemaless_writer(buf, self._write_schemas.get(writer.fingerprint, writer.schema), record)
        return buf.getvalue()

    def _with_fields(self, name: str, body: Mapping[str, Any], writer: SchemaVersion) -> SchemaVersion:
        """`writer`, or the oldest later version whose `name` has every field `body` sets."""
        set_ = {k for k, v in body.items() if _is_set(v)}
        if name == _ADDED and _is_set(body.get("message", {}).get("occurred_at")):
            set_.add(_DATED)  # a field of the message record, not of the payload's
        for v, fields in self._later.get(name, []):
            if v.version >= writer.version and set_ <= fields:
                return v
        missing = sorted(set_ - next((f for v, f in self._later.get(name, []) if v is writer), frozenset()))
        raise InvalidInput(
            f"payload.{missing[0] if missing else '?'}",
            f"schema v{writer.version} has no such field in {name.rsplit('.', 1)[-1]}; "
            "unpin the log's writer version to write it",
        )

    def decode_record(self, data: bytes) -> dict[str, Any]:
        if data[:2] != MAGIC or len(data) < HEADER_LEN:
            raise UnknownSchema("not Avro single-object encoding (expected C3 01 and a fingerprint)")
        fp = data[2:HEADER_LEN]
        written = self._by_fp.get(fp)
        if written is None:
            raise UnknownSchema(
                f"writer schema fingerprint {fp.hex()} is not in schemas/; "
                "upgrade helix-es to read events written by a newer version"
            )
        reader = None if written is self.reader else self.reader.schema
        body = io.BytesIO(data[HEADER_LEN:])
        return cast(dict[str, Any], fastavro.schemaless_reader(body, written.schema, reader, return_record_name=True))

    # --- events ---

    def encode(self, event: Event) -> bytes:
        if self._added and type(event.payload) is MessageAdded and _shape(event) in self._added:
            try:
                return self._encode_added(event)
            except (TypeError, AttributeError, UnicodeError, ValueError):
                pass  # not the plain shape (a naive timestamp, a str event id, ...): fastavro decides
        return self.encode_record(event_to_record(event))

    def _encode_added(self, event: Event) -> bytes:
        """The Avro body of a MessageAdded event, field by field in the writer schema's order."""
        ts = event.timestamp
        if ts.tzinfo is None:
            raise ValueError("naive timestamp")
        delta = ts - _EPOCH
        if type(event.event_id) is not _UUID:
            raise TypeError("not a uuid.UUID event id")
        m = event.payload.message  # type: ignore[union-attr]
        key = event.idempotency_key
        at = m.occurred_at
        prefix, branch, key_field, date_field = self._added[key is not None, at is not None]
        out = [
            prefix,
            _str(str(event.event_id)),
            _str(event.namespace),
            _str(event.session_id),
            self._micros((delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds),
            branch,
            _str(m.role),
            _str(m.content),
            _NULL if m.name is None else _SOME + _str(m.name),
        ]
        if m.tool_calls:
            out.append(_long(len(m.tool_calls)))
            out += [_str(c.id) + _str(c.name) + _str(c.arguments) for c in m.tool_calls]
        out.append(_END)
        out.append(_NULL if m.tool_call_id is None else _SOME + _str(m.tool_call_id))
        if m.metadata:
            out.append(_long(len(m.metadata)))
            out += [_str(k) + _str(v) for k, v in m.metadata.items()]
        out.append(_END)
        if date_field:
            if at is None:
                out.append(_NULL)
            else:
                if at.tzinfo is None:
                    raise ValueError("naive occurred_at")
                since = at - _EPOCH
                out.append(_SOME + _long((since.days * 86_400 + since.seconds) * 1_000_000 + since.microseconds))
        if key_field:
            out.append(_NULL if key is None else _SOME + _str(key))
        return b"".join(out)

    def _micros(self, n: int) -> bytes:
        """`_long` of a time in µs past the epoch's first second: bytes past the third change about once a
        second, so this codec keeps the varint tail of the last time's bits 21 and up (`_high`)."""
        z = n << 1  # zigzag of n >= 0
        high = z >> 21
        if high == 0 or n < 0 or n >= 1 << 62:
            return _long(n)
        cached = self._high  # read once: another thread may replace it
        if high != cached[0]:  # `_long` of x writes zigzag(x); this x has zigzag(x) == high
            cached = self._high = (high, _long(high >> 1) if high & 1 == 0 else _long(-(high >> 1) - 1))
        return bytes(((z & 0x7F) | 0x80, ((z >> 7) & 0x7F) | 0x80, ((z >> 14) & 0x7F) | 0x80)) + cached[1]

    def decode(self, data: bytes) -> Event:
        return self.read(data)[0]

    def read(self, data: bytes) -> tuple[Event, bool]:
        """`decode`, and whether the event's message is known to keep Message()'s rules (read by hand: the
        hand reader leaves any other to fastavro), so that a reader's `Checker` need not check it again."""
        if data[:2] != MAGIC:
            return record_to_event(self.decode_record(data)), False
        read = self._hand.get(data[2:HEADER_LEN])
        if read is not None:
            event = read(data, HEADER_LEN)
            if event is not None:
                return event, True
        return self._decode_fastavro(data), False

    def _probe_bytes(self, version: SchemaVersion) -> list[bytes]:
        """The probes as `version` writes them (keyed ones only if it has the key field)."""
        schema = self._write_schemas[version.fingerprint]
        keyed = _has_key_field(version.schema)
        out = []
        for probe in _probes():
            if probe.idempotency_key is None or keyed:
                buf = io.BytesIO()
                buf.write(MAGIC + version.fingerprint)
                fastavro.schemaless_writer(buf, schema, event_to_record(probe))
                out.append(buf.getvalue())
        return out

    def _decode_fastavro(self, data: bytes) -> Event:
        schema = self._fast_read.get(data[2:HEADER_LEN]) if data[:2] == MAGIC else None
        if schema is None:  # unknown or foreign bytes, or a pinned older reader: the checked path
            return record_to_event(self.decode_record(data))
        body = io.BytesIO(data)
        body.seek(HEADER_LEN)
        record: dict[str, Any] = cast(
            dict[str, Any], fastavro.schemaless_reader(body, schema, None, return_record_name=True)
        )
        name, fields = record["payload"]
        if name == _ADDED:  # nearly every event: built here, without the generic dispatch
            added = MessageAdded(Message.from_record(fields["message"]))
            return Event(
                record["namespace"],
                record["session_id"],
                added,
                _uuid(record["event_id"]),
                record["timestamp"],
                record.get("idempotency_key"),
            )
        record["event_id"] = _uuid(record["event_id"])
        return record_to_event(record)


_ADDED = _NS + "MessageAdded"
_DATED = "message.occurred_at"  # in `_payload_fields` of MessageAdded: its message's occurred_at (v8 on)


def _is_set(value: object) -> bool:
    return value is not None and value != [] and value != {}


def _shape(event: Event) -> tuple[bool, bool]:
    """The `Codec._added` key of a MessageAdded event: (keyed?, dated?)."""
    return event.idempotency_key is not None, event.payload.message.occurred_at is not None  # type: ignore[union-attr]


_UUID_NEW = object.__new__
_UUID_SET = object.__setattr__
_UUID = uuid.UUID
_UNKNOWN = uuid.SafeUUID.unknown  # an enum member: looked up once, not per event


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_NULL = _END = b"\x00"
_SOME = b"\x02"  # union branch 1 of ["null", "string"]
_SHORT = [bytes([n << 1]) for n in range(64)]  # zigzag varints of 0..63: one byte


def _long(n: int) -> bytes:
    """Avro long: zigzag, then a little-endian base-128 varint."""
    if 0 <= n < 64:
        return _SHORT[n]
    if not -(1 << 63) <= n < (1 << 63):
        raise ValueError("out of the Avro long range")
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _str(text: str) -> bytes:
    data = text.encode()  # TypeError on a non-str: the caller falls back to fastavro
    return _long(len(data)) + data


def _probes() -> list[Event]:
    """MessageAdded events touching every field and length class, for the hand encoder's self-check."""
    when = datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)
    full = Message(
        "assistant",
        "ø" * 70,
        name="n",
        tool_calls=(ToolCall("c1", "f", '{"a": 1}'), ToolCall("c2", "g", json.dumps("x" * 200))),
        metadata={"k": "v", "é": "w" * 64},
    )
    return [
        Event("ns", "s", MessageAdded(Message("user", "")), uuid.UUID(int=1), _EPOCH),
        Event("n" * 63, "s" * 64, MessageAdded(full), uuid.UUID(int=(1 << 128) - 1), when),
        Event(
            "ns",
            "s",
            MessageAdded(Message("tool", "r" * 9000, tool_call_id="c1")),
            uuid.uuid4(),
            datetime(1969, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
        ),
        Event("ns", "s", MessageAdded(Message("user", "")), uuid.UUID(int=2), _EPOCH, "k"),
        Event("n" * 63, "s" * 64, MessageAdded(full), uuid.UUID(int=3), when, "ü" * 200),
        Event("ns", "s", MessageAdded(Message("user", "", occurred_at=_EPOCH)), uuid.UUID(int=4), when),
        Event("ns", "s", MessageAdded(replace(full, occurred_at=when)), uuid.UUID(int=5), _EPOCH, "k"),
        Event(
            "ns",
            "s",
            MessageAdded(Message("user", "old", occurred_at=datetime(1, 1, 1, tzinfo=UTC))),
            uuid.UUID(int=6),
            when,
        ),
    ]


def _uuid(text: str) -> uuid.UUID:
    """`uuid.UUID(text)` for the canonical form writers use, without its keyword handling (4x faster)."""
    digits = text.replace("-", "")
    if len(text) != 36 or len(digits) != 32 or text[8] != "-" or text[13] != "-" or text[18] != "-":
        return _UUID(text)  # another spelling (braces, urn:uuid:) or not a UUID: raises as fastavro would
    value = _UUID_NEW(_UUID)
    _UUID_SET(value, "int", int(digits, 16))  # ValueError on a non-hex digit, as UUID()
    _UUID_SET(value, "is_safe", _UNKNOWN)
    return value


def _fast_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """`schema` with `event_id` read as plain text, parsed with fastavro's hint."""
    plain = copy.deepcopy(dict(schema))
    for f in plain["fields"]:
        if f["name"] == "event_id":
            f["type"] = "string"
    return cast(dict[str, Any], fastavro.parse_schema(plain))


def _has_key_field(schema: Mapping[str, Any]) -> bool:
    return any(f["name"] == "idempotency_key" for f in schema["fields"])


def _payload_fields(schema: Mapping[str, Any], name: str) -> frozenset[str]:
    payload = next(f for f in schema["fields"] if f["name"] == "payload")
    branch = next(b for b in payload["type"] if b["name"] == name)
    names = {f["name"] for f in branch["fields"]}
    if name == _ADDED:  # and its message record's fields, as `message.<field>`
        message = next(f["type"] for f in branch["fields"] if f["name"] == "message")
        names |= {"message." + f["name"] for f in message["fields"]}
    return frozenset(names)


def _payload_names(schema: Mapping[str, Any]) -> list[str]:
    payload = next(f for f in schema["fields"] if f["name"] == "payload")
    return [branch["name"] for branch in payload["type"]]
