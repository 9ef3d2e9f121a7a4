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
running `TargetFollower` (or by calling `current_target` and `target_projection` itself).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Protocol

import redis.asyncio as aioredis

from helix_es.model import names
from helix_es.model.errors import ConfigError
from helix_es.model.events import Position, Record
from helix_es.model.message import Message
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import Applied, Change, SessionKey, Snapshot, ViewStore
from helix_es.stores.postgres.pool import Pg
from helix_es.stores.redis.pool import redis_client
from helix_es.views import State, View

if TYPE_CHECKING:
    from helix_es.config import MemoryConfig
    from projectors.runner import Progress, Projector

log = logging.getLogger(__name__)

REFRESH_SECONDS = 1.0  # how stale a reader's idea of the alias may get
TARGET_RE = re.compile(r"[A-Za-z0-9._@+-]{1,240}")  # no `:` (the alias separator), braces or spaces
_VERSION_RE = re.compile(r"@v(\d+)$")


# --- names ---


def alias_id(view: str, topic_prefix: str = names.DEFAULT_TOPIC_PREFIX) -> str:
    """The alias of a view in one deployment: `<view>`, or `<view>:<topic_prefix>` for another prefix."""
    return view if topic_prefix == names.DEFAULT_TOPIC_PREFIX else f"{view}:{topic_prefix}"


def alias_key(alias: str) -> str:
    return f"helix:alias:{alias}"


def targets_key(alias: str) -> str:
    return f"helix:targets:{alias}"


def check_target(target: object, field_name: str = "--into") -> str:
    if not isinstance(target, str) or not TARGET_RE.fullmatch(target):
        raise ConfigError(field_name, f"a target name matches [A-Za-z0-9._@+-]{{1,240}}, got {target!r}")
    return target


def version_of(view: str, target: str) -> int:
    """`sliding-window-30@v3` -> 3; the view's own name is version 1; other names 0."""
    if target == view:
        return 1
    m = _VERSION_RE.search(target)
    return int(m.group(1)) if m and target[: m.start()] == view else 0


def next_target(view: str, known: Sequence[str]) -> str:
    """`<view>@v<N>`, N one past every version built so far (the view's own name counts as v1)."""
    return f"{view}@v{max([1, *(version_of(view, t) for t in known)]) + 1}"


def target_table(table: str, view: str, target: str) -> str:
    """The PostgreSQL table of a long-term target: the view's table for its own name, else `<table>_<tag>`."""
    from helix_es.views.long_term import MAX_TABLE, check_table

    if target == view:
        return table
    tag = target[len(view) + 1 :] if target.startswith(view + "@") else target
    slug = re.sub(r"[^a-z0-9_]+", "_", tag.lower()).strip("_") or "t"
    name = f"{table}_{slug}"
    if len(name) > MAX_TABLE:  # PostgreSQL would truncate it silently: keep it unique instead
        name = f"{name[: MAX_TABLE - 9]}_{hashlib.sha256(target.encode()).hexdigest()[:8]}"
    return check_table(name, "target table")


# --- where aliases are kept ---


class AliasStore(Protocol):
    kind: str
    cheap: bool  # reading the alias costs no round trip: readers may check it on every read

    async def get(self, alias: str) -> str | None: ...

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        """Point `alias` at `target` if it resolves to `expect` now (no alias resolves to `base`).

        Atomic; returns None on success, else what it resolves to (someone else switched it).
        """
        ...

    async def targets(self, alias: str) -> set[str]: ...

    async def add_target(self, alias: str, target: str) -> None: ...

    async def forget_target(self, alias: str, target: str) -> None: ...

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        """A projector service projects `target` (for `ttl` seconds, unless announced again; 0 withdraws)."""
        ...

    async def served(self, alias: str) -> set[str]:
        """The targets some projector service announced it projects, and still does."""
        ...

    async def close(self) -> None: ...


def served_key(alias: str) -> str:
    return f"helix:served:{alias}"


_SWITCH = """
local current = redis.call('GET', KEYS[1]) or ARGV[3]
if current ~= ARGV[1] then return current end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[2])
return false
"""


class RedisAliases:
    kind = "redis"
    cheap = False

    def __init__(self, url: str) -> None:
        self.url = url
        self._redis: aioredis.Redis | None = None

    @property
    def redis(self) -> aioredis.Redis:
        if self._redis is None:  # opened on first use: most views never switch
            self._redis = redis_client(self.url)
        return self._redis

    async def get(self, alias: str) -> str | None:
        value = await self.redis.get(alias_key(alias))
        return None if value is None else value.decode()

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        found = await self.redis.eval(_SWITCH, 2, alias_key(alias), targets_key(alias), expect, target, base)
        return None if found is None else found.decode()

    async def targets(self, alias: str) -> set[str]:
        return {t.decode() for t in await self.redis.smembers(targets_key(alias))}

    async def add_target(self, alias: str, target: str) -> None:
        await self.redis.sadd(targets_key(alias), target)

    async def forget_target(self, alias: str, target: str) -> None:
        await self.redis.srem(targets_key(alias), target)

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        # A sorted set of target -> until (ms since the epoch): several services may announce.
        if ttl > 0:
            await self.redis.zadd(served_key(alias), {target: time.time() * 1000 + ttl * 1000})
        else:
            await self.redis.zrem(served_key(alias), target)

    async def served(self, alias: str) -> set[str]:
        found = await self.redis.zrangebyscore(served_key(alias), time.time() * 1000, "+inf")
        return {t.decode() for t in found}

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None


