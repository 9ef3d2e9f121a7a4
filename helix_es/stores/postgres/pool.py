"""What every projection kept in PostgreSQL shares: one lazy pool, and schemas made once, safely."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Collection
from contextlib import asynccontextmanager
from typing import Any

import asyncpg

SCHEMA_LOCK = 0x68656C6978  # pg_advisory_xact_lock key ("helix"): one schema creator at a time
INDEX_LOCK = 0x68656C69  # first half of build_index's session lock keys ("heli"); the second: a hash of its key
CHECKPOINTS = """
CREATE TABLE IF NOT EXISTS helix_checkpoints (
    view text NOT NULL,
    topic text NOT NULL,
    partition int NOT NULL,
    "offset" bigint NOT NULL,
    PRIMARY KEY (view, topic, partition)
);
"""


def index_if_missing(index: str, create: str) -> str:
    """DDL that runs `create` (a CREATE INDEX) only when `index` is missing. CREATE INDEX IF NOT EXISTS
    takes its table's SHARE lock before it looks: every store opened would wait for the writes in
    flight on the table, and hold up the next ones behind it."""
    return f"DO $$ BEGIN IF to_regclass('{index}') IS NULL THEN {create}; END IF; END $$;\n"


def column_if_missing(table: str, column: str, add: str) -> str:
    """DDL that runs `add` (an ALTER TABLE) only when `table` lacks `column`: ALTER TABLE takes an
    ACCESS EXCLUSIVE lock even when it changes nothing."""
    return f"""DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_name = '{table}' AND column_name = '{column}')
    THEN {add}; END IF;
END $$;
"""


# Move a checkpoint forward only (past dead letters): never back over applied events.
ADVANCE = """
INSERT INTO helix_checkpoints (view, topic, partition, "offset") VALUES ($1, $2, $3, $4)
ON CONFLICT (view, topic, partition) DO UPDATE SET "offset" = greatest(helix_checkpoints."offset", excluded."offset")
"""

_FORGET = """
DELETE FROM helix_checkpoints WHERE view = $1 AND (topic, partition) IN (SELECT * FROM unnest($2::text[], $3::int[]))
"""

Check = Callable[[asyncpg.Connection], Awaitable[None]]


@asynccontextmanager
async def transaction(dsn: str) -> AsyncIterator[asyncpg.Connection]:
    """A connection of its own, in one transaction, that makes no schema: for deletes of what exists."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            yield conn
    finally:
        await conn.close()


async def delete_rows(conn: asyncpg.Connection, table: str, where: str, *args: Any) -> None:
    """`DELETE FROM "table" WHERE where`, if the table exists (a target never written may have none)."""
    if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", f'"{table}"'):
        await conn.execute(f'DELETE FROM "{table}" WHERE {where}', *args)


async def drop_checkpoints(conn: asyncpg.Connection, view: str, topics: Collection[str]) -> None:
    """Delete `view`'s checkpoints of every partition of `topics` (other deployments' topics stay)."""
    await delete_rows(conn, "helix_checkpoints", "view = $1 AND topic = ANY($2::text[])", view, list(topics))


async def delete_checkpoints(
    conn: asyncpg.Connection | asyncpg.Pool, view: str, partitions: Collection[tuple[str, int]]
) -> None:
    """Delete these (topic, partition) checkpoints of `view`."""
    if partitions:
        await conn.execute(_FORGET, view, [t for t, _ in partitions], [p for _, p in partitions])


async def build_index(conn: asyncpg.Connection, key: str, valid: str, invalid: str, create: str) -> bool:
    """Build an index with `create` (CREATE INDEX CONCURRENTLY) unless `valid` (SQL: a boolean) finds it.

    Not under SCHEMA_LOCK, and concurrently: over a big existing table the build takes minutes,
    during which writers and other schema creators go on. One process builds it (a session
    advisory lock on `key`, tried, not waited for); the others go on without it and get False.
    `invalid` (SQL: the names of indexes a failed concurrent build left) are dropped first.
    `conn` must not be in a transaction.
    """
    if await conn.fetchval(valid):
        return True
    if not await conn.fetchval("SELECT pg_try_advisory_lock($1, hashtext($2))", INDEX_LOCK, key):
        return False
    try:
        if not await conn.fetchval(valid):
            for name in await conn.fetchval(invalid):
                await conn.execute(f"DROP INDEX CONCURRENTLY IF EXISTS {name}")
            await conn.execute(create)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1, hashtext($2))", INDEX_LOCK, key)
    return True


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset hook: no session state is ever changed, so skip asyncpg's reset round trip."""


class Pg:
    """A pool opened on first use; `pool(schema)` runs each schema's DDL once per process."""

    def __init__(self, dsn: str, settings: dict[str, str] | None = None, init: Check | None = None) -> None:
        self.dsn = dsn
        self.settings = settings or {}  # session settings of every pooled connection (GUCs)
        self.init = init  # run on every new connection (type codecs)
        self._pool: asyncpg.Pool | None = None
        self._made: set[str] = set()
        self._lock = asyncio.Lock()

    async def pool(self, schema: str, check: Check | None = None) -> asyncpg.Pool:
        if schema not in self._made or self._pool is None:
            async with self._lock:
                if self._pool is None:
                    # No floor of idle connections: after a restart of the server asyncpg would try to
                    # restore it in the background, logging a traceback per attempt while it is down;
                    # the projector's own retries say what is going on.
                    self._pool = await asyncpg.create_pool(
                        self.dsn,
                        min_size=0,
                        max_size=4,
                        reset=_keep_session,
                        server_settings=self.settings,
                        init=self.init,
                    )
                if schema not in self._made:
                    async with self._pool.acquire() as conn:
                        async with conn.transaction():
                            # CREATE TABLE IF NOT EXISTS still races on the catalog when run concurrently.
                            await conn.execute("SELECT pg_advisory_xact_lock($1)", SCHEMA_LOCK)
                            await conn.execute(schema)
                        if check is not None:
                            await check(conn)
                    self._made.add(schema)
        return self._pool

    async def close(self) -> None:
        async with self._lock:
            pool, self._pool = self._pool, None
            self._made.clear()
        if pool is not None:
            await pool.close()


_TRANSIENT: tuple[type[BaseException], ...] = (
    asyncpg.PostgresConnectionError,  # class 08, includes a connection lost mid-statement
    asyncpg.exceptions.OperatorInterventionError,  # class 57: shutting down, starting up, cancelled
    asyncpg.exceptions.InsufficientResourcesError,  # class 53: too many connections, disk full
)


def transient(exc: BaseException) -> bool:
    """A PostgreSQL failure that waiting cures: the server down, restarting or out of connections."""
    return isinstance(exc, _TRANSIENT) or (
        isinstance(exc, asyncpg.InterfaceError) and "connection is closed" in str(exc)
    )
