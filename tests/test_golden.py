"""The wire format against committed golden data, not against itself.

tests/golden/fingerprints.json holds the CRC-64-AVRO fingerprint (wire byte order) of every
envelope version, and tests/golden/records.json the Avro single-object encoding (C3 01,
fingerprint, body) of every event type each version has. Both were computed once, from
schemas/envelope.v1-3.avsc (v4-v10: envelope.v4.avsc to envelope.v10.avsc) as first released, with
fastavro alone (`schemaless_writer` on each schema file; no helix-es code), and written down literally
(v10's record dicts came from helix-es's `event_to_record`, its bytes from fastavro alone).

GOLDEN FILES ARE NEVER REGENERATED. A change that makes this module fail changed the wire:
bytes already on a log would no longer read, or readers that predate it would no longer read
what is written now. A new schema version gets a new file in schemas/ and new entries here;
existing entries never change.
"""

from __future__ import annotations

import io
import json
import uuid
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import fastavro
import fastavro.schema
import pytest

from helix_es.log.codec import Codec, event_to_record, load_schemas
from helix_es.model.errors import InvalidInput
from helix_es.model.events import (
    ChannelBlob,
    CheckpointSaved,
    CheckpointsDeleted,
    EmbeddingRecorded,
    Event,
    ItemDeleted,
    ItemPut,
    ItemTouched,
    MemoryCleared,
    MessageAdded,
    MessageRetracted,
    PendingWrite,
    Serialized,
    SessionErased,
    SummaryRecorded,
    WritesSaved,
)
from helix_es.model.message import Message, ToolCall
from tests.golden_facts import FACT_TYPES, FACTS
from tests.golden_forget import FORGET, FORGET_TYPES

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
FINGERPRINTS: dict[str, str] = json.loads((GOLDEN / "fingerprints.json").read_text())
RECORDS: dict[str, dict[str, str]] = json.loads((GOLDEN / "records.json").read_text())

NS = "tenant-a.prod"
FULL = Message(
    "assistant",
    "Oslo: \u22123 °C, snø ❄ 天气 🌧",
    name="wetter-bot",
    tool_calls=(
        ToolCall("call_1", "get_weather", '{"city": "Oslo", "unit": "°C"}'),
        ToolCall("call_2", "lookup", "{}"),
    ),
    metadata={"lang": "nb", "trace-ü": "åäö"},
)

