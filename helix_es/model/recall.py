"""Recall: a question asked of memory, and the scored hits it answers with.

`Memory.search` keeps the seed's shape (a list of Messages). `recall` is the search a person
means: ranked hits with a score, the session and log position they came from, when they were
said, and (`explain=True`) what each ranker gave them, so a caller can filter by session,
metadata and time and see why a turn came first.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

from helix_es.model.errors import InvalidInput
from helix_es.model.events import Position
from helix_es.model.message import Message, check_text

SearchMode = Literal["hybrid", "vector", "keyword", "substring"]
SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)
MAX_LIMIT = 1000  # a recall ranks candidates in memory: a bigger page is a scan, not a question


@dataclass(frozen=True, slots=True)
class RecallHit:
    """One message a recall found: its score (higher is better; comparable within one answer only)."""

    message: Message
    score: float
    session_id: str
    position: Position
    occurred_at: datetime
    explain: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class Recall:
    """A checked question: what to find, how many, and the filters applied before ranking."""

    query: str
    limit: int
    sessions: frozenset[str] | None = None
    where: Mapping[str, str] = field(default_factory=dict)
    after: datetime | None = None
    before: datetime | None = None
    explain: bool = False
    mode: SearchMode | None = None  # None: the view's own `search:` mode

    def admits(self, session_id: str, occurred_at: datetime, message: Message) -> bool:
        """Whether a hit passes the filters (for stores that filter in Python)."""
        if self.sessions is not None and session_id not in self.sessions:
            return False
        if self.after is not None and occurred_at <= self.after:
            return False
        if self.before is not None and occurred_at >= self.before:
            return False
        metadata = message.metadata
        return all(metadata.get(k) == v for k, v in self.where.items())


def _time(value: object, name: str) -> datetime | None:
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(name, f"must be a timezone-aware datetime, got {value!r}")
    return value


def make_recall(
    query: object,
    limit: object,
    *,
    sessions: Collection[str] | None = None,
    where: Mapping[str, str] | None = None,
    after: object = None,
    before: object = None,
    explain: object = False,
    mode: object = None,
) -> Recall:
    """A `Recall` from a caller's arguments, or `InvalidInput` naming the bad one (nothing is read)."""
    check_text(query, "query", error=InvalidInput)
    assert isinstance(query, str)
    if not query.strip():
        raise InvalidInput("query", "must not be blank: ask a question or give words to find")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput("limit", f"must be a whole number from 1 to {MAX_LIMIT}, got {limit!r}")
    chosen: frozenset[str] | None = None
    if sessions is not None:
        if isinstance(sessions, str | bytes) or not isinstance(sessions, Collection):
            raise InvalidInput("sessions", f"must be a list of session ids, got {sessions!r}")
        for s in sessions:
            check_text(s, "sessions[]", empty=False, error=InvalidInput)
        chosen = frozenset(sessions)
    pairs: dict[str, str] = {}
    if where is not None:
        if not isinstance(where, Mapping):
            raise InvalidInput("where", f"must be a mapping of metadata keys to values, got {where!r}")
        for key, value in where.items():
            check_text(key, "where key", empty=False, error=InvalidInput)
            check_text(value, f"where[{key!r}]", error=InvalidInput)
            pairs[key] = value
    start, end = _time(after, "after"), _time(before, "before")
    if start is not None and end is not None and start >= end:
        raise InvalidInput("after", f"{start.isoformat()} is not before {end.isoformat()} (before)")
    if not isinstance(explain, bool):
        raise InvalidInput("explain", f"must be true or false, got {explain!r}")
    if mode is not None and mode not in SEARCH_MODES:
        raise InvalidInput("mode", f"must be one of {list(SEARCH_MODES)}, got {mode!r}")
    return Recall(query, limit, chosen, pairs, start, end, explain, mode)  # type: ignore[arg-type]
