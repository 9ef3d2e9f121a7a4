"""`HelixStore`: a LangGraph `BaseStore` whose every put and delete is an event on the log.

Items live in the items view (`helix_es.views.items`) of the config's `store:` mapping: in memory
with the embedded log, in PostgreSQL or Redis with Kafka (`helix-es project` folds them). A batch behaves
as LangGraph's `InMemoryStore` does: its reads see the store as it was before the batch, and of
several puts of one item in a batch the last one wins. TTLs count from the item's last put: a read
is not an event, so it does not extend them (`ttl_config` says `refresh_on_read: False`, and an
op's `refresh_ttl` changes nothing; put the item again to extend it).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
)

from helix_es.client.items import Items, open_items
from helix_es.config import Config
from helix_es.model.errors import InvalidInput
from helix_es.sync import run as run_sync
from helix_es.views.items import StoredItem

T = TypeVar("T")
Source = Mapping[str, Any] | str | os.PathLike[str] | Config


class HelixStore(BaseStore):
    """A LangGraph store on a helix-es log; open it with `HelixStore.from_config(config)`."""

    supports_ttl = True

    def __init__(self, items: Items, *, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.items = items
        self.ttl_config = TTLConfig(refresh_on_read=False)
        self._loop = loop  # where `items` lives: the sync methods hand their work to it

    @staticmethod
    def from_config(config: Source) -> _Opened:
        """`async with HelixStore.from_config(cfg) as store` (or `with`, from code with no running loop)."""
        return _Opened(config)

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        results: list[Result] = []
        puts: dict[tuple[tuple[str, ...], str], PutOp] = {}
        for op in ops:
            if isinstance(op, GetOp):
                found = await self.items.get(op.namespace, op.key)
                results.append(None if found is None else _item(found))
            elif isinstance(op, SearchOp):
                hits = await self.items.search(
                    op.namespace_prefix, where=op.filter, query=op.query, limit=op.limit, offset=op.offset
                )
                results.append([_item(h, search=True) for h in hits])
            elif isinstance(op, ListNamespacesOp):
                conditions = [(c.match_type, tuple(c.path)) for c in op.match_conditions or ()]
                results.append(
                    await self.items.namespaces(conditions, max_depth=op.max_depth, limit=op.limit, offset=op.offset)
                )
            elif isinstance(op, PutOp):
                puts[(op.namespace, op.key)] = op
                results.append(None)
            else:
                raise InvalidInput("ops", f"unknown store operation {type(op).__name__}")
        for (namespace, key), put in puts.items():
            if put.value is None:
                await self.items.delete(namespace, key)
            else:
                await self.items.put(namespace, key, put.value, index=put.index, ttl_minutes=put.ttl)
        return results

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._run(self.abatch(list(ops)))

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        if self._loop is None:
            work.close()
            raise RuntimeError("this HelixStore was opened with `async with`: call its async methods (aget, aput, ...)")
        return run_sync(work)


def _item(found: StoredItem, *, search: bool = False) -> Item:
    if search:
        return SearchItem(
            found.namespace, found.key, found.data(), found.created_at, found.updated_at, score=found.score
        )
    return Item(
        value=found.data(),
        key=found.key,
        namespace=found.namespace,
        created_at=found.created_at,
        updated_at=found.updated_at,
    )


class _Opened:
    """`HelixStore.from_config(...)`: an async context manager, and a sync one whose store lives on
    helix-es's own loop (`helix_es.sync`), where sync memories of the same log live too."""

    def __init__(self, config: Source) -> None:
        self.config = config
        self._exit: AbstractAsyncContextManager[HelixStore] | None = None

    async def __aenter__(self) -> HelixStore:
        self._exit = _opened(self.config)
        return await self._exit.__aenter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._exit is not None
        await self._exit.__aexit__(kind, exc, tb)

    def __enter__(self) -> HelixStore:
        async def enter() -> HelixStore:
            self._exit = _opened(self.config, loop=asyncio.get_running_loop())
            return await self._exit.__aenter__()

        return run_sync(enter())

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._exit is not None
        run_sync(self._exit.__aexit__(kind, exc, tb))


@asynccontextmanager
async def _opened(config: Source, loop: asyncio.AbstractEventLoop | None = None) -> AsyncIterator[HelixStore]:
    async with open_items(config) as items:
        yield HelixStore(items, loop=loop)