# The events the golden records hold, written out by hand.
EXPECTED: dict[str, Event] = {
    "MessageAdded.plain": Event(
        NS,
        "s-1",
        MessageAdded(Message("user", "hello")),
        uuid.UUID("00000000-0000-4000-8000-000000000001"),
        datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
    ),
    "MessageAdded.full": Event(
        NS,
        "sitzung-ü",
        MessageAdded(FULL),
        uuid.UUID("6f1c2a3b-4d5e-4f60-8a1b-2c3d4e5f6a7b"),
        datetime(2024, 2, 29, 12, 34, 56, 789012, tzinfo=UTC),
    ),
    "MessageAdded.tool": Event(
        NS,
        "sitzung-ü",
        MessageAdded(Message("tool", '{"temp": -3}', tool_call_id="call_1")),
        uuid.UUID("6f1c2a3b-4d5e-4f60-8a1b-2c3d4e5f6a7c"),
        datetime(2024, 2, 29, 12, 34, 57, 1, tzinfo=UTC),
    ),
    "MemoryCleared.reason": Event(
        NS,
        "s-1",
        MemoryCleared("user asked: vergiss alles"),
        uuid.UUID("11111111-2222-4333-8444-555555555555"),
        datetime(2025, 6, 30, 23, 59, 59, 999999, tzinfo=UTC),
    ),
    "MemoryCleared.none": Event(
        NS,
        "s-1",
        MemoryCleared(None),
        uuid.UUID("11111111-2222-4333-8444-555555555556"),
        datetime(1999, 12, 31, tzinfo=UTC),
    ),
    "SummaryRecorded": Event(
        NS,
        "s-1",
        SummaryRecorded(
            "summary-4",
            "11111111-2222-4333-8444-555555555555",
            12,
            "Der Nutzer fragte nach dem Wetter in Oslo (\u22123 °C).",
            "openai/gpt-4o-mini",
        ),
        uuid.UUID("22222222-3333-4444-8555-666666666666"),
        datetime(2025, 1, 1, 0, 0, 0, 1, tzinfo=UTC),
    ),
    "SummaryRecorded.nomodel": Event(
        NS,
        "s-1",
        SummaryRecorded("summary-4", "", 300000, "", None),
        uuid.UUID("22222222-3333-4444-8555-666666666667"),
        datetime(2025, 1, 1, 0, 0, 0, 2, tzinfo=UTC),
    ),
    "EmbeddingRecorded": Event(
        NS,
        "s-2",
        EmbeddingRecorded(
            "openai/text-embedding-3-small",
            "09f37ae4bbdc33a241efc31cba211e2ee451e98445c3c2bb727e6148f0767671",  # sha256("Oslo weather")
            b"\x00\x00\x80>\x00\x00\xc0\xbf\x00\x00@@\x00\x00\x00\x00",
        ),  # float32 LE 0.25 -1.5 3 0
        uuid.UUID("33333333-4444-4555-8666-777777777777"),
        datetime(2025, 3, 4, 5, 6, 7, 8, tzinfo=UTC),
    ),
    "SessionErased": Event(
        NS,
        "s-2",
        SessionErased("GDPR Art. 17 \u2013 Löschung", ("k-2025-01", "k-2025-02")),
        uuid.UUID("44444444-5555-4666-8777-888888888888"),
        datetime(2025, 7, 8, 9, 10, 11, 120000, tzinfo=UTC),
    ),
    "SessionErased.bare": Event(
        NS,
        "s-3",
        SessionErased(None, ()),
        uuid.UUID("44444444-5555-4666-8777-888888888889"),
        datetime(2025, 7, 8, 9, 10, 11, 120001, tzinfo=UTC),
    ),
    "MessageAdded.keyed": Event(
        NS,
        "sitzung-ü",
        MessageAdded(FULL),
        uuid.UUID("55555555-6666-4777-8888-999999999999"),
        datetime(2026, 12, 1, 8, 0, 0, 250000, tzinfo=UTC),
        "req-7f3a/ü",
    ),
    "MemoryCleared.keyed": Event(
        NS,
        "s-1",
        MemoryCleared("retried"),
        uuid.UUID("55555555-6666-4777-8888-99999999999a"),
        datetime(2026, 12, 1, 8, 0, 1, tzinfo=UTC),
        "0b9c2f4e-2d1a-4c3b-9e8f-7a6b5c4d3e2f",
    ),
    "MessageRetracted": Event(
        NS,
        "sitzung-ü",
        MessageRetracted("55555555-6666-4777-8888-999999999999", "pop_item"),
        uuid.UUID("66666666-7777-4888-8999-aaaaaaaaaaaa"),
        datetime(2026, 12, 2, 9, 0, 0, 1, tzinfo=UTC),
    ),
    "MessageRetracted.bare": Event(
        NS,
        "s-1",
        MessageRetracted(),
        uuid.UUID("66666666-7777-4888-8999-aaaaaaaaaaab"),
        datetime(2026, 12, 2, 9, 0, 0, 2, tzinfo=UTC),
    ),
    "CheckpointSaved": Event(
        NS,
        "thread-ü",
        CheckpointSaved(
            "",
            "1f0c2a3b-4d5e-6f60-8001-2c3d4e5f6a7b",
            "1f0c2a3b-4d5e-6f60-8000-2c3d4e5f6a7b",
            Serialized("msgpack", b"\x85\xa1v\x04\xa2ts"),
            Serialized("json", b'{"source": "loop", "step": 1}'),
            "run-7",
            (
                ChannelBlob("messages", '"00000000000000000000000000000002.0.5"', Serialized("msgpack", b"\x91\xa2hi")),
                ChannelBlob("branch:to:agent", "3", Serialized("empty", b"")),
            ),
        ),
        uuid.UUID("77777777-8888-4999-8aaa-bbbbbbbbbbbb"),
        datetime(2026, 12, 2, 9, 0, 1, tzinfo=UTC),
    ),
    "CheckpointSaved.root": Event(
        NS,
        "thread-1",
        CheckpointSaved("sub:1", "1f0", None, Serialized("msgpack", b""), Serialized("msgpack", b"\x80")),
        uuid.UUID("77777777-8888-4999-8aaa-bbbbbbbbbbbc"),
        datetime(2026, 12, 2, 9, 0, 2, tzinfo=UTC),
    ),
    "WritesSaved": Event(
        NS,
        "thread-ü",
        WritesSaved(
            "",
            "1f0c2a3b-4d5e-6f60-8001-2c3d4e5f6a7b",
            "task-1",
            "~__pregel_pull, agent",
            (
                PendingWrite(0, "messages", Serialized("msgpack", b"\x91\xa2ok")),
                PendingWrite(-3, "__interrupt__", Serialized("pickle", b"\x80\x05N.")),
            ),
        ),
        uuid.UUID("88888888-9999-4aaa-8bbb-cccccccccccc"),
        datetime(2026, 12, 2, 9, 0, 3, tzinfo=UTC),
    ),
    "CheckpointsDeleted": Event(
        NS,
        "thread-ü",
        CheckpointsDeleted("runs", ("run-7", "run-8")),
        uuid.UUID("99999999-aaaa-4bbb-8ccc-dddddddddddd"),
        datetime(2026, 12, 2, 9, 0, 4, tzinfo=UTC),
    ),
    "CheckpointsDeleted.thread": Event(
        NS,
        "thread-1",
        CheckpointsDeleted("thread"),
        uuid.UUID("99999999-aaaa-4bbb-8ccc-ddddddddddde"),
        datetime(2026, 12, 2, 9, 0, 5, tzinfo=UTC),
    ),
    "ItemPut": Event(
        NS,
        "users/ü-1",
        ItemPut(("users", "ü-1"), "prefs", '{"theme": "dark", "lang": "nb"}', ("theme",), 60.5),
        uuid.UUID("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"),
        datetime(2026, 12, 2, 9, 0, 6, tzinfo=UTC),
    ),
    "ItemPut.unindexed": Event(
        NS,
        "users/ü-1",
        ItemPut(("users", "ü-1"), "raw", "{}", False),
        uuid.UUID("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeef"),
        datetime(2026, 12, 2, 9, 0, 7, tzinfo=UTC),
    ),
    "ItemPut.default": Event(
        NS,
        "docs",
        ItemPut(("docs",), "a", '{"text": "x"}'),
        uuid.UUID("aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeef0"),
        datetime(2026, 12, 2, 9, 0, 8, tzinfo=UTC),
    ),
    "ItemDeleted": Event(
        NS,
        "users/ü-1",
        ItemDeleted(("users", "ü-1"), "prefs"),
        uuid.UUID("bbbbbbbb-cccc-4ddd-8eee-ffffffffffff"),
        datetime(2026, 12, 2, 9, 0, 9, tzinfo=UTC),
    ),
    "ItemTouched": Event(
        NS,
        "users/ü-1",
        ItemTouched(("users", "ü-1"), "prefs"),
        uuid.UUID("bbbbbbbb-cccc-4ddd-8eee-fffffffffff0"),
        datetime(2026, 12, 5, 18, 0, 0, tzinfo=UTC),
    ),
    "CheckpointsDeleted.listed": Event(
        NS,
        "thread-ü",
        CheckpointsDeleted(
            "checkpoints",
            checkpoints=(("", "1f0c2a3b-4d5e-6f60-8000-2c3d4e5f6a7b"), ("sub:1", "1f0")),
            blobs=(("", "messages", '"00000000000000000000000000000001.0.5"'),),
        ),
        uuid.UUID("99999999-aaaa-4bbb-8ccc-dddddddddddf"),
        datetime(2026, 12, 3, 9, 0, 0, tzinfo=UTC),
    ),
}
EXPECTED["MessageAdded.dated"] = Event(
    NS,
    "s-1",
    MessageAdded(Message("user", "imported", occurred_at=datetime(2019, 3, 4, 5, 6, 7, 890123, tzinfo=UTC))),
    uuid.UUID("cccccccc-dddd-4eee-8fff-000000000001"),
    datetime(2026, 12, 6, 10, 0, 0, tzinfo=UTC),
)
EXPECTED["MessageAdded.dated.keyed"] = Event(
    NS,
    "sitzung-ü",
    MessageAdded(replace(FULL, occurred_at=datetime(1969, 7, 20, 20, 17, 40, 1, tzinfo=UTC))),  # before the epoch
    uuid.UUID("cccccccc-dddd-4eee-8fff-000000000002"),
    datetime(2026, 12, 6, 10, 0, 1, tzinfo=UTC),
    "import-1/ü",
)
EXPECTED.update(FACTS)  # the knowledge events (v9)
EXPECTED.update(FORGET)  # forgetting, compaction, erasure (v10)
KEYED = {k for k, e in EXPECTED.items() if e.idempotency_key is not None}  # need v4 on

