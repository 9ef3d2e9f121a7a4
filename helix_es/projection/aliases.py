"""Targets and aliases: where a view's data lives, and which of its copies readers use.

A view (`sliding-window-30`) keeps its data under a **target** name: the view's own name at
first, then `sliding-window-30@v2`, `@v3`, ... after each `helix-es rebuild`. The target takes
the place the view name had everywhere data is named: Redis keys and checkpoint hash, the
Postgres `view` column (and for a long-term memory in Postgres the table: `agent_memory_v2`),
and the projector's consumer group. An **alias**, kept in the view's own store, says which
target readers use; no alias means the view's own name:

- Redis: `helix:alias:<view>` = target (a string); `helix:targets:<view>` (a set): every target built.
- PostgreSQL: `helix_aliases (view PK, target, switched_at)` and `helix_targets (view, target, created_at)`.
- memory (and file) stores: in the process (`MemoryAliases`, one per backend).

`<view>` is the view name, with `:<topic_prefix>` appended for a non-default topic prefix (as
consumer groups append it), so deployments sharing one Redis or PostgreSQL keep their own aliases.

Readers resolve the alias once when a memory is attached and re-read it at most once a second
(`AliasedProjection.refresh`), so `get` stays one round trip and open memories move to a new
target within about a second. The projector service keeps writing the target readers use by
running `projectors.follow.TargetFollower` (or by calling `current_target` and `target_projection` itself).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, replace
from typing import Any

from helix_es.config import MemoryConfig
from helix_es.model import names
from helix_es.model.errors import ConfigError
from helix_es.model.events import Position, Record, SessionCompacted
from helix_es.model.message import Message
from helix_es.model.names import alias_id, check_target
from helix_es.projection.factory import (
    open_aliases,
    open_idempotency,
    open_projection,
    open_store,
    open_wide,
)
from helix_es.projection.protocol import Projection
from helix_es.stores import registry
from helix_es.stores.ports import AliasStore, Applied, Change, SessionKey, Snapshot, ViewStore
from helix_es.views.base import State, View
from helix_es.views.facts import Facts, facts_target_table
from helix_es.views.long_term import LongTerm, target_table

log = logging.getLogger(__name__)

REFRESH_SECONDS = 1.0  # how stale a reader's idea of the alias may get


async def resolve(aliases: AliasStore, view: str, topic_prefix: str = names.DEFAULT_TOPIC_PREFIX) -> str:
    """The target readers of `view` use: its alias, else the view's own name."""
    return await aliases.get(alias_id(view, topic_prefix)) or view


async def current_target(memory: MemoryConfig, topic_prefix: str = names.DEFAULT_TOPIC_PREFIX) -> str:
    """The target readers of `memory`'s view use now (one round trip). For in-process stores: the view name."""
    aliases = open_aliases(memory)
    try:
        return await resolve(aliases, memory.view.name, topic_prefix)
    finally:
        await aliases.close()


# --- a view's data under a target name ---


@dataclass(frozen=True, eq=False)
class StoredView(View):
    """How a `ViewStore` sees a view kept under another name: every key, row and checkpoint uses `target`.

    Folding and rendering stay the view's own (a summary still matches the summaries recorded for
    the view's name); only the store's names change.
    """

    view: View
    target: str

    @property
    def name(self) -> str:
        return self.target

    @property
    def key_suffix(self) -> str:
        return self.target

    @property
    def family(self) -> str:  # type: ignore[override]
        return self.view.family

    @property
    def ttl(self) -> float | None:
        return getattr(self.view, "ttl", None)

    def fold(self, state: State, event: Any) -> State:
        return self.view.fold(state, event)

    def compacted(self, state: State, compaction: SessionCompacted, position: Position) -> State:
        return self.view.compacted(state, compaction, position)

    def added(self, state: State, message: Message) -> State:
        return self.view.added(state, message)

    def render(self, state: State) -> list[Message]:
        return self.view.render(state)

    def search(self, state: State, query: str, limit: int) -> list[Message]:
        return self.view.search(state, query, limit)


