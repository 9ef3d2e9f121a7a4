"""The hand reader of MessageAdded bodies: whatever the bytes, `decode` gives what fastavro's path gives."""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest

from helix_es import Event, MemoryCleared, Message, MessageAdded, ToolCall
from helix_es.log import added_reader
from helix_es.log.codec import HEADER_LEN, MAGIC, Codec, _long, load_schemas

CODEC = Codec()

EVENTS = [
    Event("ns", "s", MessageAdded(Message("user", ""))),
    Event("team.a-1", "session/42", MessageAdded(Message("user", "héllo ✓ " * 40, name="u", metadata={"k": "v"}))),
    Event(
        "n" * 200,
        "s" * 300,
        MessageAdded(
            Message(
                "assistant",
                "",
                tool_calls=tuple(ToolCall(f"c{i}", "f", "[" + "1, " * i + "2]") for i in range(70)),
                metadata={f"k{i}": "v" * i for i in range(70)},
            )
        ),
    ),
    Event("ns", "s", MessageAdded(Message("tool", "x" * 100_000, tool_call_id="c"))),
    Event("ns", "s", MessageAdded(Message("user", "old")), timestamp=datetime(1901, 1, 2, 3, 4, 5, 6, tzinfo=UTC)),
    Event("ns", "s", MessageAdded(Message("user", "far")), timestamp=datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)),
    Event("ns", "s", MessageAdded(Message("user", "keyed")), idempotency_key="ü" * 255),
    Event("ns", "s", MessageAdded(Message("system", "key")), uuid.UUID(int=0), idempotency_key="k"),
]


def via_fastavro(data: bytes) -> Any:
    try:
        return CODEC._decode_fastavro(data)
    except Exception as exc:  # the same error type, whichever reader
        return type(exc)


def via_decode(data: bytes) -> Any:
    try:
        return CODEC.decode(data)
    except Exception as exc:
        return type(exc)


def written(version: Any, record: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    buf.write(MAGIC + version.fingerprint)
    fastavro.schemaless_writer(buf, fastavro.parse_schema(version.schema), record)
    return buf.getvalue()


def test_every_version_of_schemas_is_read_by_hand() -> None:
    assert set(CODEC._hand) == {v.fingerprint for v in load_schemas()}


@pytest.mark.parametrize("event", EVENTS)
def test_events_read_by_hand_as_fastavro_reads_them(event: Event) -> None:
    data = CODEC.encode(event)
    hand = CODEC._hand[data[2:HEADER_LEN]](data, HEADER_LEN)
    assert hand is not None
    assert hand == CODEC._decode_fastavro(data) == event
    assert hand.timestamp.tzinfo == CODEC._decode_fastavro(data).timestamp.tzinfo


def test_other_payloads_and_odd_bytes_go_to_fastavro() -> None:
    cleared = CODEC.encode(Event("ns", "s", MemoryCleared("why")))
    assert CODEC._hand[cleared[2:HEADER_LEN]](cleared, HEADER_LEN) is None
    assert CODEC.decode(cleared) == CODEC._decode_fastavro(cleared)
    for event in EVENTS:
        data = CODEC.encode(event)
        read = CODEC._hand[data[2:HEADER_LEN]]
        for cut in range(HEADER_LEN, len(data), max(1, len(data) // 50)):
            assert read(data[:cut], HEADER_LEN) is None  # truncated
            assert via_decode(data[:cut]) == via_fastavro(data[:cut])
        assert read(data + b"\x00", HEADER_LEN) is None  # bytes left over
        assert via_decode(data + b"\x00") == via_fastavro(data + b"\x00")


def test_arrays_in_several_blocks_and_bad_text_decode_as_with_fastavro() -> None:
    v1 = load_schemas()[0]
    event = Event("ns", "s", MessageAdded(Message("assistant", "", tool_calls=(ToolCall("a", "f", "{}"),))))
    data = CODEC.encode(event)
    assert data[2:HEADER_LEN] == v1.fingerprint
    body = data[HEADER_LEN:]
    one_block = _long(1) + b"".join(added_reader_text(x) for x in ("a", "f", "{}"))
    assert one_block + b"\x00" in body
    # The same array as two blocks (one with a negative count and a byte size): fastavro reads it.
    for blocks in (one_block + one_block, _long(-1) + _long(len(one_block) - 1) + one_block[1:]):
        odd = data.replace(one_block + b"\x00", blocks + b"\x00")
        assert via_decode(odd) == via_fastavro(odd)
    bad = data.replace(b"\x02a", b"\x02\xff")  # not UTF-8
    assert via_decode(bad) is via_fastavro(bad) is UnicodeDecodeError


def added_reader_text(text: str) -> bytes:
    raw = text.encode()
    return _long(len(raw)) + raw


def test_shape_ok_refuses_an_envelope_it_does_not_know() -> None:
    schema = load_schemas()[-1].schema
    assert added_reader.shape_ok(schema) is not None
    renamed = {**schema, "fields": [*schema["fields"][:-1], {"name": "other", "type": ["null", "string"]}]}
    assert added_reader.shape_ok(renamed) is None
    record = {
        "event_id": str(uuid.uuid4()),
        "namespace": "ns",
        "session_id": "s",
        "timestamp": datetime(2030, 1, 1, tzinfo=UTC),
        "payload": ("helix.memory.MessageAdded", {"message": Message("user", "hi").to_record()}),
        "idempotency_key": None,
    }
    assert via_decode(written(load_schemas()[-1], record)).payload == MessageAdded(Message("user", "hi"))


def _unchecked(**fields: Any) -> bytes:
    """The bytes of a MessageAdded whose message breaks Message()'s rules (as a foreign producer may write)."""
    record = {
        "event_id": str(uuid.uuid4()),
        "namespace": "ns",
        "session_id": "s",
        "timestamp": datetime(2030, 1, 1, tzinfo=UTC),
        "payload": ("helix.memory.MessageAdded", {"message": {**Message("user", "hi").to_record(), **fields}}),
        "idempotency_key": None,
    }
    return written(load_schemas()[-1], record)


BAD = [
    {"role": "robot"},
    {"content": "a\x00b"},
    {"name": ""},
    {"name": "n\x00"},
    {"role": "tool"},
    {"role": "tool", "tool_call_id": ""},
    {"tool_call_id": "c1"},
    {"tool_calls": [{"id": "c", "name": "f", "arguments": "{"}]},
    {"role": "assistant", "tool_calls": [{"id": "c", "name": "f", "arguments": "NaN"}]},
    {"metadata": {"": "v"}},
    {"metadata": {"k": "\x00"}},
]


@pytest.mark.parametrize("fields", BAD)
def test_a_message_that_breaks_the_rules_is_left_to_fastavro_and_the_check(fields: dict[str, Any]) -> None:
    from helix_es.log.check import Checker
    from helix_es.model.errors import InvalidInput

    data = _unchecked(**fields)
    assert CODEC._hand[data[2:HEADER_LEN]](data, HEADER_LEN) is None
    event, checked = CODEC.read(data)
    assert not checked and event == CODEC._decode_fastavro(data) == CODEC.decode(data)
    with pytest.raises(InvalidInput):
        Checker()(event, "helix.memory.ns", b"s", checked)


@pytest.mark.parametrize("event", EVENTS)
def test_what_the_hand_reader_returns_passes_the_check(event: Event) -> None:
    decoded, checked = CODEC.read(CODEC.encode(event))
    assert checked and decoded == event
    decoded.payload.message.check()  # type: ignore[union-attr]
