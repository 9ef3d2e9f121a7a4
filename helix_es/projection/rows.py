"""A view kept as rows (`helix_es.views.rows`): its fold's changes applied by any `RowStore`.

`apply` reads the partition checkpoint, folds the records after it (reading first what the fold
asks for), and hands the changes and the new checkpoint to the store, which applies them in one
atomic step only if the checkpoint is still the one read (`after`); otherwise `StaleWrite`, and
the projector reloads. The store never sees an event.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Mapping, Sequence
from typing import Generic, Protocol, TypeVar

from helix_es.model.events import Record
from helix_es.stores.ports import Applied, BulkLoad, RowStore
from helix_es.views.rows import Row, RowChange, Scan, Table

OpT = TypeVar("OpT")


class Wanted(Protocol):
    """What a fold asks the store for before it folds: rows, and namespaces' marks."""

    @property
    def scans(self) -> tuple[Scan, ...]: ...

    @property
    def marks(self) -> tuple[str, ...]: ...


W = TypeVar("W", bound=Wanted)


class RowFold(Protocol[OpT, W]):
    """A view's pure fold into rows: records as ops, what it must read, and the changes."""

    mark: str  # the mark `marks` names

    @property
    def tables(self) -> tuple[Table, ...]: ...

    def ops(self, records: Sequence[Record]) -> tuple[str, int, list[OpT]]: ...

    def offset(self, op: OpT) -> int: ...

    def wants(self, ops: Sequence[OpT]) -> W: ...

    def fold(
        self, ops: Sequence[OpT], wants: W, found: Sequence[Sequence[Row]], marks: Mapping[str, int | None]
    ) -> list[RowChange]: ...


class RowProjection(Generic[OpT, W]):
    """The worker side of a row view: `apply`, checkpoints and `drop`, over one `RowStore`."""

    def __init__(self, store: RowStore, fold: RowFold[OpT, W]) -> None:
        self.store = store
        self.fold = fold
        self.kind = store.kind

    @property
    def name(self) -> str:
        return self.store.name

    @name.setter
    def name(self, name: str) -> None:
        self.store.name = name

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        topic, partition, ops = self.fold.ops(records)
        done = await self.store.checkpoint(topic, partition)
        fresh = [op for op in ops if done is None or self.fold.offset(op) > done]
        if not fresh:
            return Applied(0)
        wants = self.fold.wants(fresh)
        found = await asyncio.gather(*(self.store.scan(s) for s in wants.scans))
        marks = await asyncio.gather(*(self.store.mark(ns, self.fold.mark) for ns in wants.marks))
        changes = self.fold.fold(fresh, wants, [r or [] for r in found], dict(zip(wants.marks, marks, strict=True)))
        await self.store.apply(topic, partition, changes, self.fold.offset(fresh[-1]), after=done)
        return Applied(len(fresh))

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self.store.checkpoint(topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await self.store.advance(topic, partition, offset)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        await self.store.drop(namespaces, topics)

    # A rebuild's target is a bulk load (`projectors.rebuild.bulk`): a store that keeps search
    # indexes up row by row builds them once at the end instead.
    def defer_indexes(self) -> None:
        if isinstance(self.store, BulkLoad):
            self.store.defer_indexes()

    async def start_load(self) -> None:
        if isinstance(self.store, BulkLoad):
            await self.store.start_load()

    async def build_indexes(self) -> None:
        if isinstance(self.store, BulkLoad):
            await self.store.build_indexes()

    async def close(self) -> None:
        await self.store.close()
