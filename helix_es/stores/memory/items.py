"""In-process items of a LangGraph store (`helix_es.views.items`): the embedded default and the tests' reference.

Per helix namespace, a dict of LangGraph namespace paths, each a dict of its items. `apply` has no
await inside: nothing runs between its steps, which makes it the atomic step.

Forgetting: `ops`, given the store's view name, turns the item ids a forgetting names into deletes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from helix_es.model.events import Position, Record
from helix_es.stores.ports import Applied, SessionKey
from helix_es.views.items import (
    Items,
    NoMessages,
    StoredItem,
    choose,
    embed,
    fold_item,
    list_namespaces,
    namespace_of,
    ops,
    order,
)

Paths = dict[tuple[str, ...], dict[str, StoredItem]]


class MemoryItems(NoMessages):
    kind = "memory"

    def __init__(self, view: Items | None = None) -> None:
        self.view = view or Items()
        self.name = self.view.name
        self.embedder = None if self.view.index is None else self.view.index.embed.build()
        self._namespaces: dict[str, Paths] = {}
        self._vectors: dict[tuple[str, tuple[str, ...], str], np.ndarray] = {}  # (namespace, path, key)
        self._checkpoints: dict[tuple[str, int], int] = {}

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        topic, partition, batch = ops(records, self.name)
        done = self._checkpoints.get((topic, partition), -1)
        namespace = records[0].event.namespace
        fresh = [op for op in batch if op.offset > done]
        vectors = await embed(self.embedder, self.view.index, fresh)  # before the atomic step: it awaits
        paths = self._namespaces.setdefault(namespace, {})
        for op, found in zip(fresh, vectors, strict=True):
            ident = op.ident
            if ident is None:  # a clear or an erasure: every item of the session's path goes
                path = namespace_of(op.session_id)
                for key in paths.pop(path, {}):
                    self._vectors.pop((namespace, path, key), None)
                continue
            path, key = ident
            items = paths.setdefault(path, {})
            item = fold_item(items.get(key), op)
            if item is None:
                items.pop(key, None)
            else:
                items[key] = item
            if op.keeps_vectors(item):
                continue
            if found is None:
                self._vectors.pop((namespace, path, key), None)
            else:
                self._vectors[(namespace, path, key)] = found
        last = records[-1].position.offset
        if last > done:
            self._checkpoints[(topic, partition)] = last
        return Applied(len(fresh))

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return self._checkpoints.get((topic, partition))

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        self._checkpoints[(topic, partition)] = max(offset, self._checkpoints.get((topic, partition), -1))

    async def behind(self, wants: Iterable[Position]) -> Position | None:
        for want in wants:
            applied = self._checkpoints.get((want.topic, want.partition))
            if applied is None or applied < want.offset:
                return want
        return None

    async def get_item(self, namespace: str, path: tuple[str, ...], key: str, now: datetime) -> StoredItem | None:
        found = self._namespaces.get(namespace, {}).get(path, {}).get(key)
        return found if found is not None and found.live(now) else None

    async def find_items(
        self,
        namespace: str,
        prefix: tuple[str, ...],
        where: Mapping[str, Any] | None,
        limit: int,
        offset: int,
        now: datetime,
        query: str | None = None,
    ) -> list[StoredItem]:
        q = None if not query or self.embedder is None else (await self.embedder.embed([query]))[0]
        out = []
        for path, items in self._namespaces.get(namespace, {}).items():
            if path[: len(prefix)] == prefix:
                out += [i for i in items.values() if i.live(now)]
        out.sort(key=order)
        found = [(i, self._vectors.get((namespace, i.namespace, i.key))) for i in out]
        return choose(found, where, limit, offset, q, text=query, index=self.view.index)

    async def item_namespaces(
        self,
        namespace: str,
        conditions: Sequence[tuple[str, tuple[str, ...]]],
        max_depth: int | None,
        limit: int,
        offset: int,
        now: datetime,
    ) -> list[tuple[str, ...]]:
        paths = self._namespaces.get(namespace, {})
        held = [p for p, items in paths.items() if any(i.live(now) for i in items.values())]
        return list_namespaces(held, conditions, max_depth, limit, offset)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        for ns in namespaces:
            self._namespaces.pop(ns, None)
        self._vectors = {k: v for k, v in self._vectors.items() if k[0] not in namespaces}
        for tp in [tp for tp in self._checkpoints if tp[0] in topics]:
            del self._checkpoints[tp]

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return self._checkpoints.get((want.topic, want.partition))

    async def close(self) -> None:
        pass
