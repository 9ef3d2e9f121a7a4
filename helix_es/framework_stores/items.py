"""LangGraph store items on the log: `write` appends checked put and delete events, reads wait for the view.

The client behind `helix_es.integrations.langgraph.HelixStore`, with no LangGraph import. Each
write is one `ItemPut` or `ItemDeleted` in the session that carries the item's namespace path
(`helix_es.views.items.session_of`). Reads are read-your-writes across every path this client
wrote: they wait until the view has applied the client's last write on each partition.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any, Literal

from helix_es.client.backend import Backend
from helix_es.client.runtime import Runtime, default_runtime
from helix_es.client.wait import Written
from helix_es.config import Config, load_section
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Event, ItemDeleted, ItemPut, ItemTouched, MemoryForgotten, Position
from helix_es.model.message import check_text
from helix_es.stores.ports import ItemStore
from helix_es.views.items import StoredItem, check_namespace, item_id, session_of

SECTION = "store"
SWEEP_PAGE = 1_000  # items a TTL sweep reads at a time
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Items:
    """One helix namespace's LangGraph store items, read and written through the log."""

    def __init__(
        self,
        backend: Backend,
        view: ItemStore,
        namespace: str,
        *,
        consistency: str = "read-your-writes",
        read_timeout: float = 5.0,
    ) -> None:
        self.backend = backend
        self.view = view
        self.namespace = namespace
        self.written = Written(namespace, consistency=consistency, read_timeout=read_timeout)

    def put_event(
        self,
        path: tuple[str, ...],
        key: str,
        value: Mapping[str, Any],
        *,
        index: Literal[False] | Sequence[str] | None = None,
        ttl_minutes: float | None = None,
    ) -> ItemPut:
        """The checked event of a put: a batch checks all its writes before it appends any."""
        check_namespace(path)
        _check_key(key)
        if not isinstance(value, Mapping):
            raise InvalidInput("value", f"must be a mapping (a JSON object), got {type(value).__name__}")
        try:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidInput("value", f"must be JSON-serializable: {exc}") from None
        fields: bool | tuple[str, ...] | None = None if index is None else False
        if index is not None and index is not False:
            if isinstance(index, str | bytes | bool) or not all(isinstance(f, str) and f for f in index):
                raise InvalidInput("index", f"must be False, None or a list of field paths, got {index!r}")
            fields = tuple(index)
        check_ttl(ttl_minutes, "ttl")
        return ItemPut(path, key, text, fields, None if ttl_minutes is None else float(ttl_minutes))

    def delete_event(self, path: tuple[str, ...], key: str) -> ItemDeleted:
        check_namespace(path)
        _check_key(key)
        return ItemDeleted(path, key)

    async def write(self, payloads: Sequence[ItemPut | ItemDeleted | ItemTouched]) -> Position:
        """Append checked events in order (each in its path's session); the last one's position."""
        position: Position | None = None
        for payload in payloads:
            position = await self.backend.append(Event(self.namespace, session_of(payload.namespace), payload))
            self.written.wrote(position)
        if position is None:
            raise InvalidInput("ops", "nothing to write")
        return position

    async def get(self, path: tuple[str, ...], key: str) -> StoredItem | None:
        check_namespace(path)
        await self._caught_up()
        return await self.view.get_item(self.namespace, path, key, datetime.now(UTC))

    async def search(
        self,
        prefix: tuple[str, ...],
        *,
        where: Mapping[str, Any] | None = None,
        query: str | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[StoredItem]:
        """Live items under `prefix` passing `where`; with a `query` and an index, the most similar first."""
        if not isinstance(prefix, tuple) or not all(isinstance(p, str) for p in prefix):
            raise InvalidInput("namespace_prefix", f"must be a tuple of strings, got {prefix!r}")
        if where is not None and not isinstance(where, Mapping):
            raise InvalidInput("filter", f"must be a mapping or None, got {type(where).__name__}")
        if query is not None:
            check_text(query, "query", error=InvalidInput)
        _check_window(limit, offset)
        await self._caught_up()
        return await self.view.find_items(self.namespace, prefix, where, limit, offset, datetime.now(UTC), query)

    async def namespaces(
        self,
        conditions: Sequence[tuple[str, tuple[str, ...]]] = (),
        *,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[tuple[str, ...]]:
        if max_depth is not None and (isinstance(max_depth, bool) or not isinstance(max_depth, int) or max_depth < 1):
            raise InvalidInput("max_depth", f"must be a whole number >= 1 or None, got {max_depth!r}")
        _check_window(limit, offset)
        await self._caught_up()
        now = datetime.now(UTC)
        return await self.view.item_namespaces(self.namespace, conditions, max_depth, limit, offset, now)

    async def sweep(self, now: datetime | None = None) -> int:
        """Record the forgetting of every item expired by `now` (`MemoryForgotten`, policy `ttl`), one event
        per path, in that path's session; the view drops them as it folds those. The items swept."""
        now = now or datetime.now(UTC)
        await self._caught_up()
        expired: dict[str, list[StoredItem]] = {}
        offset = 0
        while True:  # every item, live or not: live at the epoch is every item that ever had a TTL, and the rest
            page = await self.view.find_items(self.namespace, (), None, SWEEP_PAGE, offset, EPOCH)
            for item in page:
                if item.expires_at is not None and item.expires_at <= now:
                    expired.setdefault(session_of(item.namespace), []).append(item)
            if len(page) < SWEEP_PAGE:
                break
            offset += SWEEP_PAGE
        view = self.view.name.partition("@")[0]
        for sid, items in expired.items():
            ids = tuple(item_id(i.namespace, i.key) for i in items)
            payload = MemoryForgotten((view,), "ttl", "expired", ids=ids)
            self.written.wrote(await self.backend.append(Event(self.namespace, sid, payload)))
        return sum(len(items) for items in expired.values())

    async def _caught_up(self) -> None:
        await self.written.caught_up(self.backend, self.view)


def _check_key(key: object) -> None:
    check_text(key, "key", error=InvalidInput)
    if not key:
        raise InvalidInput("key", "must be a non-empty string")


def check_ttl(minutes: object, name: str) -> None:
    if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, int | float) or not minutes > 0):
        raise InvalidInput(name, f"must be a number of minutes > 0 or None, got {minutes!r}")


def _check_window(limit: object, offset: object) -> None:
    for name, value, least in (("limit", limit, 1), ("offset", offset, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise InvalidInput(name, f"must be a whole number >= {least}, got {value!r}")


@asynccontextmanager
async def open_items(
    config: Mapping[str, Any] | str | os.PathLike[str] | Config, runtime: Runtime | None = None
) -> AsyncIterator[Items]:
    """The items a config's `store:` mapping names (a dict, YAML text, a path, or a parsed Config), on
    `runtime`'s backend (by default the running loop's)."""
    cfg = config if isinstance(config, Config) else load_section(config, SECTION)
    runtime = runtime or default_runtime()
    backend = await runtime.acquire(cfg.log)
    try:
        view = await backend.attach(cfg.memory, cfg.memory.namespace)
        yield Items(
            backend,
            view,  # type: ignore[arg-type]
            cfg.memory.namespace,
            consistency=cfg.memory.consistency,
            read_timeout=cfg.memory.read_timeout,
        )
    finally:
        await runtime.release(cfg.log, backend)
