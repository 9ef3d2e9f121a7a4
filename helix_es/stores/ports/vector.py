"""The vector index store port: what a `vector` view keeps and asks of its store."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

import numpy as np

from helix_es.model.events import Position
from helix_es.model.message import Message
from helix_es.model.recall import Recall
from helix_es.views.fusion import Ranked


@dataclass(frozen=True, slots=True)
class Entry:
    """One message to index: where it is on the log, when it was written, what it says."""

    namespace: str
    session_id: str
    position: Position
    timestamp: datetime
    sha: str  # hex SHA-256 of the content: the embedding cache key
    message: Message
    occurred_at: datetime | None = None  # when it was said, if not at `timestamp` (an import's)

    @property
    def said(self) -> datetime:
        return self.occurred_at or self.timestamp


TAIL = 64  # a session's newest message offsets a vector store keeps per partition: what retractions take back


@dataclass(frozen=True, slots=True)
class Tail:
    """A session's newest messages on one partition, text or not (offsets, newest last, at most `TAIL`),
    as of `upto`, the last of its events this tail has seen: a retraction takes back the newest."""

    upto: int = -1
    offsets: tuple[int, ...] = ()


SessionId = tuple[str, str]  # (namespace, session id)


@dataclass(frozen=True, slots=True)
class BatchState:
    """What a batch needs from the store before folding: the checkpoint, the clear watermarks and the
    tails of the sessions asked for."""

    checkpoint: int | None
    cleared: Mapping[str, datetime]  # namespace -> cleared_at; absent: never cleared
    tails: Mapping[SessionId, Tail] = field(default_factory=dict)  # absent: no message seen


@dataclass(frozen=True)
class Write:
    """One atomic step: entries, moved watermarks, cached embeddings and the partition checkpoint."""

    topic: str
    partition: int
    checkpoint: int  # stores keep the greater of this and what they have
    entries: Sequence[Entry]
    vectors: np.ndarray  # (len(entries), dims) float32, unit rows
    cleared: Mapping[str, datetime]  # watermarks this batch moves
    embeddings: Mapping[str, np.ndarray]  # content sha -> vector, for a store that caches by content
    erased: Mapping[tuple[str, str], Position] = field(default_factory=dict)  # (namespace, session) -> erasure
    tails: Mapping[SessionId, Tail] = field(default_factory=dict)  # the tails this batch moved
    retracted: Sequence[tuple[str, Position]] = ()  # (namespace, position) of entries retractions took back
    keywords: Sequence[str] | None = None  # per entry, the text its keyword index keeps (None: no keyword index)


def erases(at: Position, position: Position) -> bool:
    """Whether a session's erasure at `at` removes its entry at `position`: all but those after it on its partition."""
    return not ((position.topic, position.partition) == (at.topic, at.partition) and position.offset > at.offset)


@dataclass(frozen=True, slots=True)
class RankAsk:
    """What a recall asks a vector store to rank: its filters, and per ranker what to rank by."""

    recall: Recall
    depth: int  # candidates per ranker
    vector: np.ndarray | None = None  # the query's unit embedding: rank by cosine
    keywords: str | None = None  # rank by keywords (the view's analyzer) of this text
    substring: str | None = None  # candidates whose content holds it (case-insensitive), oldest first
    keyword_rows: bool = False  # the view keeps keywords (its entries came with `Write.keywords`)


@dataclass(frozen=True, slots=True)
class Found:
    """A candidate a store ranked, with what a hit shows of it."""

    message: Message
    session_id: str
    position: Position
    occurred_at: datetime


@dataclass(frozen=True, slots=True)
class Ranking:
    """A store's answer to a `RankAsk`: each ranker's candidates by id, and the candidates."""

    ranked: tuple[Ranked, ...]
    found: Mapping[int, Found]


class VectorStore(Protocol):
    kind: str  # memory | postgres

    async def load(
        self, view: str, topic: str, partition: int, namespaces: Sequence[str], sessions: Sequence[SessionId] = ()
    ) -> BatchState: ...

    async def known(self, model: str, shas: Collection[str]) -> dict[str, np.ndarray]:
        """Embeddings the store keeps by content hash (none for the memory store: the log keeps them)."""
        ...

    async def write(self, view: str, model: str, write: Write) -> None:
        """Apply `write` atomically; entries at or before their namespace's watermark, or present, are skipped."""
        ...

    async def checkpoint(self, view: str, topic: str, partition: int) -> int | None: ...

    async def search(
        self, view: str, namespace: str, query: np.ndarray, k: int, want: Position | None
    ) -> list[Message] | None:
        """Top `k` by cosine, best first; None while the partition of `want` is behind `want.offset`."""
        ...

    async def rank(self, view: str, namespace: str, ask: RankAsk, want: Position | None) -> Ranking | None:
        """Each ranker `ask` names, over the namespace's entries that pass its filters: the top
        `ask.depth` candidates, best first; None while the partition of `want` is behind it."""
        ...

    async def count(self, view: str, namespace: str) -> int: ...

    async def drop(self, view: str, namespaces: Collection[str], topics: Collection[str]) -> None:
        """Delete `view`'s entries and watermarks in `namespaces` and its checkpoints of `topics`."""
        ...

    async def close(self) -> None: ...