# Which payload types each version has (its union's branches, in order), and so the version an
# event type is first written with.
TYPES = {
    "v1": ["MessageAdded", "MemoryCleared"],
    "v2": ["MessageAdded", "MemoryCleared", "SummaryRecorded", "EmbeddingRecorded"],
    "v3": ["MessageAdded", "MemoryCleared", "SummaryRecorded", "EmbeddingRecorded", "SessionErased"],
    "v4": ["MessageAdded", "MemoryCleared", "SummaryRecorded", "EmbeddingRecorded", "SessionErased"],
    "v5": [
        "MessageAdded",
        "MemoryCleared",
        "SummaryRecorded",
        "EmbeddingRecorded",
        "SessionErased",
        "MessageRetracted",
        "CheckpointSaved",
        "WritesSaved",
        "CheckpointsDeleted",
        "ItemPut",
        "ItemDeleted",
    ],
}
TYPES["v6"] = TYPES["v5"]  # v6 adds fields to CheckpointsDeleted, no event type
TYPES["v7"] = [*TYPES["v6"], "ItemTouched"]
TYPES["v8"] = TYPES["v7"]  # v8 adds the message's occurred_at, no event type
TYPES["v9"] = [*TYPES["v8"], *FACT_TYPES]
TYPES["v10"] = [*TYPES["v9"], *FORGET_TYPES]
HAS_KEYS = {"v4", "v5", "v6", "v7", "v8", "v9", "v10"}  # versions with the envelope's idempotency_key
LISTED = {"CheckpointsDeleted.listed"}  # deletions that list checkpoints and blobs: v6 on
DATED = {"MessageAdded.dated", "MessageAdded.dated.keyed"}  # messages with occurred_at: v8 on
OLDEST = {
    "MessageAdded": "v1",
    "MemoryCleared": "v1",
    "SummaryRecorded": "v2",
    "EmbeddingRecorded": "v2",
    "SessionErased": "v3",
    **dict.fromkeys(("MessageRetracted", "CheckpointSaved", "WritesSaved", "CheckpointsDeleted"), "v5"),
    **dict.fromkeys(("ItemPut", "ItemDeleted"), "v5"),
    "ItemTouched": "v7",
    **dict.fromkeys(FACT_TYPES, "v9"),
    **dict.fromkeys(FORGET_TYPES, "v10"),
}
GOLDEN_CASES = [(version, key) for version, records in RECORDS.items() for key in records]