_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_aliases (
    view text PRIMARY KEY,
    target text NOT NULL,
    switched_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS helix_targets (
    view text NOT NULL,
    target text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (view, target)
);
CREATE TABLE IF NOT EXISTS helix_served (
    view text NOT NULL,
    target text NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (view, target)
);
"""


class PostgresAliases:
    kind = "postgres"
    cheap = False

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pg = Pg(dsn)

    async def get(self, alias: str) -> str | None:
        pool = await self.pg.pool(_PG_SCHEMA)
        target: str | None = await pool.fetchval("SELECT target FROM helix_aliases WHERE view = $1", alias)
        return target

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        pool = await self.pg.pool(_PG_SCHEMA)
        async with pool.acquire() as conn, conn.transaction():
            # One switch of an alias at a time; readers see the old row or the new one, never neither.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('helix_aliases:' || $1))", alias)
            current = await conn.fetchval("SELECT target FROM helix_aliases WHERE view = $1", alias) or base
            if current != expect:
                return str(current)
            await conn.execute(
                "INSERT INTO helix_aliases (view, target) VALUES ($1, $2) "
                "ON CONFLICT (view) DO UPDATE SET target = excluded.target, switched_at = now()",
                alias, target,
            )
            await conn.execute("INSERT INTO helix_targets (view, target) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                               alias, target)
        return None

    async def targets(self, alias: str) -> set[str]:
        pool = await self.pg.pool(_PG_SCHEMA)
        return {r["target"] for r in await pool.fetch("SELECT target FROM helix_targets WHERE view = $1", alias)}

    async def add_target(self, alias: str, target: str) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        await pool.execute("INSERT INTO helix_targets (view, target) VALUES ($1, $2) ON CONFLICT DO NOTHING",
                           alias, target)

    async def forget_target(self, alias: str, target: str) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        await pool.execute("DELETE FROM helix_targets WHERE view = $1 AND target = $2", alias, target)

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        if ttl > 0:
            await pool.execute(
                "INSERT INTO helix_served (view, target, until) VALUES ($1, $2, now() + make_interval(secs => $3)) "
                "ON CONFLICT (view, target) DO UPDATE SET until = greatest(helix_served.until, excluded.until)",
                alias, target, float(ttl),
            )
        else:
            await pool.execute("DELETE FROM helix_served WHERE view = $1 AND target = $2", alias, target)

    async def served(self, alias: str) -> set[str]:
        pool = await self.pg.pool(_PG_SCHEMA)
        rows = await pool.fetch("SELECT target FROM helix_served WHERE view = $1 AND until > now()", alias)
        return {r["target"] for r in rows}

    async def close(self) -> None:
        await self.pg.close()


@dataclass
class MemoryAliases:
    """In-process aliases, for views that live in the process (memory and file stores)."""

    kind: str = "memory"
    cheap: bool = True
    aliases: dict[str, str] = field(default_factory=dict)
    built: dict[str, set[str]] = field(default_factory=dict)
    announced: dict[tuple[str, str], float] = field(default_factory=dict)  # (alias, target) -> until (monotonic)

    async def get(self, alias: str) -> str | None:
        return self.aliases.get(alias)

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        current = self.aliases.get(alias, base)
        if current != expect:
            return current
        self.aliases[alias] = target
        self.built.setdefault(alias, set()).add(target)
        return None

    async def targets(self, alias: str) -> set[str]:
        return set(self.built.get(alias, ()))

    async def add_target(self, alias: str, target: str) -> None:
        self.built.setdefault(alias, set()).add(target)

    async def forget_target(self, alias: str, target: str) -> None:
        self.built.get(alias, set()).discard(target)

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        self.announced[(alias, target)] = time.monotonic() + ttl

    async def served(self, alias: str) -> set[str]:
        now = time.monotonic()
        return {t for (a, t), until in self.announced.items() if a == alias and until > now}

    async def close(self) -> None:
        pass


def open_aliases(memory: MemoryConfig) -> AliasStore:
    """Where the aliases of `memory`'s view live: its own store (memory and file: a new in-process table)."""
    if memory.store == "redis":
        url = memory.redis_url or getattr(memory.view, "redis_url", None)
        if not url:
            raise ConfigError("memory.redis_url", "store: redis needs redis_url (or HELIX_REDIS_URL)")
        return RedisAliases(url)
    if memory.store == "postgres":
        dsn = memory.postgres_dsn or getattr(memory.view, "dsn", None)
        if not dsn:
            raise ConfigError("memory.dsn", "store: postgres needs dsn (or HELIX_POSTGRES_DSN)")
        return PostgresAliases(dsn)
    return MemoryAliases()


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
    def tables(self) -> tuple[str, str]:  # type: ignore[override]
        return self.view.tables

    @property
    def ttl(self) -> float | None:
        return getattr(self.view, "ttl", None)

    def fold(self, state: State, event: Any) -> State:
        return self.view.fold(state, event)

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
    from helix_es.client.backend import open_projection
    from helix_es.views.long_term import LongTerm

    check_target(target, "target")
    view = memory.view
    if isinstance(view, View):
        if store is None:
            raise ValueError(f"{view.name}: a session view's target projection needs the store it writes through")
        projection = open_projection(memory, target_store(store, view, target))
    else:
        if isinstance(view, LongTerm) and view.store == "postgres":
            # Long-term rows carry no view column: another target is another table.
            memory = replace(memory, view=replace(view, table=target_table(view.table, view.name, target)))
        projection = open_projection(memory)
    projection.name = target  # names checkpoints, keys, rows and the consumer group
    return projection


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
        self.kind = memory.store if memory.store != "file" else "memory"
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


class TargetFollower:
    """Runs the Kafka projector of the target readers use, and moves with the alias.

    For the projector service (`helix-es project`): one per view, in place of a `Projector`. It
    projects the target the alias names and announces so (`AliasStore.announce`, renewed every
    `interval`); when a rebuild switches the alias it stops that projector (leaving its consumer
    group cleanly) and starts one on the new target, which seeks to the checkpoints the rebuild
    wrote, within about `interval` seconds. The rebuild keeps folding the new target until a
    service announces it, so readers never wait on a target nobody writes. `projection` and
    `progress` are those of the projector running now (progress adds up across targets).
    """

    def __init__(
        self,
        memory: MemoryConfig,
        store: ViewStore | None,
        *,
        bootstrap_servers: str,
        topic_prefix: str = names.DEFAULT_TOPIC_PREFIX,
        interval: float = REFRESH_SECONDS,
        **projector_options: Any,
    ) -> None:
        from projectors.runner import Progress

        self.memory = memory
        self.store = store
        self.bootstrap_servers = bootstrap_servers
        self.topic_prefix = topic_prefix
        self.interval = interval
        self.options = projector_options
        self.aliases = open_aliases(memory)
        self.alias = alias_id(memory.view.name, topic_prefix)
        self.target = memory.view.name
        self.projection: Projection = target_projection(memory, self.target, store)  # until run() resolves
        self.progress: Progress = Progress()
        self.projector: Projector | None = None

    async def _announce(self, target: str, ttl: float) -> None:
        try:
            await self.aliases.announce(self.alias, target, ttl)
        except Exception as exc:  # a store hiccup must not stop the projector
            log.warning("%s: could not announce target %s (%s)", self.alias, target, exc)

    async def run(self, stop: asyncio.Event) -> Progress:
        from projectors.runner import Projector

        try:
            self.target = await resolve_alias(self.aliases, self.alias, self.memory.view.name)
            while not stop.is_set():
                if self.projection.name != self.target:
                    retired, self.projection = self.projection, target_projection(self.memory, self.target, self.store)
                    await retired.close()
                projector = Projector(self.projection, bootstrap_servers=self.bootstrap_servers,
                                      topic_prefix=self.topic_prefix, **self.options)
                projector.progress = self.progress  # one running total across targets
                self.projector = projector
                moved = asyncio.Event()
                task = asyncio.create_task(projector.run(moved))
                serving = self.target
                try:
                    await self._watch(task, stop, moved)
                    moved.set()  # stopped or moved: the projector leaves its group cleanly
                    await task  # raises what the projector raised
                finally:
                    moved.set()
                    await asyncio.gather(task, return_exceptions=True)
                    await self._announce(serving, 0)  # withdrawn: this process projects it no more
        finally:
            await self.aliases.close()
        return self.progress

    async def _watch(self, task: asyncio.Task[Progress], stop: asyncio.Event, moved: asyncio.Event) -> None:
        """Announce the target while `task` projects it; return when stopped, failed, or the alias moved."""
        while not task.done():
            await self._announce(self.target, 3 * self.interval)
            waiter = asyncio.create_task(stop.wait())
            await asyncio.wait({task, waiter}, timeout=self.interval, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            if stop.is_set() or task.done():
                return
            try:
                target = await resolve_alias(self.aliases, self.alias, self.memory.view.name)
            except Exception as exc:
                log.warning("%s: could not read its alias (%s); projecting %s", self.alias, exc, self.target)
                continue
            if target != self.target:
                log.info("%s: the alias moved from %s to %s; projecting %s from now on",
                         self.memory.view.name, self.target, target, target)
                self.target = target
                moved.set()
                return
