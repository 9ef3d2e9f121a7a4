"""PostgreSQL store: a session's view is rows of `helix_view_messages`, ordered by `seq`.

Beside them `helix_view_sessions` holds the session guard and `helix_checkpoints` the
partition checkpoints. `apply` runs in one transaction whose first statement moves every
guard with a compare-and-set (`applied = expected`), so a guard that moved since `load`
rolls the whole batch back as `StaleWrite`; the row locks it takes keep other projectors
off those sessions until commit.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Sequence
from dataclasses import dataclass

import asyncpg

from helix_es.model.message import decode_json
from helix_es.stores.list_edit import list_edit
from helix_es.stores.ports import EMPTY, Change, SessionKey, Snapshot, StaleWrite
from helix_es.stores.postgres.pool import (
    CHECKPOINTS,
    Pg,
    delete_checkpoints,
    delete_rows,
    drop_checkpoints,
    transaction,
)
from helix_es.views.base import State, View

_SCHEMA = (
    CHECKPOINTS
    + """
CREATE TABLE IF NOT EXISTS helix_view_messages (
    view text NOT NULL,
    namespace text NOT NULL,
    session_id text NOT NULL,
    seq bigint NOT NULL,
    message jsonb NOT NULL,
    PRIMARY KEY (view, namespace, session_id, seq)
);
CREATE TABLE IF NOT EXISTS helix_view_sessions (
    view text NOT NULL,
    namespace text NOT NULL,
    session_id text NOT NULL,
    applied bigint NOT NULL,
    PRIMARY KEY (view, namespace, session_id)
);
"""
)

# One statement, hence one snapshot: each session's guard and messages are read together.
_LOAD = """
SELECT k.i, s.applied, m.messages
FROM unnest($2::text[], $3::text[]) WITH ORDINALITY AS k(namespace, session_id, i)
LEFT JOIN helix_view_sessions s
    ON s.view = $1 AND s.namespace = k.namespace AND s.session_id = k.session_id
CROSS JOIN LATERAL (
    SELECT array_agg(v.message::text ORDER BY v.seq) AS messages
    FROM helix_view_messages v
    WHERE v.view = $1 AND v.namespace = k.namespace AND v.session_id = k.session_id
) m
"""

# First statement of `apply`. Guards move only from the value the caller loaded: UPDATE
# re-checks `applied = expected` on the newest row version after waiting for a concurrent
# writer, and a guard row another writer created makes the INSERT do nothing. Sessions
# missing from the result are stale. It also drops the `n_drop` rows after the first `keep`
# (NULL: all); that may run before the guards are checked, but a stale batch rolls back. It
# returns each session's highest `seq` the edit keeps (-1: none), from where appended rows number
# on. Every part of one statement reads the rows as they were before it.
_CLAIM = """
WITH k AS (
    SELECT * FROM unnest($2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bigint[])
        AS k(namespace, session_id, expected, applied, keep, n_drop)
), moved AS (
    UPDATE helix_view_sessions s SET applied = k.applied
    FROM k
    WHERE s.view = $1 AND s.namespace = k.namespace AND s.session_id = k.session_id AND s.applied = k.expected
    RETURNING s.namespace, s.session_id
), created AS (
    INSERT INTO helix_view_sessions (view, namespace, session_id, applied)
    SELECT $1, k.namespace, k.session_id, k.applied FROM k WHERE k.expected IS NULL
    ON CONFLICT DO NOTHING
    RETURNING namespace, session_id
), dropped AS (
    DELETE FROM helix_view_messages v
    USING (
        SELECT k.namespace, k.session_id, d.seq
        FROM k
        CROSS JOIN LATERAL (
            SELECT seq FROM helix_view_messages
            WHERE view = $1 AND namespace = k.namespace AND session_id = k.session_id
            ORDER BY seq OFFSET k.keep LIMIT k.n_drop
        ) d
        WHERE k.n_drop IS DISTINCT FROM 0
    ) gone
    WHERE v.view = $1 AND v.namespace = gone.namespace AND v.session_id = gone.session_id AND v.seq = gone.seq
), checkpoint AS (
    INSERT INTO helix_checkpoints (view, topic, partition, "offset") VALUES ($1, $8, $9, $10)
    ON CONFLICT (view, topic, partition) DO UPDATE SET "offset" = excluded."offset"
)
SELECT r.namespace, r.session_id, CASE
    WHEN k.n_drop IS NOT NULL AND EXISTS (
        SELECT 1 FROM helix_view_messages v
        WHERE v.view = $1 AND v.namespace = k.namespace AND v.session_id = k.session_id
        ORDER BY v.seq OFFSET k.keep + k.n_drop LIMIT 1
    ) THEN (
        SELECT max(v.seq) FROM helix_view_messages v
        WHERE v.view = $1 AND v.namespace = k.namespace AND v.session_id = k.session_id
    )
    WHEN k.keep = 0 THEN -1
    ELSE coalesce((
        SELECT v.seq FROM helix_view_messages v
        WHERE v.view = $1 AND v.namespace = k.namespace AND v.session_id = k.session_id
        ORDER BY v.seq OFFSET k.keep - 1 LIMIT 1
    ), -1)
