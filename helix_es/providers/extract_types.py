"""What every extractor shares: the turns it reads, what it answers, how it fails (helix_es.providers.extract)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from helix_es.model.errors import HelixError, InvalidInput
from helix_es.model.fact_events import ExtractedFact
from helix_es.model.positions import Position


@dataclass(frozen=True, slots=True)
class Turn:
    """One MessageAdded turn to extract from: where it sits on the log and when it was said."""

    event_id: str
    position: Position
    said_at: datetime  # timezone-aware
    role: str
    name: str | None
    content: str

    def __post_init__(self) -> None:
        if self.said_at.tzinfo is None or self.said_at.utcoffset() is None:
            raise InvalidInput("said_at", f"must be timezone-aware, got {self.said_at.isoformat()}")


@dataclass(frozen=True, slots=True)
class Extraction:
    """What an extractor answered for a batch: the facts, and what the `FactsExtracted` event records."""

    facts: tuple[ExtractedFact, ...]
    model: str
    prompt_sha256: str  # hex SHA-256 of what was sent ('' when nothing was)
    prompt_tokens: int | None = None  # from the answer's usage, when it has one
    completion_tokens: int | None = None


class ExtractionError(HelixError):
    """An extractor failed, or answered something that breaks the contract.

    `reason` says exactly what (`facts[2].value: must be a non-empty string, got 3`); `retryable`
    True: try the batch again later (no answer, HTTP 429 or 5xx after the client's own retries);
    False: dead-letter it (HTTP 4xx, a bad answer, a missing key); `status` is the HTTP status."""

    def __init__(self, model: str, reason: str, *, retryable: bool, status: int | None = None, hint: str = "") -> None:
        self.model, self.reason, self.retryable, self.status = model, reason, retryable, status
        if not hint:
            hint = (
                "a transient failure: the batch is tried again later"
                if retryable
                else "the batch is dead-lettered: fix the cause (docs/extractors.md), then replay it"
            )
        super().__init__(f"{model}: {reason}; {hint}")


class Extractor(Protocol):
    """Finds the facts a batch of one session's turns states. What it answers is recorded on the log."""

    @property
    def model(self) -> str:
        """provider/model, e.g. "rules/v1" or "openai/gpt-4o-mini"."""
        ...

    async def extract(self, session_id: str, turns: Sequence[Turn]) -> Extraction: ...

    def prompt_tokens(self, session_id: str, turns: Sequence[Turn]) -> int:
        """About how many prompt tokens `extract` would send (0: a free extractor), for a dry run."""
        ...
