"""The wire format: Avro single-object encoding, fingerprints, and schema evolution."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import fastavro
import pytest

from helix_es import Event, MemoryCleared, Message, MessageAdded, ToolCall, UnknownSchema
from helix_es.log.codec import MAGIC, Codec, fingerprint, load_schemas, schema_version
from helix_es.model.events import EmbeddingRecorded, SummaryRecorded

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"


def v1() -> dict[str, Any]:
    return json.loads((SCHEMAS / "envelope.v1.avsc").read_text())


def with_optional_field(schema: dict[str, Any]) -> dict[str, Any]:
    """A newer envelope: Message gains an optional `lang` field."""
    newer = copy.deepcopy(schema)
    message = newer["fields"][4]["type"][0]["fields"][0]["type"]
    assert message["name"] == "Message"
    message["fields"].append({"name": "lang", "type": ["null", "string"], "default": None})
    return newer


def test_crc64_avro_fingerprint_matches_the_spec() -> None:
    # The Avro spec's test vector: fingerprint64("null") = 0x63dd24e7cc258f8a, written little-endian.
    assert fingerprint("null") == (0x63DD24E7CC258F8A).to_bytes(8, "little")


def test_single_object_encoding_layout() -> None:
    codec = Codec()
    event = Event("ns", "s1", MessageAdded(Message("user", "hi")))
    data = codec.encode(event)
    assert data[:2] == MAGIC == b"\xc3\x01"
    assert data[2:10] == fingerprint(v1())
    body = fastavro.schemaless_reader(io.BytesIO(data[10:]), fastavro.parse_schema(v1()), return_record_name=True)
    assert body["payload"][0] == "helix.memory.MessageAdded"
    assert body["payload"][1]["message"]["content"] == "hi"


def test_every_schema_version_in_schemas_is_known() -> None:
    numbers = sorted(int(f.name.split(".v")[1].split(".")[0]) for f in SCHEMAS.glob("envelope.v*.avsc"))
    assert [v.version for v in load_schemas()] == numbers  # by number: v10 comes after v9


@pytest.mark.parametrize(
    "payload",
    [
        MessageAdded(Message("user", "héllo ✓", name="u", metadata={"k": "v"})),
        MessageAdded(Message("assistant", "", tool_calls=(ToolCall("c", "f", '{"a": [1, 2]}'),))),
        MessageAdded(Message("tool", "out", tool_call_id="c")),
        MemoryCleared(),
        MemoryCleared("user asked"),
    ],
)
def test_events_round_trip(payload: Any) -> None:
    codec = Codec()
    event = Event("team.a-1", "session/42", payload)
    assert codec.decode(codec.encode(event)) == event


def test_newer_writer_older_reader_and_back() -> None:
    old, new = schema_version(1, v1()), schema_version(2, with_optional_field(v1()))
    record = {
        "event_id": "7f1c2e9a-0b7d-4a53-9a43-c6f9a1f0f3aa",
        "namespace": "ns",
        "session_id": "s",
        "timestamp": 1_700_000_000_000_000,
        "payload": (
            "helix.memory.MessageAdded",
            {"message": {"role": "user", "content": "hi", "lang": "no", "tool_calls": [], "metadata": {}}},
        ),
    }
    newer_writer = Codec([old, new], writer=2)
    older_reader = Codec([old, new], reader=1)
    data = newer_writer.encode_record(record)
    assert data[2:10] == new.fingerprint
    read_old = older_reader.decode_record(data)
    assert read_old["payload"][1]["message"]["content"] == "hi"
    assert "lang" not in read_old["payload"][1]["message"]

    older_writer = Codec([old, new], writer=1)
    newer_reader = Codec([old, new], reader=2)
    old_record = copy.deepcopy(record)
    del old_record["payload"][1]["message"]["lang"]
    read_new = newer_reader.decode_record(older_writer.encode_record(old_record))
    assert read_new["payload"][1]["message"]["lang"] is None  # the default fills in


def test_unknown_fingerprint_and_garbage_are_refused() -> None:
    codec = Codec()
    data = Codec([schema_version(9, with_optional_field(v1()))]).encode(
        Event("ns", "s", MessageAdded(Message("user", "x")))
    )
    with pytest.raises(UnknownSchema, match="fingerprint"):
        codec.decode(data)
    with pytest.raises(UnknownSchema, match="single-object"):
        codec.decode(b"{json?}")


@pytest.mark.parametrize(
    "payload",
    [
        SummaryRecorded("summary-20", "", 10, "The user plans a trip to Oslo.", "gpt-x"),
        EmbeddingRecorded("openai/text-embedding-3-small", "ab" * 32, b"\x00\x00\x80?" * 4),
    ],
)
def test_derived_events_round_trip_with_version_2(payload: Any) -> None:
    codec = Codec()
    data = codec.encode(Event("ns", "s", payload))
    assert data[2:10] == load_schemas()[1].fingerprint
    assert codec.decode(data).payload == payload


def test_old_event_types_stay_on_the_oldest_schema_so_old_readers_keep_reading() -> None:
    v1_only = Codec([load_schemas()[0]])
    newest = Codec()
    added = newest.encode(Event("ns", "s", MessageAdded(Message("user", "hi"))))
    assert v1_only.decode(added).payload == MessageAdded(Message("user", "hi"))
    derived = newest.encode(Event("ns", "s", SummaryRecorded("summary-20", "", 1, "t")))
    with pytest.raises(UnknownSchema, match="newer version"):
        v1_only.decode(derived)
