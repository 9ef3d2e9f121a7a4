"""The forgetting, compaction and erasure events (schema v10) that tests/golden/records.json holds.

tests/test_golden.py adds them to its EXPECTED; kept apart so that module stays readable.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from helix_es.model.events import Event, MemoryForgotten, SessionCompacted, SubjectErased

NS = "tenant-a.prod"
FORGET_TYPES = ["MemoryForgotten", "SessionCompacted", "SubjectErased"]


def _id(n: int) -> uuid.UUID:
    return uuid.UUID(f"eeeeeeee-ffff-4000-8111-{n:012d}")


def _at(second: int) -> datetime:
    return datetime(2026, 12, 7, 21, 0, second, tzinfo=UTC)


FORGET: dict[str, Event] = {
    "MemoryForgotten": Event(
        NS,
        "s-1",
        MemoryForgotten(
            ("long-term", "vector"),
            "max_age",
            "max_age=720h",
            offsets=(0, 7, 5_000_000_000),  # a long offset, far into a partition
        ),
        _id(1),
        _at(0),
    ),
    "MemoryForgotten.session": Event(
        NS, "sitzung-ü", MemoryForgotten(("conversation",), "inactive_for", session=True), _id(2), _at(1)
    ),
    "MemoryForgotten.ids": Event(
        NS,
        "facts",
        MemoryForgotten(("facts",), "erasure", "erase-1", ids=("f-1", "f-ü-2")),
        _id(3),
        _at(2),
    ),
    "SessionCompacted": Event(
        NS,
        "s-1",
        SessionCompacted(
            "conversation",
            "Alice moved to Porto 🇵🇹 and asked about trains.",
            3,
            41,
            20,
            "openai/gpt-4o-mini",
            "compact_at_tokens=4000",
        ),
        _id(4),
        _at(3),
    ),
    "SessionCompacted.bare": Event(NS, "s-2", SessionCompacted("sliding-window", "", 0, 0, 1), _id(5), _at(4)),
    "SubjectErased": Event(
        NS,
        "erasure:alice",
        SubjectErased(
            "alice", "erase-1", '{"subject": "alice", "sessions": ["s-1"], "verification": {"passed": true}}'
        ),
        _id(6),
        _at(5),
    ),
}
