"""Knowledge on the log: facts a model extracted, and people's corrections (schema v9).

Derived facts are recorded, not recomputed: a rebuild folds `FactsExtracted` and calls no model.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from helix_es.model.positions import Position


@dataclass(frozen=True, slots=True)
class ExtractedFact:
    """One fact as the extractor answered it; `valid_from` None: since the turn that said it."""

    subject: str
    predicate: str
    value: str
    valid_from: datetime | None = None


@dataclass(frozen=True, slots=True)
class SourceTurn:
    """A turn the extractor read: its MessageAdded event, where that sits, when it was said, and when
    it reached the log (`added_at`: a person's correction outranks facts of turns logged before it)."""

    event_id: str
    position: Position
    said_at: datetime
    added_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class FactsExtracted:
    """Derived: what the facts view `view`'s extractor found in a batch of one session's turns."""

    view: str
    model: str  # provider/model, e.g. "rules/v1" or "openai/gpt-4o-mini"
    prompt_sha256: str  # hex SHA-256 of the prompt sent ('' for a model without a prompt)
    facts: tuple[ExtractedFact, ...]
    sources: tuple[SourceTurn, ...]
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class FactAsserted:
    """A person states a fact; it outranks what the model extracted from turns said before it."""

    subject: str
    predicate: str
    value: str
    valid_from: datetime | None = None  # None: since the event's time
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class FactRetracted:
    """A person takes a fact back. The fact's subject, predicate and value ride along, so the model
    saying the same again from turns said before the retraction cannot bring it back."""

    fact_id: str
    subject: str
    predicate: str
    value: str
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class FactsMerged:
    """Duplicates become one: the first id survives, the others point to it."""

    fact_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class FactsUnmerged:
    """The merge recorded at `merged` (a FactsMerged event's position) is undone."""

    merged: Position