class TargetStore:
    """A `ViewStore` that keeps every view it is given under `target` (its owner closes `inner`)."""

    def __init__(self, inner: ViewStore, target: str) -> None:
        self.inner = inner
        self.target = target
        self.kind = inner.kind
        self._views: dict[int, tuple[View, StoredView]] = {}

    def stored(self, view: View) -> View:
        hit = self._views.get(id(view))
        if hit is None or hit[0] is not view:
            hit = self._views[id(view)] = (view, StoredView(view, self.target))
        return hit[1]

    async def load(self, view: View, keys: Sequence[SessionKey]) -> dict[SessionKey, Snapshot]:
        return await self.inner.load(self.stored(view), keys)

    async def apply(self, view: View, topic: str, partition: int, changes: Sequence[Change], checkpoint: int) -> None:
        await self.inner.apply(self.stored(view), topic, partition, changes, checkpoint)

    async def checkpoint(self, view: View, topic: str, partition: int) -> int | None:
        return await self.inner.checkpoint(self.stored(view), topic, partition)

    async def read(self, view: View, key: SessionKey, *, guard: bool = True) -> Snapshot:
        return await self.inner.read(self.stored(view), key, guard=guard)

    async def drop(self, view: View, namespaces: Collection[str], topics: Collection[str]) -> None:
        await self.inner.drop(self.stored(view), namespaces, topics)

    async def sessions(self, view: View, namespace: str) -> list[str]:
        return await self.inner.sessions(self.stored(view), namespace)

    async def forget_checkpoints(self, view: View, partitions: Collection[tuple[str, int]]) -> None:
        await self.inner.forget_checkpoints(self.stored(view), partitions)

    async def close(self) -> None:
        pass  # the inner store is shared; its owner closes it


def target_store(store: ViewStore, view: View, target: str) -> ViewStore:
    """`store` as the session view `view` kept under `target` sees it."""
    return store if target == view.name else TargetStore(store, target)


def target_projection(memory: MemoryConfig, target: str, store: ViewStore | None = None) -> Projection:
    """The projection of `memory`'s view kept under `target`, for the worker side and the read side alike.

    Session views write through `store` (required for them; the caller closes it). Long-term and
    vector projections open their own connection, which `close()` closes. Derived events keep the
    view's own name, so every target of a view reuses the summaries and embeddings recorded for it.
    """

    check_target(target, "target")
    view = memory.view
    if isinstance(view, View):
        if store is None:
            raise ValueError(f"{view.name}: a session view's target projection needs the store it writes through")
        return open_projection(memory, target_store(store, view, target), name=target)
    return open_projection(_target_memory(memory, target), name=target)


def _target_memory(memory: MemoryConfig, target: str) -> MemoryConfig:
    """`memory` with what names a namespace-wide view's data moved to `target` (its checkpoints are by name)."""
    view = memory.view
    if isinstance(view, LongTerm) and registry.kind(view.store).tables:
        # Long-term rows carry no view column: another target is another table.
        return replace(memory, view=replace(view, table=target_table(view.table, view.name, target)))
    if isinstance(view, Facts) and registry.kind(view.store).tables:  # so do facts rows; the view keeps its name
        table = facts_target_table(view.table, view.name, target)
        return replace(memory, view=replace(view, table=table, source=view.name))
    return memory


async def drop_target_data(
    memory: MemoryConfig, target: str, namespaces: Collection[str], topics: Collection[str]
) -> None:
    """Delete `target`'s data in `namespaces` and its checkpoints of `topics` (theirs), in `memory`'s store.

    Each store deletes its own keys or rows (`ViewStore.drop`, `WideProjection.drop`).
    Views kept in a process (memory and file stores) are dropped there, not from outside.
    """
    kind = registry.kind(memory.store)
    if kind.in_process:
        raise ConfigError("memory.store", f"no targets to drop in a {memory.store} store from outside its process")
    view = memory.view
    if isinstance(view, View):
        store = open_store(memory)
        try:
            await target_store(store, view, target).drop(view, namespaces, topics)
        finally:
            await store.close()
    else:  # namespace-wide views: the target's own projection drops its data
        wide = open_wide(_target_memory(memory, target))
        wide.name = target
        try:
            await wide.drop(namespaces, topics)
        finally:
            await wide.close()
    keys = open_idempotency(memory)
    try:
        await keys.drop(target, namespaces)
    finally:
        await keys.close()


# --- the read side: follow the alias ---


Install = Callable[["AliasedProjection", Projection, str], Awaitable[None]]


