r"""PostgreSQL long-term memory: the seed's SQLDBLongTermMemory, folded from the log.

Schema (`ensure_table`, `CREATE ... IF NOT EXISTS` under the advisory lock every helix-es
schema creator takes):

- `<table>` (default `agent_memory`): one row per message, primary key
  `(namespace, topic, partition, "offset")`, so a re-delivery never duplicates; columns
  `session_id` (who wrote it, for audit), `created_at` (the event time), `role`, `content`
  (what `search` matches) and `message` (jsonb, the whole Message). A `UNIQUE (namespace,
  created_at, topic, partition, "offset")` constraint is the read-order index; CREATE TABLE
  names it itself, so no derived name can overflow PostgreSQL's 63-byte identifiers. `topic` is
  `COLLATE "C"` so the order is bytewise, as in the other stores.
- `helix_long_term_cleared (view, namespace, cleared_at)`: each namespace's clear watermark.
- `helix_checkpoints (view, topic, partition, "offset")`: shared with the session views.

The table name is validated when the config is read (`helix_es.views.long_term.check_table`),
checked again here, and always double-quoted.

`apply` is one transaction of two statements. The first upserts the watermark row of each
namespace in the batch (raised to the batch's newest clear): its row lock serialises the
batches of one namespace across partitions and projector processes, so a clear and an older
message arriving concurrently from another partition cannot miss each other. The second (READ
COMMITTED, so it sees what the lock waited for) reads the checkpoint, drops the records it
covers, deletes rows at or before the watermark, inserts newer messages (`ON CONFLICT DO
NOTHING`) and moves the checkpoint (never backwards).

`get` and `search` are one statement each: the checkpoint and, only if it covers `want`, the
rows. `search` is `content ILIKE '%q%' ESCAPE '\'` with `\`, `%` and `_` in q escaped; case
folding follows the database's collation. A `pg_trgm` GIN index on `content` (made right after
the schema, CONCURRENTLY and outside the schema lock, by one process: on an older, big table the
build takes a while, and writers and other projectors go on meanwhile) lets the planner fetch
only the rows holding the query's trigrams; for a common word it may still scan the namespace in
order and stop at `limit`. Trigrams in a large share of the rows are left out of the lookup
(`helix_es.stores.postgres.trigrams`): the index finds the rows with the query's rare pieces,
and the whole pattern is rechecked on them. Either way the result is the same.

A rebuild's target is a bulk load (`start_load`, `defer_indexes`, `build_indexes`): its rows go in
without the index, which is built over them once at the end, before readers can be switched to it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import asyncpg

from helix_es.model.errors import HelixError
from helix_es.model.events import Position, Record
from helix_es.model.message import Message, decode_json
from helix_es.stores.ports import Applied, SessionKey
from helix_es.stores.postgres.pool import (
    ADVANCE,
    CHECKPOINTS,
    Pg,
    build_index,
    delete_rows,
    drop_checkpoints,
    transaction,
)
from helix_es.stores.postgres.trigrams import FrequentTrigrams, probe
from helix_es.views.long_term import DEFAULT_TABLE, VIEW_NAME, Op, check_table, escape_like, ops

# The key helix_es.stores.postgres.views locks too: both create helix_checkpoints, and concurrent
# CREATE TABLE IF NOT EXISTS still races on the catalog.

log = logging.getLogger(__name__)

_SCHEMA = (
    CHECKPOINTS
    + """
CREATE TABLE IF NOT EXISTS {t} (
    namespace text NOT NULL,
    topic text COLLATE "C" NOT NULL,
    partition int NOT NULL,
    "offset" bigint NOT NULL,
    session_id text NOT NULL,
    created_at timestamptz NOT NULL,
    role text NOT NULL,
    content text NOT NULL,
    message jsonb NOT NULL,
    PRIMARY KEY (namespace, topic, partition, "offset"),
    UNIQUE (namespace, created_at, topic, partition, "offset")
);
-- For the substring search's index (see _trgm): pg_trgm is contrib and trusted, so the
-- database's owner may make it; without it the search scans, with the same results.
DO $trgm$ BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
EXCEPTION WHEN others THEN
    RAISE WARNING 'helix-es: no pg_trgm (%); long-term search of {t} scans its rows', SQLERRM;
