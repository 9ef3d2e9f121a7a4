"""In-process long-term memory: the embedded default and the tests' reference.

Per namespace, rows sorted by `order_key` (a list kept with `bisect`) beside a dict of
(session id, message), and the `cleared_at` watermark in µs. `apply` has no await inside, so
nothing runs between its steps: that is the atomic step. The data lives as long as the
projection; the embedded backend rebuilds it from the log when it attaches the view.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from helix_es.model.events import Position, Record, micros
from helix_es.model.message import Message
from helix_es.stores.ports import Applied, SessionKey
from helix_es.views.long_term import VIEW_NAME, OrderKey, matches, ops, retracted_row


@dataclass
class _Namespace:
    order: list[OrderKey] = field(default_factory=list)  # sorted
    rows: dict[OrderKey, tuple[str, Message]] = field(default_factory=dict)  # -> (session id, message)
    cleared_at: int | None = None  # µs; messages at or before it are gone for good


class MemoryLongTerm:
    kind = "memory"

    def __init__(self, name: str = VIEW_NAME) -> None:
        self.name = name
        self._namespaces: dict[str, _Namespace] = {}
        self._checkpoints: dict[tuple[str, int], int] = {}

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        topic, partition, batch = ops(records)
        checkpoint = self._checkpoints.get((topic, partition), -1)
        fresh = [op for op in batch if op.offset > checkpoint]
        for op in fresh:
            ns = self._namespaces.setdefault(op.namespace, _Namespace())
            at = micros(op.at)
            if op.clear and (ns.cleared_at is None or at > ns.cleared_at):
                ns.cleared_at = at
                cut = bisect.bisect_left(ns.order, (at + 1,))  # every key with time <= at sorts before
                for key in ns.order[:cut]:
                    del ns.rows[key]
                del ns.order[:cut]
            elif op.message is not None and (ns.cleared_at is None or at > ns.cleared_at):
                key = op.order
                if key not in ns.rows:  # a re-delivery past a lost checkpoint
                    bisect.insort(ns.order, key)
                ns.rows[key] = (op.session_id, op.message)
            elif op.retract:
                gone_key = retracted_row(op, [(k, ns.rows[k][0]) for k in ns.order])
                if gone_key is not None:
                    ns.order.remove(gone_key)
                    del ns.rows[gone_key]
            elif op.erased:  # the forgotten session's earlier rows go; the other sessions' stay
                gone = {k for k in ns.order if op.erases(ns.rows[k][0], k[1], k[2], k[3])}
                if gone:
                    ns.order = [k for k in ns.order if k not in gone]
                    for k in gone:
                        del ns.rows[k]
        if fresh:
            self._checkpoints[(topic, partition)] = fresh[-1].offset
        return Applied(len(fresh))

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return self._checkpoints.get((topic, partition))

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        self._checkpoints[(topic, partition)] = max(offset, self._checkpoints.get((topic, partition), -1))

    def _behind(self, want: Position | None) -> bool:
        if want is None:
            return False
        applied = self._checkpoints.get((want.topic, want.partition))
        return applied is None or applied < want.offset

    def _messages(self, namespace: str) -> list[Message]:
        ns = self._namespaces.get(namespace)
        return [] if ns is None else [ns.rows[key][1] for key in ns.order]

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        return None if self._behind(want) else self._messages(key.namespace)

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        if self._behind(want):
            return None
        needle = query.casefold()
        return [m for m in self._messages(key.namespace) if matches(needle, m.content)][:limit]

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return self._checkpoints.get((want.topic, want.partition))

    def sessions(self, namespace: str) -> list[str]:
        """The session id of each message `get` returns, in the same order (for audit)."""
        ns = self._namespaces.get(namespace)
        return [] if ns is None else [ns.rows[key][0] for key in ns.order]

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        for namespace in namespaces:
            self._namespaces.pop(namespace, None)
        logs = set(topics)
        for cp in [k for k in self._checkpoints if k[0] in logs]:
            del self._checkpoints[cp]

    async def close(self) -> None:
        pass