END AS top
FROM (SELECT namespace, session_id FROM moved UNION ALL SELECT namespace, session_id FROM created) r
JOIN k USING (namespace, session_id)
"""

# Second statement, for a few rows; many go by COPY, several times faster (`COPY_ROWS`).
_APPEND = """
INSERT INTO helix_view_messages (view, namespace, session_id, seq, message)
SELECT $1, a.namespace, a.session_id, a.seq, a.message::jsonb
FROM unnest($2::text[], $3::text[], $4::bigint[], $5::text[]) AS a(namespace, session_id, seq, message)
"""
_COLUMNS = ("view", "namespace", "session_id", "seq", "message")
COPY_ROWS = 200  # from this many rows on, COPY beats one INSERT despite its extra round trip


# Each family of views (`View.family`) in its own pair of tables: messages, session guards.
TABLES: dict[str, tuple[str, str]] = {
    "view": ("helix_view_messages", "helix_view_sessions"),
    "summary": ("helix_summary", "helix_summary_sessions"),
}


@dataclass(frozen=True)
class _Sql:
    """The statements above for one family's pair of tables (`TABLES`)."""

    schema: str
    load: str
    claim: str
    append: str
    sessions: str
    messages: str  # the table COPY writes to


@functools.cache
def _sql(messages: str, sessions: str) -> _Sql:
    def named(sql: str) -> str:
        return sql.replace("helix_view_messages", messages).replace("helix_view_sessions", sessions)

    return _Sql(named(_SCHEMA), named(_LOAD), named(_CLAIM), named(_APPEND), named(_SESSIONS), messages)


_SESSIONS = """
SELECT session_id FROM helix_view_sessions WHERE view = $1 AND namespace = $2 ORDER BY session_id
"""

_CHECKPOINT = """
SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3
"""


def _snapshot(applied: int | None, messages: list[str] | None) -> Snapshot:
    if applied is None and not messages:
        return EMPTY
    return Snapshot(tuple(map(decode_json, messages or ())), applied)