END $trgm$;
CREATE TABLE IF NOT EXISTS helix_long_term_cleared (
    view text NOT NULL,
    namespace text NOT NULL,
    cleared_at timestamptz NOT NULL,
    PRIMARY KEY (view, namespace)
);
"""
)

# The trigram index on content, valid or left invalid by a failed concurrent build. Unnamed
# (PostgreSQL picks a free name: no derived name overflows 63 bytes), so found by definition.
_TRGM = """
SELECT {what} FROM pg_index i JOIN pg_opclass o ON o.oid = i.indclass[0]
WHERE i.indrelid = '{t}'::regclass AND o.opcname = 'gin_trgm_ops' AND i.indnatts = 1 AND {valid}
  AND i.indkey[0] = (SELECT attnum FROM pg_attribute WHERE attrelid = '{t}'::regclass AND attname = 'content')
"""
# fastupdate off: no pending list, which every search would scan and the planner would price as
# a full scan until a vacuum; each insert updates the index instead.
_TRGM_CREATE = "CREATE INDEX CONCURRENTLY ON {t} USING gin (content gin_trgm_ops) WITH (fastupdate = off)"
# A bulk load's own table: no other writer to wait for, and a plain build takes 0.65x the CPU of a
# concurrent one (measured: 9.3 against 14.3 us a row), which makes its two passes over the table.
_TRGM_BUILD = _TRGM_CREATE.replace(" CONCURRENTLY", "")

_COLUMNS = ("namespace", "topic", "partition", "offset", "session_id", "created_at", "role", "content", "message")

_MISSING_COLUMNS = """
SELECT array(
    SELECT c FROM unnest($2::text[]) AS c
    WHERE NOT EXISTS (
        SELECT 1 FROM pg_attribute
        WHERE attrelid = to_regclass($1) AND attname = c AND attnum > 0 AND NOT attisdropped
    )
)
"""

# First statement of `apply`: the namespaces' watermark rows, locked until commit (in name order).
_LOCK = """
INSERT INTO helix_long_term_cleared AS c (view, namespace, cleared_at)
SELECT $1, n.namespace, coalesce(n.cleared_at, '-infinity')
FROM unnest($2::text[], $3::timestamptz[]) AS n(namespace, cleared_at)
ORDER BY n.namespace
ON CONFLICT (view, namespace) DO UPDATE SET cleared_at = greatest(c.cleared_at, excluded.cleared_at)
RETURNING namespace, nullif(cleared_at, '-infinity') AS cleared_at
"""

# Second statement: everything else, in one snapshot taken after the locks were granted.
_APPLY = """
WITH cp AS (
    SELECT coalesce(max("offset"), -1) AS o FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3
), ev AS (
    SELECT e.* FROM unnest($4::bigint[], $5::text[], $6::text[], $7::timestamptz[], $8::text[], $9::text[], $10::text[])
        AS e("offset", namespace, session_id, created_at, role, content, message)
    WHERE e."offset" > (SELECT o FROM cp)
), mark AS (
    SELECT namespace, cleared_at FROM helix_long_term_cleared WHERE view = $1 AND namespace = ANY($11::text[])
), gone AS (
    DELETE FROM {t} m USING mark WHERE m.namespace = mark.namespace AND m.created_at <= mark.cleared_at
), added AS (
    INSERT INTO {t} (namespace, topic, partition, "offset", session_id, created_at, role, content, message)
    SELECT ev.namespace, $2, $3, ev."offset", ev.session_id, ev.created_at, ev.role, ev.content, ev.message::jsonb
    FROM ev JOIN mark ON mark.namespace = ev.namespace
    WHERE ev.message IS NOT NULL AND ev.created_at > mark.cleared_at
    ON CONFLICT DO NOTHING
), moved AS (
    INSERT INTO helix_checkpoints (view, topic, partition, "offset") VALUES ($1, $2, $3, $12)
    ON CONFLICT (view, topic, partition)
        DO UPDATE SET "offset" = greatest(helix_checkpoints."offset", excluded."offset")
)
SELECT count(*) FROM ev
"""

# A big batch: `_APPLY` without the rows, which then go by COPY (several times faster than INSERT), filtered
# here by the checkpoint this returns and the watermarks `_LOCK` returned; both stay fixed under the locks.
_PREPARE = """
WITH cp AS (
    SELECT coalesce(max("offset"), -1) AS o FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3
), mark AS (
    SELECT namespace, cleared_at FROM helix_long_term_cleared WHERE view = $1 AND namespace = ANY($4::text[])
), gone AS (
    DELETE FROM {t} m USING mark WHERE m.namespace = mark.namespace AND m.created_at <= mark.cleared_at
), moved AS (
    INSERT INTO helix_checkpoints (view, topic, partition, "offset") VALUES ($1, $2, $3, $5)
    ON CONFLICT (view, topic, partition)
        DO UPDATE SET "offset" = greatest(helix_checkpoints."offset", excluded."offset")
)
SELECT o FROM cp
"""
COPY_ROWS = 200  # from this many records on, a batch's rows go by COPY

# When COPY meets rows already there (their checkpoint was lost), the batch's rows go this way.
_INSERT = """
INSERT INTO {t} (namespace, topic, partition, "offset", session_id, created_at, role, content, message)
SELECT r.namespace, r.topic, r.partition, r."offset", r.session_id, r.created_at, r.role, r.content, r.message::jsonb
FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::text[], $6::timestamptz[], $7::text[], $8::text[],
            $9::text[]) AS r(namespace, topic, partition, "offset", session_id, created_at, role, content, message)