def kind(key: str) -> str:
    return key.split(".")[0]


def oldest(key: str) -> str:
    """The version an event is written with: the oldest with its type (and, keyed, with keys)."""
    if key in DATED:
        return "v8"
    if key in KEYED:  # v4, unless its type came later
        return max(min(HAS_KEYS, key=number), OLDEST[kind(key)], key=number)
    if key in LISTED:
        return "v6"
    return OLDEST[kind(key)]


def number(version: str) -> int:
    return int(version[1:])  # "v10" comes after "v9"


def writable(key: str, version: str) -> bool:
    return (
        kind(key) in TYPES[version]
        and (key not in KEYED or version in HAS_KEYS)
        and (key not in LISTED or number(version) >= 6)
        and (key not in DATED or number(version) >= 8)
    )


def test_the_golden_data_covers_every_event_type_of_every_version() -> None:
    assert sorted(FINGERPRINTS, key=number) == sorted(RECORDS, key=number) == sorted(TYPES, key=number)
    assert sorted(TYPES, key=number) == [f"v{n}" for n in range(1, 11)]
    for version, records in RECORDS.items():
        assert sorted({kind(k) for k in records}) == sorted(TYPES[version]), version
        assert sorted(records) == sorted(k for k in EXPECTED if writable(k, version)), version
    assert all(len(bytes.fromhex(fp)) == 8 for fp in FINGERPRINTS.values())
    assert len(set(FINGERPRINTS.values())) == 10


