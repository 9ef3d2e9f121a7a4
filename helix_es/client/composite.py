"""composite: one event feeds every part's view; get and search merge the parts' answers.

Facts (`facts`, `extract_now`, `assert_fact`, `retract_fact`, `merge_facts`, `unmerge_facts`) go to the first part
whose view is a facts view; a write there is waited for by every part's reads, like an add.

A long-term view with a recall index (`search: hybrid | vector | keyword`) is a composite of two
views fed by one event, its rows and its index, read as one memory (`IndexedMemory`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from helix_es.client.memory import EventWriter, ViewMemory, check_search
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Position
from helix_es.model.facts import Fact
from helix_es.model.message import Message
from helix_es.model.recall import RecallHit
from helix_es.projection.protocol import Knower, Projection, Recaller


def _identity(message: Message) -> tuple[object, ...]:
    # The seed dedups on (role, content); messages without text (tool calls) keep their calls apart.
    if message.content:
        return (message.role, message.content)
    return (message.role, message.content, message.tool_calls, message.tool_call_id)


def merge(answers: Sequence[Sequence[Message]], limit: int | None = None) -> list[Message]:
    """Parts in order, each in its own order; a message already seen is skipped."""
    seen: set[tuple[object, ...]] = set()
    out: list[Message] = []
    for answer in answers:
        for message in answer:
            key = _identity(message)
            if key not in seen:
                seen.add(key)
                out.append(message)
                if limit is not None and len(out) >= limit:
                    return out
    return out


class CompositeMemory(EventWriter):
    """`add` appends one event, which every part's projection folds; reads ask each part in turn."""

    def __init__(self, parts: Sequence[ViewMemory | IndexedMemory]) -> None:
        if not parts:
            raise ValueError("a composite needs at least one part")
        self.parts = list(parts)
        first = self.parts[0]
        self.backend, self.namespace, self.session_id = first.backend, first.namespace, first.session_id
        self.max_content_bytes = first.max_content_bytes

    def wrote(self, position: Position) -> None:
        for part in self.parts:
            part.wrote(position)

    async def forget_now(self) -> int:
        """Apply the forgetting policies of this namespace's views now (`ViewMemory.forget_now`)."""
        return await self.backend.forget(self.namespace)

    def _compacting(self) -> ViewMemory:
        for part in self.parts:
            if isinstance(part, ViewMemory) and getattr(part.config.view if part.config else None, "compacts", False):
                return part
        raise InvalidInput(
            "memory", "no part of this composite compacts: compaction is for conversation and window views"
        )

    async def compact(self, *, keep: int = 4, reason: str = "request") -> Position | None:
        position = await self._compacting().compact(keep=keep, reason=reason)
        return self._seen(position) if position is not None else None

    async def expand(self, position: Position | str) -> list[Message]:
        return await self._compacting().expand(position)

    async def _compact(self, keep: int, reason: str, *hooks: Any) -> Position | None:
        position = await self._compacting()._compact(keep, reason, *hooks)
        return self._seen(position) if position is not None else None

    def pending(self) -> Position | None:
        return next((p for p in (part.pending() for part in self.parts) if p is not None), None)

    async def get(self) -> list[Message]:
        return merge([await part.get() for part in self.parts])

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        check_search(query, limit)
        return merge([await part.search(query, limit) for part in self.parts], limit)

    async def recall(self, query: str, limit: int | None = None, **filters: Any) -> list[RecallHit]:
        """The first part that can recall answers (scores of different views do not mix)."""
        for part in self.parts:
            if isinstance(part.projection, Recaller):
                return await part.recall(query, limit, **filters)
        names = ", ".join(part.projection.name for part in self.parts)
        raise InvalidInput("memory", f"no part of this composite can recall ({names}): add a vector or long-term part")

    # -- knowledge: the first part whose view is a facts view ------------------------------------

    def _knowing(self) -> ViewMemory:
        for part in self.parts:
            if isinstance(part, ViewMemory) and isinstance(part.projection, Knower):
                return part
        names = ", ".join(part.projection.name for part in self.parts)
        raise InvalidInput("memory", f"no part of this composite holds facts ({names}): add a facts part")

    async def facts(
        self,
        subject: str | None = None,
        predicate: str | None = None,
        as_of: datetime | None = None,
        known_as_of: datetime | None = None,
        history: bool = False,
    ) -> list[Fact]:
        return await self._knowing().facts(subject, predicate, as_of, known_as_of, history)

    async def extract_now(self) -> int:
        return await self._knowing().extract_now()

    async def assert_fact(
        self, subject: str, predicate: str, value: str, valid_from: datetime | None = None, *, reason: str | None = None
    ) -> Position:
        return self._seen(await self._knowing().assert_fact(subject, predicate, value, valid_from, reason=reason))

    async def retract_fact(self, fact_id: str, reason: str | None = None) -> Position:
        return self._seen(await self._knowing().retract_fact(fact_id, reason))

    async def merge_facts(self, fact_ids: Sequence[str]) -> Position:
        return self._seen(await self._knowing().merge_facts(fact_ids))

    async def unmerge_facts(self, position: Position) -> Position:
        return self._seen(await self._knowing().unmerge_facts(position))

    def _seen(self, position: Position) -> Position:
        """Every part's reads wait for a write one part made (the event feeds them all)."""
        self.wrote(position)
        return position


class IndexedMemory(CompositeMemory):
    """A long-term memory with a recall index: `get` reads its rows (every message, in order, none merged
    away), `search` and `recall` its index, which ranks in the view's `search:` mode."""

    def __init__(self, rows: ViewMemory, index: ViewMemory) -> None:
        super().__init__([rows, index])
        self.rows, self.index = rows, index

    @property
    def projection(self) -> Projection:
        """What recalls (a composite asks its parts)."""
        return self.index.projection

    async def get(self) -> list[Message]:
        return await self.rows.get()

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        return await self.index.search(query, limit)

    async def recall(self, query: str, limit: int | None = None, **filters: Any) -> list[RecallHit]:
        return await self.index.recall(query, limit, **filters)
