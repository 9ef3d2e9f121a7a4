"""The facts view as rows: `helix_es.views.facts`'s fold over any `RowStore`, read as facts.

`facts` reads a namespace's statements and corrections and computes the timeline
(`helix_es.model.facts`); `get` answers the current facts as one system message (what an agent
puts in its prompt); `search` matches them by substring; `pending` is the extraction worker's queue.

Forgetting: every read goes through `facts`, which drops the forgotten facts (`unforgotten`) before
the timeline, so `get`, `search` and `recall` never see them either.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import UTC, datetime

from helix_es.model.errors import InvalidInput
from helix_es.model.events import Position, Record
from helix_es.model.facts import MULTI_VALUED, Fact, FactsAsk, answer, timeline
from helix_es.model.message import Message
from helix_es.model.recall import Recall, RecallHit
from helix_es.projection.recall import choose
from helix_es.projection.rows import RowProjection
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.ports import RowStore, SessionKey
from helix_es.views.facts import DEFAULT_TABLE, FactsFold, Wants, stated_of, tables
from helix_es.views.facts_corrections import correction_of, unforgotten
from helix_es.views.keywords import KeywordIndex
from helix_es.views.rows import Row, Scan

_NO_MESSAGE = Message(role="system", content="")  # facts have no metadata: a `where` is refused first


def _said(fact: Fact) -> str:
    """A fact in words, as hits and the view's `get` say it."""
    return f"{fact.subject} {fact.predicate.replace('_', ' ')} {fact.value}"


class FactsRows(RowProjection[Record, Wants]):
    """A facts view kept by a row store."""

    def __init__(
        self,
        store: RowStore,
        table: str,
        *,
        source: str = "facts",
        model: str | None = None,
        multi_valued: Collection[str] | None = None,
    ) -> None:
        fold = FactsFold(table, source, model)
        super().__init__(store, fold)
        self.facts_fold = fold
        self.multi_valued = tuple(multi_valued) if multi_valued is not None else MULTI_VALUED

    @classmethod
    def in_process(cls, name: str = "facts", table: str = DEFAULT_TABLE) -> FactsRows:
        return cls(MemoryRows(name, tables(table)), table, source=name)

    async def facts(self, namespace: str, ask: FactsAsk, want: Position | None = None) -> list[Fact] | None:
        """The facts `ask` wants, or None while the view has not applied `want`."""
        fold = self.facts_fold
        where = {} if ask.subject is None else {"subject_key": ask.subject.strip().casefold()}
        stated = await self.store.scan(Scan(fold.stated.name, namespace, where=where), want)
        corrections = await self.store.scan(Scan(fold.corrections.name, namespace), want)
        if stated is None or corrections is None:
            return None
        stated, corrections = unforgotten(stated, corrections)  # forgotten: as if never stated
        line = timeline(
            (stated_of(r) for r in stated),
            (correction_of(r) for r in corrections),
            known_as_of=ask.known_as_of,
            multi_valued=self.multi_valued,
        )
        return answer(line, ask, datetime.now(UTC))

    async def pending(self, namespace: str, want: Position | None = None) -> list[Row] | None:
        """Turns no extraction covered yet, in log order (the worker's queue)."""
        return await self.store.scan(Scan(self.facts_fold.pending.name, namespace), want)

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        found = await self.facts(key.namespace, FactsAsk(), want)
        if found is None:
            return None
        if not found:
            return []
        lines = "\n".join(f"- {_said(f)}" for f in found)
        return [Message(role="system", content=f"Known facts:\n{lines}")]

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        found = await self.facts(key.namespace, FactsAsk(), want)
        if found is None:
            return None
        needle = query.casefold()
        hits = [f for f in found if needle in _said(f).casefold()]
        return [Message(role="system", content=f"{f.subject} {f.predicate} {f.value}") for f in hits[:limit]]

    async def recall(self, key: SessionKey, recall: Recall, want: Position | None) -> list[RecallHit] | None:
        """The facts that best answer `recall.query` (BM25 over subject, predicate and value), best first;
        each hit's message says the fact, its time is the fact's valid_from, its explain the whole fact.
        Facts that no longer hold rank below those that do (a question is mostly about now)."""
        choose(recall, "keyword", ("keyword",), self.name)
        if recall.where:
            raise InvalidInput("where", "facts carry no message metadata: filter by sessions, after or before")
        found = await self.facts(key.namespace, FactsAsk(history=True), want)
        if found is None:
            return None
        kept = [f for f in found if f.known_to is None and recall.admits(f.session_id, f.valid_from, _NO_MESSAGE)]
        index = KeywordIndex()
        index.add(range(len(kept)), [_said(f) for f in kept])
        ids, scores = index.top(recall.query, len(kept))
        ranked = sorted(
            (
                (float(score) * (1.0 if kept[i].valid_to is None else 0.5), int(i))
                for i, score in zip(ids, scores, strict=True)
            ),
            key=lambda pair: (-pair[0], pair[1]),
        )[: recall.limit]
        return [
            RecallHit(
                Message(role="system", content=_said(kept[i])),
                score,
                kept[i].session_id,
                kept[i].source[0] if kept[i].source else Position("", 0, 0),
                kept[i].valid_from,
                {"mode": "keyword", "fact": kept[i].to_json()} if recall.explain else None,
            )
            for score, i in ranked
        ]

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.store.checkpoint(want.topic, want.partition)


def facts_rows_of(projection: object) -> FactsRows | None:
    """The facts rows behind a projection's wrappers (an alias's current target, idempotency keys)."""
    for _ in range(4):
        if isinstance(projection, FactsRows):
            return projection
        projection = getattr(projection, "current", None) or getattr(projection, "inner", None)
    return None