def test_schema_files_have_the_golden_fingerprints() -> None:
    """An in-place edit of a released schema (even a field's order or a union branch) fails here."""
    files = {f.name.split(".")[1]: f for f in (ROOT / "schemas").glob("envelope.v*.avsc")}
    assert sorted(files, key=number) == sorted(FINGERPRINTS, key=number), (
        "every schema version needs golden data (and every golden version its file): add, never change"
    )
    for version, file in files.items():
        raw = json.loads(file.read_text())
        canonical = fastavro.schema.to_parsing_canonical_form(raw)
        assert fastavro.schema.fingerprint(canonical, "CRC-64-AVRO") == FINGERPRINTS[version], (
            f"{file.name} changed in place: released schemas are immutable, add envelope.v<N+1>.avsc instead"
        )
        payload = next(f for f in raw["fields"] if f["name"] == "payload")
        assert [b["name"] for b in payload["type"]] == TYPES[version], file.name
    # And the codec (its own loading of the same files) agrees.
    by_number = sorted(FINGERPRINTS.items(), key=lambda kv: number(kv[0]))
    assert [(f"v{v.version}", v.fingerprint.hex()) for v in load_schemas()] == by_number


@pytest.mark.parametrize(("version", "key"), GOLDEN_CASES)
def test_golden_records_decode_to_the_expected_events(version: str, key: str) -> None:
    data = bytes.fromhex(RECORDS[version][key])
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == bytes.fromhex(FINGERPRINTS[version])
    assert Codec().decode(data) == EXPECTED[key]
    assert Codec().decode_record(data)["payload"][0] == "helix.memory." + kind(key)  # the checked path too
    # A codec pinned to any version that has the type reads it too (Avro resolution between versions);
    # one that predates keys reads a keyed event without its key.
    for reader in range(1, 11):
        if kind(key) in TYPES[f"v{reader}"]:
            want = EXPECTED[key] if f"v{reader}" in HAS_KEYS else replace(EXPECTED[key], idempotency_key=None)
            if key in LISTED and reader < 6:  # a reader that predates the lists reads the deletion without them
                want = replace(want, payload=replace(want.payload, checkpoints=(), blobs=()))
            if key in DATED and reader < 8:  # a reader that predates occurred_at reads the message without it
                want = replace(want, payload=MessageAdded(replace(want.payload.message, occurred_at=None)))
            assert Codec(reader=reader).decode(data) == want, f"reader v{reader}"


@pytest.mark.parametrize("key", sorted(KEYED & RECORDS["v4"].keys()))  # keyed types v4 has
def test_readers_that_predate_keys_read_keyed_events_with_fastavro_alone(key: str) -> None:
    """An old reader (its own schema, v3) given the writer's schema from schemas/ reads a v4 event."""
    data = bytes.fromhex(RECORDS["v4"][key])
    writer = json.loads((ROOT / "schemas" / "envelope.v4.avsc").read_text())
    reader = json.loads((ROOT / "schemas" / "envelope.v3.avsc").read_text())
    record = fastavro.schemaless_reader(io.BytesIO(data[10:]), writer, reader)
    assert "idempotency_key" not in record
    assert record["session_id"] == EXPECTED[key].session_id
    assert fastavro.schemaless_reader(io.BytesIO(data[10:]), writer)["idempotency_key"] == EXPECTED[key].idempotency_key


