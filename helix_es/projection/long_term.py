"""The long-term view as rows: `helix_es.views.long_term_rows`'s fold over any `RowStore`, read as messages."""

from __future__ import annotations

from collections.abc import Sequence

from helix_es.model.events import Position, Record
from helix_es.model.message import Message, decode_json
from helix_es.model.recall import Recall, RecallHit
from helix_es.projection.recall import choose
from helix_es.projection.rows import RowProjection
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.ports import RowStore, SessionKey
from helix_es.views.long_term import DEFAULT_TABLE, VIEW_NAME, Op, ops
from helix_es.views.long_term_rows import CLEARED, LongTermFold, Wants, tables
from helix_es.views.rows import Row, Scan

_MESSAGE = ("message",)  # all a reader decodes


class _Fold(LongTermFold):
    mark = CLEARED

    def __init__(self, table: str, store: RowStore) -> None:
        super().__init__(table)
        self.store = store

    def ops(self, records: Sequence[Record]) -> tuple[str, int, list[Op]]:
        # The store's name is the view's, or a rebuild target's (`open_projection` renames it): what
        # a forgetting names.
        return ops(records, self.store.name)

    def offset(self, op: Op) -> int:
        return op.offset


class LongTermRows(RowProjection[Op, Wants]):
    """A long-term memory kept by a row store: `get` and `search` answer messages in event-time order."""

    def __init__(self, store: RowStore, table: str) -> None:
        fold = _Fold(table, store)
        super().__init__(store, fold)
        self.table = fold.rows.name

    @classmethod
    def in_process(cls, name: str = VIEW_NAME, table: str = DEFAULT_TABLE) -> LongTermRows:
        """A long-term memory kept in this process (the embedded default's, a clean fold's)."""
        return cls(MemoryRows(name, tables(table)), table)

    async def rows(self, namespace: str) -> list[Row]:
        """The namespace's message rows in view order (for audit and tools: each keeps its session and position)."""
        return await self.store.scan(Scan(self.table, namespace)) or []

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        rows = await self.store.scan(Scan(self.table, key.namespace, columns=_MESSAGE), want)
        return None if rows is None else [decode_json(r["message"]) for r in rows]

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        scan = Scan(self.table, key.namespace, contains=query, limit=limit, columns=_MESSAGE)
        rows = await self.store.scan(scan, want)
        return None if rows is None else [decode_json(r["message"]) for r in rows]

    async def recall(self, key: SessionKey, recall: Recall, want: Position | None) -> list[RecallHit] | None:
        """Substring recall (the view's search, oldest first) with the recall's filters and hits' fields.

        The rows rank by no model: other modes are the recall index's (`search: hybrid` on the view)."""
        choose(recall, "substring", ("substring",), self.name)
        one = next(iter(recall.sessions)) if recall.sessions is not None and len(recall.sessions) == 1 else None
        scan = Scan(self.table, key.namespace, where={"session_id": one} if one else {}, contains=recall.query)
        rows = await self.store.scan(scan, want)
        if rows is None:
            return None
        found: list[RecallHit] = []
        for row in rows:
            message = decode_json(row["message"])
            said = message.occurred_at or row["created_at"]
            if recall.admits(row["session_id"], said, message):
                position = Position(row["topic"], row["partition"], row["offset"])
                explain = {"mode": "substring", "substring": {"score": 1.0, "rank": float(len(found) + 1)}}
                found.append(
                    RecallHit(message, 1.0, row["session_id"], position, said, explain if recall.explain else None)
                )
                if len(found) == recall.limit:
                    break
        return found

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.store.checkpoint(want.topic, want.partition)
