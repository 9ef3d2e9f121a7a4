"""audit shows the knowledge events (schema v9) readably, and the views fold past them."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from helix_es import Message, open_memory
from helix_es.history.audit import AuditedEvent, audit
from helix_es.log.codec import Codec
from helix_es.log.embedded import LogFile
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
    Record,
    SourceTurn,
)
from tests.conftest import unique
from tests.golden_facts import FACTS

ROOT = Path(__file__).resolve().parent.parent


def shown(payload: Payload) -> AuditedEvent:
    return AuditedEvent.from_record(Record(Event("ns", "s", payload), Position("t", 0, 9)))


def test_each_knowledge_event_reads_as_one_line() -> None:
    lines = {key: AuditedEvent.from_record(Record(e, Position("t", 0, 1))).describe() for key, e in FACTS.items()}
    assert lines == {
        "FactsExtracted": "view=facts model=openai/gpt-4o-mini 2 facts from 2 turns: alice lives_in Porto; "
        'alice spricht "Português 🇵🇹" since 2023-09-01T00:00:00+00:00',
        "FactsExtracted.bare": "view=facts model=rules/v1 0 facts from 1 turn",
        "FactAsserted": 'alice lives_in Lisboa since 2026-11-01T00:00:00+00:00, reason "she moved \u2013 told support"',
        "FactAsserted.bare": 'bob likes "green tea"',
        "FactAsserted.keyed": "alice allergic_to peanuts",
        "FactRetracted": 'f-1 (alice lives_in Porto), reason "outdated"',
        "FactRetracted.bare": "f-2 (bob likes coffee)",
        "FactsMerged": "f-1, f-7, f-9 into f-1",
        "FactsUnmerged": "undoes the merge at helix.memory.tenant-a.prod/0/8589934592",
    }


def test_text_stays_inert_and_long_extractions_are_cut() -> None:
    hostile = shown(FactAsserted("a\x1b[2J", "b\nc", "", reason="x\ny"))
    assert hostile.describe() == '"a\\u001b[2J" "b\\nc" "", reason "x\\ny"'
    many = FactsExtracted("facts", "rules/v1", "", tuple(ExtractedFact("s", "p", str(i)) for i in range(8)), ())
    assert shown(many).describe() == (
        "view=facts model=rules/v1 8 facts from 0 turns: s p 0; s p 1; s p 2; s p 3; s p 4; … 3 more"
    )
    assert shown(FactsMerged(("only",))).describe() == "only"
    assert shown(FactsMerged(())).describe() == "no facts"


def test_their_json_is_every_field_nested_records_too() -> None:
    assert AuditedEvent.from_record(Record(FACTS["FactsExtracted"], Position("t", 0, 1))).to_json()["payload"] == {
        "view": "facts",
        "model": "openai/gpt-4o-mini",
        "prompt_sha256": "0433ba7759f75f44e2244703e13c40b11bbafade265bec15aaecc18e6705a153",
        "facts": [
            {"subject": "alice", "predicate": "lives_in", "value": "Porto", "valid_from": None},
            {
                "subject": "alice",
                "predicate": "spricht",
                "value": "Português 🇵🇹",
                "valid_from": "2023-09-01T00:00:00+00:00",
            },
        ],
        "sources": [
            {
                "event_id": "00000000-0000-4000-8000-000000000001",
                "position": {"topic": "helix.memory.tenant-a.prod", "partition": 0, "offset": 41},
                "said_at": "2024-01-02T03:04:05.000006+00:00",
                "added_at": "2024-01-02T03:04:05.000007+00:00",
            },
            {
                "event_id": "cccccccc-dddd-4eee-8fff-000000000001",
                "position": {"topic": "helix.memory.tenant-a.prod", "partition": 3, "offset": 5_000_000_000},
                "said_at": "2019-03-04T05:06:07.890123+00:00",
                "added_at": None,
            },
        ],
        "prompt_tokens": 812,
        "completion_tokens": 37,
    }
    assert shown(FactsUnmerged(Position("t", 1, 2))).to_json()["payload"] == {
        "merged": {"topic": "t", "partition": 1, "offset": 2}
    }


async def test_audit_lists_them_from_the_log_and_the_views_fold_past_them(tmp_path: Path) -> None:
    ns = unique("aud")
    cfg = {"log": {"path": str(tmp_path)}, "memory": {"type": "conversation", "namespace": ns}}
    async with open_memory(cfg, session_id="s") as mem:
        said = await mem.add(Message("user", "I live in Porto"))
    at = datetime(2026, 12, 7, 12, tzinfo=UTC)
    payloads: list[Payload] = [
        FactsExtracted(
            "facts", "rules/v1", "", (ExtractedFact("user", "lives_in", "Porto"),), (SourceTurn("e-1", said, at),)
        ),
        FactAsserted("user", "lives_in", "Lisboa", reason="moved"),
        FactRetracted("f-1", "user", "lives_in", "Porto"),
        FactsMerged(("f-2", "f-3")),
    ]
    log = LogFile(tmp_path / f"helix.memory.{ns}.log")
    try:
        offsets = [log.append(Codec().encode(Event(ns, "s", p))) for p in payloads]
        unmerged = FactsUnmerged(Position(said.topic, said.partition, offsets[-1]))
        offsets.append(log.append(Codec().encode(Event(ns, "s", unmerged))))
    finally:
        log.close()
    async with open_memory(cfg, session_id="s") as mem:  # the conversation folds past them
        await mem.add(Message("assistant", "Noted."))
        assert [m.content for m in await mem.get()] == ["I live in Porto", "Noted."]

    report = await audit(cfg, session_id="s", as_of="now")
    assert [e.type for e in report.events] == [
        "MessageAdded",
        "FactsExtracted",
        "FactAsserted",
        "FactRetracted",
        "FactsMerged",
        "FactsUnmerged",
        "MessageAdded",
    ]
    assert all(e.known for e in report.events)
    assert report.events[1].describe() == "view=facts model=rules/v1 1 fact from 1 turn: user lives_in Porto"
    assert report.events[5].describe() == f"undoes the merge at {said.topic}/{said.partition}/{offsets[3]}"
    assert report.views is not None and [m.content for m in report.views["conversation"]] == [
        "I live in Porto",
        "Noted.",
    ]

    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    out = subprocess.run(
        [sys.executable, "-m", "helix_es.cli", "audit", "--config", str(path), "--session", "s"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    row = next(line for line in out.stdout.splitlines() if "FactAsserted" in line)
    assert row.split("FactAsserted", 1)[1].strip() == 'user lives_in Lisboa, reason "moved"'
