"""`HelixStore`: a LangGraph `BaseStore` whose every put and delete is an event on the log.

Items live in the items view (`helix_es.views.items`) of the config's `store:` mapping: in memory
with the embedded log, in PostgreSQL or Redis with Kafka (`helix-es project` folds them). A batch behaves
as LangGraph's `InMemoryStore` does: its reads see the store as it was before the batch, and of
several puts of one item in a batch the last one wins. A batch is checked whole before anything is
written: a bad namespace label (`InvalidNamespaceError`), key, value or TTL in any op writes nothing.

TTLs are LangGraph's (`ttl=TTLConfig(default_ttl=..., refresh_on_read=...)`): an item expires its
TTL after its last put or refresh, and expired items are never read back. A read with refresh
(`refresh_on_read`, True by default as in LangGraph, or an op's `refresh_ttl`) appends an
`ItemTouched` event per live item with a TTL that it returned, so a rebuild folds the same expiries;
at most one a second per item (`StoredItem.refreshable`). Expired items stay in the view, unread,
until a sweep (`sweep_ttl`, or the sweeper `sweep_interval_minutes` starts) records their forgetting
as `MemoryForgotten` with policy `ttl`, as the forgetting policies of memories do.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, TypeVar

from langgraph.store.base import (
    BaseStore,
    GetOp,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    TTLConfig,
    validate_op_namespace,
)

from helix_es.config import Config
from helix_es.framework_stores.items import Items, check_ttl, open_items
from helix_es.integrations.langgraph_ttl import Sweeper
from helix_es.model.errors import InvalidInput
from helix_es.model.events import ItemDeleted, ItemPut, ItemTouched
from helix_es.sync import run as run_sync
from helix_es.views.items import StoredItem

T = TypeVar("T")
Source = Mapping[str, Any] | str | os.PathLike[str] | Config
TTL_KEYS = frozenset(TTLConfig.__annotations__)


class HelixStore(BaseStore):
    """A LangGraph store on a helix-es log; open it with `HelixStore.from_config(config)`."""

    supports_ttl = True

    def __init__(
        self,
        items: Items,
        *,
        loop: asyncio.AbstractEventLoop | None = None,
        ttl: TTLConfig | None = None,
        own_loop: bool = False,
    ) -> None:
        self.items = items
        self.ttl_config = check_ttl_config(ttl)
        self._loop = loop  # where `items` lives: the sync methods hand their work to it
        self._own_loop = own_loop  # helix-es's sync loop (`helix_es.sync`), not the caller's
        self._sweeper = Sweeper(self.asweep_ttl, f"items of {items.namespace}")

    @staticmethod
    def from_config(config: Source, *, ttl: TTLConfig | None = None) -> _Opened:
        """`async with HelixStore.from_config(cfg) as store` (or `with`, from code with no running loop).
        `ttl` is LangGraph's `TTLConfig` (`default_ttl` minutes, `refresh_on_read`)."""
        return _Opened(config, check_ttl_config(ttl))

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        ops = list(ops)
        writes = self._writes(ops)  # every op checked before anything is read or written
        results: list[Result] = []
        touched: dict[tuple[tuple[str, ...], str], ItemTouched] = {}  # what reads with refresh_ttl extend
        now = datetime.now(UTC)
        for op in ops:
            if isinstance(op, GetOp):
                found = await self.items.get(op.namespace, op.key)
                results.append(None if found is None else _item(found))
                read = [] if found is None or not op.refresh_ttl else [found]
            elif isinstance(op, SearchOp):
                hits = await self.items.search(
                    tuple(op.namespace_prefix), where=op.filter, query=op.query, limit=op.limit, offset=op.offset
                )
                results.append([_item(h, search=True) for h in hits])
                read = hits if op.refresh_ttl else []
            elif isinstance(op, ListNamespacesOp):
                read = []
                conditions = [(c.match_type, _path(c.path)) for c in op.match_conditions or ()]
                results.append(
                    await self.items.namespaces(conditions, max_depth=op.max_depth, limit=op.limit, offset=op.offset)
                )
            else:
                results.append(None)
                continue
            for item in read:
                if item.refreshable(now):
                    touched[(item.namespace, item.key)] = ItemTouched(item.namespace, item.key)
        if touched or writes:  # the batch's puts come after its refreshes: a put sets the TTL anew
            await self.items.write([*touched.values(), *writes])
        return results

    def _writes(self, ops: list[Op]) -> list[ItemPut | ItemDeleted]:
        """The batch's checked write events, the last put of each item winning; raises on any bad op."""
        puts: dict[tuple[tuple[str, ...], str], ItemPut | ItemDeleted] = {}
        for op in ops:
            if not isinstance(op, GetOp | SearchOp | ListNamespacesOp | PutOp):
                raise InvalidInput("ops", f"unknown store operation {type(op).__name__}")
            validate_op_namespace(op)
            if isinstance(op, PutOp):
                if not op.namespace:
                    raise InvalidNamespaceError("Namespace cannot be empty.")
                if op.value is None:
                    puts[(op.namespace, op.key)] = self.items.delete_event(op.namespace, op.key)
                else:
                    puts[(op.namespace, op.key)] = self.items.put_event(
                        op.namespace, op.key, op.value, index=op.index, ttl_minutes=op.ttl
                    )
        return list(puts.values())

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        return self._run(self.abatch(list(ops)))

    async def asweep_ttl(self) -> int:
        """Forget every expired item: recorded as `MemoryForgotten` (policy `ttl`), so audit says why each
        left and a rebuild forgets the same; the items swept. A put after the sweep looked keeps its item."""
        return await self.items.sweep()

    def sweep_ttl(self) -> int:
        return self._run(self.asweep_ttl())

    def start_ttl_sweeper(self, sweep_interval_minutes: float | None = None) -> asyncio.Task[None]:
        """Sweep every `sweep_interval_minutes` (default: the TTLConfig's, else 5) in the background until
        `stop_ttl_sweeper` or the store closes; LangGraph's PostgresStore has the same method."""
        loop = self._loop or asyncio.get_running_loop()
        minutes = sweep_interval_minutes or (self.ttl_config or {}).get("sweep_interval_minutes")
        return self._sweeper.start(loop, minutes)

    async def stop_ttl_sweeper(self) -> bool:
        """Stop the background sweeper; whether one was running."""
        return await self._sweeper.stop()

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        """A sync call: the work runs on the loop the store lives on, the caller's thread waits."""
        if self._own_loop:
            return run_sync(work)
        loop = self._loop
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if loop is None or loop.is_closed() or not loop.is_running():
            work.close()
            raise RuntimeError("this HelixStore is closed (its `async with` has ended): open another")
        if running is loop:  # waiting here would block the very loop that has to do the work
            work.close()
            raise asyncio.InvalidStateError(
                "a HelixStore opened with `async with` was called synchronously from its own event loop: "
                "await its async methods (aget, aput, ...) there, or call the sync ones from another thread"
            )
        return asyncio.run_coroutine_threadsafe(work, loop).result()


