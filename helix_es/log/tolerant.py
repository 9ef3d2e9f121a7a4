"""Reading a log that may hold events this version cannot interpret: they are shown, not refused.

`AuditCodec` is the codec, except that an event whose payload type is missing from
`helix_es.log.codec`, or that was written with a schema missing from `schemas/`, decodes to an
event whose payload is an `UnknownPayload`. Audits read the log with it; the projectors do not
(they park such events as dead letters), and the folds pass over payload types they do not know.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import fastavro

from helix_es.log.codec import HEADER_LEN, MAGIC, Codec, record_to_event
from helix_es.model import names
from helix_es.model.errors import UnknownSchema
from helix_es.model.events import Event, Payload

__all__ = ["AuditCodec", "UnknownPayload", "jsonable"]


@dataclass(frozen=True, slots=True)
class UnknownPayload:
    """A payload this version of helix-es does not know: shown as it is, ignored by every fold.

    Either its type is missing from `helix_es.codec` (then `fields` holds its decoded body), or it
    was written with a schema missing from `schemas/` (then only the envelope could be read:
    `fields` is empty, `schema` is the writer's fingerprint and `branch` its union index).
    """

    type: str  # the Avro name, e.g. helix.memory.NoteRecorded; "unknown" when the schema is unknown
    fields: Mapping[str, Any]  # JSON-safe
    schema: str | None = None
    branch: int | None = None

    @property
    def short_type(self) -> str:
        return self.type.rsplit(".", 1)[-1] if self.schema is None else "Unknown"


# Every envelope version so far starts with these fields, then the payload union's branch index.
# New fields go after the payload, so this prefix reads an event written with a newer schema.
_ENVELOPE_PREFIX = fastavro.parse_schema(
    {
        "type": "record",
        "name": "EnvelopePrefix",
        "namespace": "helix.audit",
        "fields": [
            {"name": "event_id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "namespace", "type": "string"},
            {"name": "session_id", "type": "string"},
            {"name": "timestamp", "type": {"type": "long", "logicalType": "timestamp-micros"}},
            {"name": "branch", "type": "long"},
        ],
    }
)


def jsonable(value: Any, *, avro: bool = False) -> Any:
    """Values as JSON: bytes as base64, times as ISO-8601, ids as text.

    `avro`: `value` was decoded by fastavro, whose (name, record) tuples are named union branches.
    """
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, avro=avro) for k, v in value.items()}
    if avro and isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        return {"type": value[0], "value": jsonable(value[1], avro=avro)}
    if isinstance(value, list | tuple):
        return [jsonable(v, avro=avro) for v in value]
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        return value.isoformat()
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


class AuditCodec(Codec):
    """The codec, except that an event it cannot interpret becomes an `UnknownPayload` event.

    The projector must refuse such events (dead letters); an audit must show them, and the
    folds pass over payload types they do not know.
    """

    def read(self, data: bytes) -> tuple[Event, bool]:
        try:
            return super().read(data)  # the codec's fast paths: about 10x the checked one below
        except UnknownSchema:
            return self._tolerant(data), False

    def _tolerant(self, data: bytes) -> Event:
        try:
            record = self.decode_record(data)
        except UnknownSchema:
            return self._envelope_only(data)
        try:
            return record_to_event(record)
        except UnknownSchema:
            name, body = record["payload"]
            return _event(record, UnknownPayload(name, jsonable(body, avro=True)))

    def _envelope_only(self, data: bytes) -> Event:
        if data[:2] != MAGIC or len(data) < HEADER_LEN:
            raise UnknownSchema("not Avro single-object encoding (expected C3 01 and a fingerprint)")
        try:
            head = fastavro.schemaless_reader(io.BytesIO(data[HEADER_LEN:]), _ENVELOPE_PREFIX, None)
            if not isinstance(head, dict):
                raise TypeError("not a record")
            names.check_namespace(head["namespace"])
            names.check_session_id(head["session_id"])
        except Exception:
            raise UnknownSchema(
                f"writer schema fingerprint {data[2:HEADER_LEN].hex()} is not in schemas/ and its envelope "
                "does not read as one; upgrade helix-es to audit this log"
            ) from None
        unknown = UnknownPayload("unknown", {}, schema=data[2:HEADER_LEN].hex(), branch=head["branch"])
        return _event(head, unknown)


def _event(record: Mapping[str, Any], payload: UnknownPayload) -> Event:
    # Event.payload is typed for the known payloads; the folds skip types they do not know.
    return Event(
        namespace=record["namespace"],
        session_id=record["session_id"],
        payload=cast(Payload, payload),
        event_id=record["event_id"],
        timestamp=record["timestamp"],
    )
