"""The knowledge events (schema v9) that tests/golden/records.json holds, written out by hand.

tests/test_golden.py adds them to its EXPECTED; kept apart so that module stays readable.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from helix_es.model.events import (
    Event,
    ExtractedFact,
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    FactsMerged,
    FactsUnmerged,
    Position,
    SourceTurn,
)

NS = "tenant-a.prod"
TOPIC = "helix.memory.tenant-a.prod"
# SHA-256 of "Extract the facts each turn states."
PROMPT_SHA256 = "0433ba7759f75f44e2244703e13c40b11bbafade265bec15aaecc18e6705a153"


def _id(n: int) -> uuid.UUID:
    return uuid.UUID(f"dddddddd-eeee-4fff-8000-{n:012d}")


def _at(second: int, micro: int = 0) -> datetime:
    return datetime(2026, 12, 7, 13, 0, second, micro, tzinfo=UTC)


FACTS: dict[str, Event] = {
    "FactsExtracted": Event(
        NS,
        "s-1",
        FactsExtracted(
            "facts",
            "openai/gpt-4o-mini",
            PROMPT_SHA256,
            (
                ExtractedFact("alice", "lives_in", "Porto"),
                ExtractedFact("alice", "spricht", "Português 🇵🇹", datetime(2023, 9, 1, tzinfo=UTC)),
            ),
            (
                SourceTurn(
                    "00000000-0000-4000-8000-000000000001",
                    Position(TOPIC, 0, 41),
                    datetime(2024, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
                    datetime(2024, 1, 2, 3, 4, 5, 7, tzinfo=UTC),  # logged a microsecond after
                ),
                SourceTurn(  # a dated message: said long before its event, far into a partition (a long offset)
                    "cccccccc-dddd-4eee-8fff-000000000001",
                    Position(TOPIC, 3, 5_000_000_000),
                    datetime(2019, 3, 4, 5, 6, 7, 890123, tzinfo=UTC),
                ),
            ),
            812,
            37,
        ),
        _id(1),
        _at(0, 1),
    ),
    "FactsExtracted.bare": Event(
        NS,
        "s-1",
        FactsExtracted(
            "facts",
            "rules/v1",
            "",
            (),  # the turn held no fact
            (
                SourceTurn(
                    "00000000-0000-4000-8000-000000000002",
                    Position(TOPIC, 0, 0),
                    datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # before the epoch
                ),
            ),
        ),
        _id(2),
        _at(0, 2),
    ),
    "FactAsserted": Event(
        NS,
        "s-1",
        FactAsserted("alice", "lives_in", "Lisboa", datetime(2026, 11, 1, tzinfo=UTC), "she moved \u2013 told support"),
        _id(3),
        _at(1),
    ),
    "FactAsserted.bare": Event(NS, "sitzung-ü", FactAsserted("bob", "likes", "green tea"), _id(4), _at(2)),
    "FactAsserted.keyed": Event(
        NS, "s-1", FactAsserted("alice", "allergic_to", "peanuts"), _id(5), _at(3), "req-fact-1/ü"
    ),
    "FactRetracted": Event(NS, "s-1", FactRetracted("f-1", "alice", "lives_in", "Porto", "outdated"), _id(6), _at(4)),
    "FactRetracted.bare": Event(NS, "sitzung-ü", FactRetracted("f-2", "bob", "likes", "coffee"), _id(7), _at(5)),
    "FactsMerged": Event(NS, "s-1", FactsMerged(("f-1", "f-7", "f-9")), _id(8), _at(6)),
    "FactsUnmerged": Event(NS, "s-1", FactsUnmerged(Position(TOPIC, 0, 1 << 33)), _id(9), _at(7)),
}
FACT_TYPES = ["FactsExtracted", "FactAsserted", "FactRetracted", "FactsMerged", "FactsUnmerged"]