@pytest.mark.parametrize("key", list(EXPECTED))
def test_events_are_encoded_as_the_golden_bytes_of_the_oldest_version_with_their_type(key: str) -> None:
    event = EXPECTED[key]
    data = Codec().encode(event)
    assert Codec().decode(data) == event
    first = oldest(key)
    assert data[:2] == b"\xc3\x01"
    assert data[2:10] == bytes.fromhex(FINGERPRINTS[first]), f"{key} must be written with {first}"
    assert data.hex() == RECORDS[first][key]  # byte for byte (the hand-written MessageAdded encoder too)
    # The generic path (fastavro) writes the same bytes as the fast one.
    assert Codec().encode_record(event_to_record(event)) == data


def test_a_writer_pinned_before_the_lists_refuses_a_deletion_that_lists() -> None:
    """A field the pinned version lacks is refused, naming it, rather than dropped: nothing is written."""
    with pytest.raises(InvalidInput, match="schema v5 has no such field") as caught:
        Codec(writer=5).encode(EXPECTED["CheckpointsDeleted.listed"])
    assert caught.value.field == "payload.blobs"
    assert (
        Codec(writer=5).decode(Codec(writer=5).encode(EXPECTED["CheckpointsDeleted"])) == EXPECTED["CheckpointsDeleted"]
    )


def test_a_writer_pinned_before_v8_refuses_a_dated_message() -> None:
    with pytest.raises(InvalidInput, match="schema v7 has no such field") as caught:
        Codec(writer=7).encode(EXPECTED["MessageAdded.dated"])
    assert caught.value.field == "payload.message.occurred_at"


def test_readers_that_predate_v8_read_dated_messages_with_fastavro_alone() -> None:
    """An old reader (its own schema, v7) given the writer's schema from schemas/ reads a v8 message."""
    data = bytes.fromhex(RECORDS["v8"]["MessageAdded.dated"])
    writer = json.loads((ROOT / "schemas" / "envelope.v8.avsc").read_text())
    reader = json.loads((ROOT / "schemas" / "envelope.v7.avsc").read_text())
    record = fastavro.schemaless_reader(io.BytesIO(data[10:]), writer, reader)
    assert record["payload"]["message"] == {
        "role": "user",
        "content": "imported",
        "name": None,
        "tool_calls": [],
        "tool_call_id": None,
        "metadata": {},
    }


OLD_IN_V9 = sorted(k for k in RECORDS["v9"] if kind(k) in TYPES["v8"])


@pytest.mark.parametrize("key", OLD_IN_V9)
def test_readers_that_predate_v9_read_its_events_of_their_types_with_fastavro_alone(key: str) -> None:
    """An old reader (its own schema, v8) given the writer's schema from schemas/ reads a v9 event of a
    type it knows as it reads the v8 one: v9 only appends branches to the payload union."""
    data = bytes.fromhex(RECORDS["v9"][key])
    writer = json.loads((ROOT / "schemas" / "envelope.v9.avsc").read_text())
    reader = json.loads((ROOT / "schemas" / "envelope.v8.avsc").read_text())
    record = fastavro.schemaless_reader(io.BytesIO(data[10:]), writer, reader, return_record_name=True)
    as_v8 = fastavro.schemaless_reader(io.BytesIO(bytes.fromhex(RECORDS["v8"][key])[10:]), reader, None, True)
    assert record == as_v8
    assert data[10:] == bytes.fromhex(RECORDS["v8"][key])[10:]  # the very bytes: only the fingerprint differs


def test_v9_holds_every_event_type_of_v8_and_the_knowledge_events() -> None:
    assert sorted(RECORDS["v8"]) == OLD_IN_V9
    assert sorted(k for k in RECORDS["v9"] if kind(k) in FACT_TYPES) == sorted(FACTS)


def test_a_writer_pinned_before_v9_refuses_a_knowledge_event() -> None:
    """Nothing is written rather than a record an old schema has no branch for."""
    with pytest.raises(InvalidInput, match="schema v8 has no such field in FactsMerged"):
        Codec(writer=8).encode(EXPECTED["FactsMerged"])