class AliasedProjection:
    """The projection readers use for a view: the target its alias names, re-checked about once a second.

    It is attached once per backend and view; `get` and `search` go straight to the current
    target's projection (one round trip). `refresh()` (the backend calls it before a read) reads
    the alias when `interval` has passed (every time for in-process aliases) and moves to a new
    target through `install` (which the embedded backend uses to catch the target up first). Every
    move bumps `generation`, so a reader that had seen its last write waits for it again.
    """

    def __init__(
        self,
        memory: MemoryConfig,
        aliases: AliasStore,
        topic_prefix: str = names.DEFAULT_TOPIC_PREFIX,
        *,
        store: ViewStore | None = None,
        install: Install | None = None,
        interval: float | None = None,
    ) -> None:
        self.memory = memory
        self.view_name = memory.view.name
        self.kind = registry.views_kind(memory.store)
        self.alias = alias_id(self.view_name, topic_prefix)
        self.aliases = aliases
        self.shared_store = store
        self._install = install
        self.interval = 0.0 if aliases.cheap else (REFRESH_SECONDS if interval is None else interval)
        self.current: Projection | None = None
        self.target = self.view_name
        self.generation = 0
        self._next_check = 0.0
        self._lock = asyncio.Lock()
        self._retired: list[Projection] = []

    @property
    def name(self) -> str:
        return self.target

    async def ready(self, *, strict: bool = True) -> Projection | None:
        """Resolve the alias and open the target's projection, once.

        Not `strict` (when a memory is opened), an unreachable store leaves that to the first use,
        as the stores themselves connect on first use: an embedded append still lands on the log.
        """
        if self.current is None:
            async with self._lock:
                if self.current is None:
                    try:
                        target = await resolve_alias(self.aliases, self.alias, self.view_name)
                    except Exception:
                        if strict:
                            raise
                        log.debug("%s: alias not read yet", self.view_name, exc_info=True)
                        return None
                    self.current = target_projection(self.memory, target, self.shared_store)
                    self.target, self.kind = target, self.current.kind
                    self._next_check = time.monotonic() + self.interval
        return self.current

    async def refresh(self) -> bool:
        """Follow the alias if it is time to look again; True if readers moved to another target."""
        if self.current is None or time.monotonic() < self._next_check:
            return False
        async with self._lock:
            if time.monotonic() < self._next_check:
                return False
            self._next_check = time.monotonic() + self.interval
            try:
                target = await resolve_alias(self.aliases, self.alias, self.view_name)
            except Exception as exc:  # a store hiccup must not fail reads of the target we have
                log.warning("%s: could not read its alias (%s); still reading %s", self.view_name, exc, self.target)
                return False
            if target == self.target:
                return False
            projection = target_projection(self.memory, target, self.shared_store)
            log.info("%s: readers move from %s to %s", self.view_name, self.target, target)
            if self._install is not None:
                await self._install(self, projection, target)
            else:
                self.swap(projection, target)
            return True

    def swap(self, projection: Projection, target: str) -> None:
        """Serve `target` from now on (the old projection is closed with this one)."""
        if self.current is not None:
            self._retired.append(self.current)
        self.current, self.target = projection, target
        self.generation += 1

    async def forget(self, target: str) -> None:
        """Close and let go of the projections of `target`, which readers left (its data is dropped)."""
        keep = []
        for projection in self._retired:
            if projection.name == target:
                await projection.close()
            else:
                keep.append(projection)
        self._retired = keep

    def __getattr__(self, name: str) -> Any:
        # What else a projection offers (a store, counters) is the current target's.
        if name.startswith("__") or self.__dict__.get("current") is None:
            raise AttributeError(name)
        return getattr(self.__dict__["current"], name)

    async def _now(self) -> Projection:
        current = self.current or await self.ready()
        assert current is not None
        return current

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        return await (await self._now()).apply(records, live=live)

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await (await self._now()).checkpoint(topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await (await self._now()).advance(topic, partition, offset)

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        return await (self.current or await self._now()).get(key, want)

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        return await (self.current or await self._now()).search(key, query, limit, want)

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await (await self._now()).applied(key, want)

    async def close(self) -> None:
        for projection in [*self._retired, *([self.current] if self.current else [])]:
            await projection.close()
        self._retired.clear()
        self.current = None


async def resolve_alias(aliases: AliasStore, alias: str, view: str) -> str:
    return await aliases.get(alias) or view


# --- the worker side: the projector service follows the alias too ---