class PostgresStore:
    kind = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pg = Pg(dsn)

    async def ensure_schema(self, tables: tuple[str, str] = TABLES["view"]) -> None:
        """Connect if needed and create the tables if absent; runs on first use, safe to repeat."""
        await self.pg.pool(_sql(*tables).schema)

    async def _pool_ready(self, view: View) -> tuple[asyncpg.Pool, _Sql]:
        sql = _sql(*TABLES[view.family])
        return await self.pg.pool(sql.schema), sql

    async def load(self, view: View, keys: Sequence[SessionKey]) -> dict[SessionKey, Snapshot]:
        if not keys:
            return {}
        pool, sql = await self._pool_ready(view)
        rows = await pool.fetch(sql.load, view.name, [k.namespace for k in keys], [k.session_id for k in keys])
        return {keys[r["i"] - 1]: _snapshot(r["applied"], r["messages"]) for r in rows}

    async def apply(self, view: View, topic: str, partition: int, changes: Sequence[Change], checkpoint: int) -> None:
        if len({c.key for c in changes}) != len(changes):
            # Two changes of one session cannot both hold its guard's compare-and-set.
            raise ValueError(f"{view.name}: a batch may change each session only once")
        namespaces: list[str] = []
        session_ids: list[str] = []
        expected: list[int | None] = []
        applied: list[int] = []
        keeps: list[int] = []
        drops: list[int | None] = []
        appends: list[tuple[SessionKey, State]] = []
        for c in changes:
            edit = list_edit(c.before.state, c.after)
            namespaces.append(c.key.namespace)
            session_ids.append(c.key.session_id)
            expected.append(c.before.applied)
            applied.append(c.applied)
            keeps.append(edit.keep)
            drops.append(None if edit.drop < 0 else edit.drop)  # LIMIT NULL: every row
            if edit.append:
                appends.append((c.key, edit.append))
        claim = (view.name, namespaces, session_ids, expected, applied, keeps, drops, topic, partition, checkpoint)
        pool, sql = await self._pool_ready(view)
        if not changes:
            await pool.execute(sql.claim, *claim)  # only the checkpoint: one statement is atomic
            return
        try:
            async with pool.acquire() as conn, conn.transaction():
                claimed = await conn.fetch(sql.claim, *claim)
                if len(claimed) != len(changes):
                    won = {SessionKey(r["namespace"], r["session_id"]) for r in claimed}
                    lost = next(c for c in changes if c.key not in won)
                    raise StaleWrite(f"{view.name} {lost.key}: guard moved since load (expected {lost.before.applied})")
                if appends:
                    top = {(r["namespace"], r["session_id"]): r["top"] for r in claimed}
                    rows = [
                        (view.name, key.namespace, key.session_id, seq, message.to_json())
                        for key, added in appends
                        for seq, message in enumerate(added, top[key.namespace, key.session_id] + 1)
                    ]
                    if len(rows) >= COPY_ROWS:
                        await conn.copy_records_to_table(sql.messages, records=rows, columns=_COLUMNS)
                    else:
                        await conn.execute(sql.append, view.name, *([r[i] for r in rows] for i in range(1, 5)))
        except asyncpg.DeadlockDetectedError as exc:
            # Two projectors locked overlapping sessions in different orders; both must reload anyway.
            raise StaleWrite(f"{view.name}: concurrent write to the same sessions ({exc})") from exc

    async def checkpoint(self, view: View, topic: str, partition: int) -> int | None:
        pool, _ = await self._pool_ready(view)
        offset: int | None = await pool.fetchval(_CHECKPOINT, view.name, topic, partition)
        return offset

    async def read(self, view: View, key: SessionKey, *, guard: bool = True) -> Snapshot:
        return (await self.load(view, [key]))[key]

    async def drop(self, view: View, namespaces: Collection[str], topics: Collection[str]) -> None:
        async with transaction(self.dsn) as conn:
            for table in TABLES[view.family]:
                await delete_rows(conn, table, "view = $1 AND namespace = ANY($2::text[])", view.name, list(namespaces))
            await drop_checkpoints(conn, view.name, topics)

    async def sessions(self, view: View, namespace: str) -> list[str]:
        pool, sql = await self._pool_ready(view)
        rows = await pool.fetch(sql.sessions, view.name, namespace)
        return [r["session_id"] for r in rows]

    async def forget_checkpoints(self, view: View, partitions: Collection[tuple[str, int]]) -> None:
        pool, _ = await self._pool_ready(view)
        await delete_checkpoints(pool, view.name, partitions)

    async def close(self) -> None:
        await self.pg.close()
