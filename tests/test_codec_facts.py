"""The knowledge events (schema v9) through the codec: both directions, and what older readers make of them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from helix_es.log.codec import Codec, load_schemas
from helix_es.log.tolerant import AuditCodec, UnknownPayload
from helix_es.model.errors import UnknownSchema
from helix_es.model.events import (
    Event,
    ExtractedFact,
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    FactsMerged,
    FactsUnmerged,
    Payload,
    Position,
    SourceTurn,
)

V9 = next(v for v in load_schemas() if v.version == 9)
AT = datetime(2026, 12, 7, 9, 30, 0, 123456, tzinfo=UTC)
WHERE = Position("helix.memory.team.a-1", 7, (1 << 62) + 5)  # offsets are longs
TURNS = (
    SourceTurn("6f1c2a3b-4d5e-4f60-8a1b-2c3d4e5f6a7b", WHERE, AT),
    SourceTurn("not-a-uuid: ids are plain text", Position("t", 0, 0), datetime(1, 1, 1, tzinfo=UTC)),
)
PAYLOADS: list[Payload] = [
    FactsExtracted(
        "facts",
        "rules/v1",
        "",
        (
            ExtractedFact("alice", "lives_in", "Porto"),
            ExtractedFact("Ålice ✓", "név", "a\nb\x00", datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)),
        ),
        TURNS,
        0,
        2**40,
    ),
    FactsExtracted("facts", "openai/gpt-4o-mini", "ab" * 32, (), ()),
    FactAsserted("alice", "lives_in", "Porto"),
    FactAsserted("", "", "", AT, ""),  # empty text is text: kept, not made None
    FactRetracted("f-1", "alice", "lives_in", "Porto"),
    FactRetracted("f-1", "alice", "lives_in", "Porto", "moved"),
    FactsMerged(("f-1",)),
    FactsMerged(("f-1", "f-2", "f-3")),
    FactsUnmerged(WHERE),
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: type(p).__name__)
def test_knowledge_events_round_trip_written_with_v9(payload: Payload) -> None:
    codec = Codec()
    event = Event("team.a-1", "session/42", payload, timestamp=AT, idempotency_key="k-1")
    data = codec.encode(event)
    assert data[2:10] == V9.fingerprint  # the oldest version with the type
    assert codec.decode(data) == event
    assert codec.decode_record(data)["payload"][0] == "helix.memory." + type(payload).__name__  # checked path
    assert AuditCodec().decode(data) == event


def test_times_come_back_aware_in_utc_and_sequences_as_tuples() -> None:
    codec = Codec()
    lisbon = timezone(timedelta(hours=1))
    payload = FactsExtracted(
        "facts",
        "rules/v1",
        "",
        (ExtractedFact("a", "b", "c", datetime(2024, 3, 1, 10, tzinfo=lisbon)), ExtractedFact("a", "b", "d")),
        (SourceTurn("e", WHERE, datetime(2024, 3, 1, 10, tzinfo=lisbon)),),
    )
    back = codec.decode(codec.encode(Event("ns", "s", payload))).payload
    assert isinstance(back, FactsExtracted) and back == payload
    assert isinstance(back.facts, tuple) and isinstance(back.sources, tuple)
    assert back.facts[0].valid_from == datetime(2024, 3, 1, 9, tzinfo=UTC)
    assert back.facts[0].valid_from.tzinfo is UTC and back.sources[0].said_at.tzinfo is UTC
    assert back.facts[1].valid_from is None
    # A naive time is taken as UTC (as the envelope's timestamp is), and comes back aware.
    naive = FactAsserted("a", "b", "c", datetime(2024, 3, 1, 10))
    asserted = codec.decode(codec.encode(Event("ns", "s", naive))).payload
    assert isinstance(asserted, FactAsserted) and asserted.valid_from == datetime(2024, 3, 1, 10, tzinfo=UTC)
    merged = codec.decode(codec.encode(Event("ns", "s", FactsMerged(("x", "y"))))).payload
    assert isinstance(merged, FactsMerged) and merged.fact_ids == ("x", "y")


def test_a_helix_es_before_v9_refuses_them_and_its_audit_shows_them_as_unknown() -> None:
    """An older version knows v1-v8 only: its projector refuses the record (a dead letter), its audit
    shows the envelope and the payload's union branch."""
    data = Codec().encode(Event("ns", "s-1", FactsMerged(("f-1", "f-2")), timestamp=AT))
    older = [v for v in load_schemas() if v.version <= 8]
    with pytest.raises(UnknownSchema, match="upgrade helix-es"):
        Codec(older).decode(data)
    event = AuditCodec(older).decode(data)
    assert (event.namespace, event.session_id, event.timestamp) == ("ns", "s-1", AT)
    assert isinstance(event.payload, UnknownPayload) and event.payload.branch == 15  # v9's 16th branch