ON CONFLICT DO NOTHING
"""

_CHECKPOINT = 'SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3'

# After _APPLY, in its transaction (so it sees the batch's own inserts): an erasure op deletes its
# session's rows except those after it on its partition (the `erases` rule). Repeating it deletes nothing.
_ERASE = """
DELETE FROM {t} WHERE namespace = $1 AND session_id = $2 AND NOT (topic = $3 AND partition = $4 AND "offset" > $5)
"""

# A retraction op, after the rows before it were written: its session's newest row on its partition
# before it goes (the `retracted_row` rule). Run only when the checkpoint was below it.
_RETRACT = """
DELETE FROM {t} WHERE ctid = (
    SELECT ctid FROM {t} WHERE namespace = $1 AND topic = $3 AND partition = $4 AND "offset" < $5 AND session_id = $2
    ORDER BY "offset" DESC LIMIT 1
)
"""

# $2 NULL: no `want`, just read. The rows' sub-select runs only when the CASE needs it.
_READ = """
WITH cp AS MATERIALIZED (SELECT ({checkpoint}) AS o)
SELECT cp.o AS applied,
    CASE WHEN $2::text IS NULL OR cp.o >= $4 THEN array(
        SELECT message::text FROM {t} WHERE namespace = $5 {where}
        ORDER BY created_at, topic, partition, "offset" {limit}
    ) END AS messages
FROM cp
"""


def _after(at: datetime, cleared_at: datetime | None) -> bool:
    return cleared_at is None or at > cleared_at


def _columns(batch: Sequence[Op]) -> tuple[list[Any], ...]:
    """`_APPLY`'s arrays: offset, namespace, session_id, created_at, role, content, message (None: not a message)."""
    return (
        [op.offset for op in batch],
        [op.namespace for op in batch],
        [op.session_id for op in batch],
        [op.at for op in batch],
        [None if op.message is None else op.message.role for op in batch],
        [None if op.message is None else op.message.content for op in batch],
        [None if op.message is None else op.message.to_json() for op in batch],
    )


class SchemaMismatch(HelixError):
    """The long-term table exists with columns helix-es did not create; it is not altered."""