def check_ttl_config(ttl: object) -> TTLConfig:
    """LangGraph's `TTLConfig` checked: known keys, a `default_ttl` of minutes > 0 (or None)."""
    if ttl is None:
        return TTLConfig()
    if not isinstance(ttl, Mapping):
        raise InvalidInput("ttl", f"must be a TTLConfig mapping or None, got {type(ttl).__name__}")
    unknown = sorted(set(ttl) - TTL_KEYS)
    if unknown:
        raise InvalidInput(f"ttl.{unknown[0]}", f"unknown key; known: {', '.join(sorted(TTL_KEYS))}")
    check_ttl(ttl.get("default_ttl"), "ttl.default_ttl")
    check_ttl(ttl.get("sweep_interval_minutes"), "ttl.sweep_interval_minutes")
    for flag in ("refresh_on_read", "omit_expired"):
        if not isinstance(ttl.get(flag, True), bool):
            raise InvalidInput(f"ttl.{flag}", f"must be true or false, got {ttl[flag]!r}")
    return TTLConfig(**ttl)  # type: ignore[typeddict-item]


def _path(path: str | Iterable[str]) -> tuple[str, ...]:
    """A match condition's path: LangGraph's own stores take a lone string as a one-label path."""
    return (path,) if isinstance(path, str) else tuple(path)


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

    def __init__(self, config: Source, ttl: TTLConfig) -> None:
        self.config = config
        self.ttl = ttl
        self._exit: AbstractAsyncContextManager[HelixStore] | None = None

    async def __aenter__(self) -> HelixStore:
        self._exit = _opened(self.config, self.ttl, own_loop=False)
        return await self._exit.__aenter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._exit is not None
        await self._exit.__aexit__(kind, exc, tb)

    def __enter__(self) -> HelixStore:
        async def enter() -> HelixStore:
            self._exit = _opened(self.config, self.ttl, own_loop=True)
            return await self._exit.__aenter__()

        return run_sync(enter())

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        assert self._exit is not None
        run_sync(self._exit.__aexit__(kind, exc, tb))


@asynccontextmanager
async def _opened(config: Source, ttl: TTLConfig, *, own_loop: bool) -> AsyncIterator[HelixStore]:
    async with open_items(config) as items:
        store = HelixStore(items, loop=asyncio.get_running_loop(), ttl=ttl, own_loop=own_loop)
        if ttl.get("sweep_interval_minutes"):
            store.start_ttl_sweeper()
        try:
            yield store
        finally:
            await store.stop_ttl_sweeper()
            store._loop = None  # later sync calls say it is closed instead of waiting on a loop that moved on