class PostgresLongTerm:
    kind = "postgres"

    def __init__(self, dsn: str, *, table: str = DEFAULT_TABLE, name: str | None = None) -> None:
        self.dsn = dsn
        self.table = check_table(table)  # again: a direct caller skipped the config
        self.name = name or (VIEW_NAME if self.table == DEFAULT_TABLE else f"{VIEW_NAME}-{self.table}")
        t = f'"{self.table}"'
        self._schema = _SCHEMA.format(t=t)
        self._apply = _APPLY.format(t=t)
        self._prepare = _PREPARE.format(t=t)
        self._insert = _INSERT.format(t=t)
        self._erase = _ERASE.format(t=t)
        self._retract = _RETRACT.format(t=t)
        self._get = _READ.format(t=t, checkpoint=_CHECKPOINT, where="", limit="")
        self._search = _READ.format(
            t=t, checkpoint=_CHECKPOINT, where=r"AND content ILIKE $6 ESCAPE E'\\'", limit="LIMIT $7"
        )
        # The index looks up $6, the query's rare words (trigrams.probe); `content || ''` keeps the
        # whole query out of the index condition, so it is rechecked on the rows found only.
        self._search_words = _READ.format(
            t=t,
            checkpoint=_CHECKPOINT,
            where=r"AND content ILIKE $6 AND (content || '') ILIKE $8 ESCAPE E'\\'",
            limit="LIMIT $7",
        )
        self._frequent = FrequentTrigrams(t)
        self.pg = Pg(dsn)
        self._deferred = False
        self._owned = False  # start_load found the table empty: the load's own until it is switched to

    async def ensure_table(self) -> None:
        """Connect if needed, create the schema if absent and check an existing table fits; safe to repeat."""
        await self._pool_ready()

    async def _fits(self, conn: asyncpg.Connection) -> None:
        missing = await conn.fetchval(_MISSING_COLUMNS, f'"{self.table}"', list(_COLUMNS))
        if missing:
            raise SchemaMismatch(
                f"table {self.table} exists without the columns {', '.join(missing)} that a helix-es "
                "long-term memory needs; it is left as it is. Set memory.table to another name."
            )

    def defer_indexes(self) -> None:
        """A bulk load (a rebuild's target, before readers use it): no trigram index until `build_indexes`.
        Called before first use. A GIN index kept up row by row costs more than the COPY it slows; one
        built over the rows at the end, far less."""
        self._deferred = True

    async def start_load(self) -> None:
        """A bulk load begins (a rebuild's lead, before any process folds into the target): if the table
        holds no rows, a trigram index left on it (an earlier target of the same name, whose rows were
        dropped) goes, so that the load does not keep it up row by row (10x the CPU of the COPY,
        measured), and `build_indexes` makes it again with a plain build. Defers the index too.
        A table with rows (a rerun after a crash, another deployment's) keeps its index."""
        self.defer_indexes()
        t = f'"{self.table}"'
        pool = await self._pool_ready()
        try:
            async with pool.acquire() as conn, conn.transaction():
                # Writers wait while it looks, so no row arrives between the look and the drop.
                await conn.execute(f"LOCK TABLE {t} IN SHARE ROW EXCLUSIVE MODE")
                if await conn.fetchval(f"SELECT EXISTS (SELECT 1 FROM {t})"):
                    return
                left = await conn.fetchval(
                    _TRGM.format(what="array(SELECT i.indexrelid::regclass::text", t=t, valid="true") + ")"
                )
                for name in left:
                    await conn.execute(f"DROP INDEX {name}")
        except asyncpg.InsufficientPrivilegeError as e:  # not the table's owner: the load keeps it up, slower
            log.warning("long-term %s: its trigram index stays during the load (%s)", self.table, e)
            return
        self._owned = True

    async def build_indexes(self) -> None:
        """The trigram index a bulk load deferred, built over the rows now there (if another process is
        building it, once it has), and the table's statistics."""
        pool = await self._pool_ready()
        async with pool.acquire() as conn:
            while not await self._trgm(conn):
                await asyncio.sleep(0.2)
            # Statistics of the rows loaded, before readers come: else the planner guesses the table's size.
            await conn.execute(f'ANALYZE "{self.table}"')

    async def _ready(self, conn: asyncpg.Connection) -> None:
        await self._fits(conn)
        if not self._deferred:
            await self._trgm(conn)

    async def _trgm(self, conn: asyncpg.Connection) -> bool:
        """The pg_trgm GIN index on content, if pg_trgm is there: only a speed-up, as ILIKE is
        rechecked on every row it finds (and queries under 3 characters, which it cannot narrow, scan).
        False if another process is building it."""
        if not await conn.fetchval("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')"):
            return True
        t = f'"{self.table}"'
        try:
            return await build_index(
                conn,
                f"trgm {self.table}",
                _TRGM.format(what="EXISTS (SELECT 1", t=t, valid="i.indisvalid") + ")",
                _TRGM.format(what="array(SELECT i.indexrelid::regclass::text", t=t, valid="NOT i.indisvalid") + ")",
                (_TRGM_BUILD if self._owned else _TRGM_CREATE).format(t=t),
            )
        except asyncpg.PostgresError as e:  # the search is right without it: say so, go on
            log.warning("long-term %s: no trigram index on content (%s); search scans the rows", self.table, e)
            return True

    async def _pool_ready(self) -> asyncpg.Pool:
        return await self.pg.pool(self._schema, check=self._ready)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        topic, partition, batch = ops(records)
        newest: dict[str, datetime | None] = {}  # namespace -> its newest clear in this batch
        for op in batch:
            if op.clear:
                seen = newest.get(op.namespace)
                newest[op.namespace] = op.at if seen is None else max(seen, op.at)
            else:
                newest.setdefault(op.namespace, None)
        lock_ns = sorted(newest)
        pool = await self._pool_ready()
        async with pool.acquire() as conn, conn.transaction():
            marks = dict(await conn.fetch(_LOCK, self.name, lock_ns, [newest[ns] for ns in lock_ns]))
            applied = 0
            # Rows are written a stretch at a time, each stretch ending at a retraction, which then
            # deletes what the rows before it left (in log order, as the other stores apply it).
            start = 0
            for end in [i + 1 for i, op in enumerate(batch) if op.retract] + [len(batch)]:
                stretch = batch[start:end]
                start = end
                if not stretch:
                    continue
                last = stretch[-1]
                done = await conn.fetchval(_CHECKPOINT, self.name, topic, partition) if last.retract else None
                applied += await self._rows(conn, topic, partition, stretch, marks, lock_ns)
                if last.retract and (done is None or last.offset > done):
                    await conn.execute(self._retract, last.namespace, last.session_id, topic, partition, last.offset)
            erasures = [(op.namespace, op.session_id, topic, partition, op.offset) for op in batch if op.erased]
            if erasures:
                await conn.executemany(self._erase, erasures)
        return Applied(applied)

    async def _rows(
        self,
        conn: asyncpg.Connection,
        topic: str,
        partition: int,
        batch: list[Op],
        marks: dict[str, datetime | None],
        lock_ns: list[str],
    ) -> int:
        """Write the rows of `batch` and move the checkpoint to its end: how many events were past it.
        From `COPY_ROWS` records on, the rows go by COPY."""
        if len(batch) < COPY_ROWS:
            applied: int = await conn.fetchval(
                self._apply, self.name, topic, partition, *_columns(batch), lock_ns, batch[-1].offset
            )
            return applied
        done: int = await conn.fetchval(self._prepare, self.name, topic, partition, lock_ns, batch[-1].offset)
        fresh = [op for op in batch if op.offset > done]
        rows = [
            (
                op.namespace,
                topic,
                partition,
                op.offset,
                op.session_id,
                op.at,
                op.message.role,
                op.message.content,
                op.message.to_json(),
            )
            for op in fresh
            if op.message is not None and _after(op.at, marks[op.namespace])
        ]
        if rows:
            try:
                async with conn.transaction():  # a savepoint, for the fallback
                    await conn.copy_records_to_table(self.table, records=rows, columns=_COLUMNS)
            except asyncpg.UniqueViolationError:
                await conn.execute(self._insert, *map(list, zip(*rows, strict=True)))
        return len(fresh)

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        pool = await self._pool_ready()
        offset: int | None = await pool.fetchval(_CHECKPOINT, self.name, topic, partition)
        return offset

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await (await self._pool_ready()).execute(ADVANCE, self.name, topic, partition, offset)

    @staticmethod
    def _want(want: Position | None) -> tuple[str | None, int | None, int]:
        return (None, None, 0) if want is None else (want.topic, want.partition, want.offset)

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        pool = await self._pool_ready()
        row = await pool.fetchrow(self._get, self.name, *self._want(want), key.namespace)
        return None if row["messages"] is None else [decode_json(m) for m in row["messages"]]

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        pool = await self._pool_ready()
        pattern = escape_like(query)
        words = probe(query, await self._frequent.get(pool))
        if words is None:
            row = await pool.fetchrow(self._search, self.name, *self._want(want), key.namespace, pattern, limit)
        else:
            row = await pool.fetchrow(
                self._search_words, self.name, *self._want(want), key.namespace, words, limit, pattern
            )
        return None if row["messages"] is None else [decode_json(m) for m in row["messages"]]

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.checkpoint(want.topic, want.partition)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        async with transaction(self.dsn) as conn:
            # Rows only: another deployment (topic prefix) may keep its namespaces in the same table.
            await delete_rows(conn, self.table, "namespace = ANY($1::text[])", list(namespaces))
            await delete_rows(
                conn,
                "helix_long_term_cleared",
                "view = $1 AND namespace = ANY($2::text[])",
                self.name,
                list(namespaces),
            )
            await drop_checkpoints(conn, self.name, topics)

    async def close(self) -> None:
        await self._frequent.close()
        await self.pg.close()
