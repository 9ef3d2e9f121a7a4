"""PostgreSQL checkpoint view: one row per checkpoint, per channel blob and per pending write.

Tables `helix_lg_checkpoints`, `helix_lg_blobs` and `helix_lg_writes`, keyed by view, namespace
and thread; the partition checkpoints are `helix_checkpoints`' rows, as every view's. `apply`
runs in one transaction that takes the partition checkpoint's row lock first, skips records at
or below it (a re-delivery), writes each event's rows and moves the checkpoint: a replay is a
no-op and a batch lands whole or not at all.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import asyncpg

from helix_es.model.events import Record, Serialized
from helix_es.stores.ports import Applied
from helix_es.stores.postgres.pool import (
    ADVANCE,
    CHECKPOINTS,
    Pg,
    delete_rows,
    drop_checkpoints,
    index_if_missing,
    transaction,
)
from helix_es.views.checkpoints import (
    EMPTY,
    VIEW_NAME,
    DeleteCheckpoints,
    PutCheckpoint,
    PutWrites,
    Saved,
    WriteRow,
    record_op,
)

_T = ("helix_lg_checkpoints", "helix_lg_blobs", "helix_lg_writes")
_SCHEMA = (
    CHECKPOINTS
    + """
CREATE TABLE IF NOT EXISTS helix_lg_checkpoints (
    view text NOT NULL, namespace text NOT NULL, thread_id text NOT NULL,
    checkpoint_ns text NOT NULL, checkpoint_id text NOT NULL, parent_checkpoint_id text,
    type text NOT NULL, checkpoint bytea NOT NULL, metadata_type text NOT NULL, metadata bytea NOT NULL,
    run_id text,
    PRIMARY KEY (view, namespace, thread_id, checkpoint_ns, checkpoint_id)
);
"""
    + index_if_missing(
        "helix_lg_checkpoints_runs",
        "CREATE INDEX helix_lg_checkpoints_runs ON helix_lg_checkpoints (view, namespace, run_id)",
    )
    + """CREATE TABLE IF NOT EXISTS helix_lg_blobs (
    view text NOT NULL, namespace text NOT NULL, thread_id text NOT NULL,
    checkpoint_ns text NOT NULL, channel text NOT NULL, version text NOT NULL,
    type text NOT NULL, data bytea NOT NULL,
    PRIMARY KEY (view, namespace, thread_id, checkpoint_ns, channel, version)
);
CREATE TABLE IF NOT EXISTS helix_lg_writes (
    view text NOT NULL, namespace text NOT NULL, thread_id text NOT NULL,
    checkpoint_ns text NOT NULL, checkpoint_id text NOT NULL, task_id text NOT NULL, idx int NOT NULL,
    channel text NOT NULL, type text NOT NULL, data bytea NOT NULL, task_path text NOT NULL,
    PRIMARY KEY (view, namespace, thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
);
"""
)

# The checkpoint row exists from the first batch on: its lock orders every writer of the partition.
_LOCK = """
INSERT INTO helix_checkpoints (view, topic, partition, "offset") VALUES ($1, $2, $3, -1)
ON CONFLICT (view, topic, partition) DO UPDATE SET "offset" = helix_checkpoints."offset"
RETURNING "offset"
"""
_SET = 'UPDATE helix_checkpoints SET "offset" = $4 WHERE view = $1 AND topic = $2 AND partition = $3'
_CHECKPOINT = 'SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3'

_PUT = """
INSERT INTO helix_lg_checkpoints VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (view, namespace, thread_id, checkpoint_ns, checkpoint_id) DO UPDATE SET
    parent_checkpoint_id = excluded.parent_checkpoint_id, type = excluded.type, checkpoint = excluded.checkpoint,
    metadata_type = excluded.metadata_type, metadata = excluded.metadata, run_id = excluded.run_id
"""
_BLOBS = """
INSERT INTO helix_lg_blobs
SELECT $1, $2, $3, $4, b.channel, b.version, b.type, b.data
FROM unnest($5::text[], $6::text[], $7::text[], $8::bytea[]) AS b(channel, version, type, data)
ON CONFLICT (view, namespace, thread_id, checkpoint_ns, channel, version) DO UPDATE SET
    type = excluded.type, data = excluded.data
"""
# LangGraph's special channels (negative idx) replace; the others never overwrite.
_WRITES = """
INSERT INTO helix_lg_writes
SELECT $1, $2, $3, $4, $5, $6, w.idx, w.channel, w.type, w.data, $7
FROM unnest($8::int[], $9::text[], $10::text[], $11::bytea[]) AS w(idx, channel, type, data)
ON CONFLICT (view, namespace, thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO {}
"""
_REPLACE = _WRITES.format(
    "UPDATE SET channel = excluded.channel, type = excluded.type, data = excluded.data, task_path = excluded.task_path"
)
_ADD = _WRITES.format("NOTHING")
_THREAD = "view = $1 AND namespace = $2 AND thread_id = $3"
# A "checkpoints" deletion's rows, and the blobs a deletion lists. Of the listed, those saved: the
# writes of a checkpoint deleted before they came stay, as in the fold (and Redis).
_LISTED = f"""
    SELECT checkpoint_ns, checkpoint_id FROM helix_lg_checkpoints WHERE {_THREAD}
    AND (checkpoint_ns, checkpoint_id) IN (SELECT * FROM unnest($4::text[], $5::text[]))"""
_DROP_BLOBS = f"""
DELETE FROM helix_lg_blobs WHERE {_THREAD}
AND (checkpoint_ns, channel, version) IN (SELECT * FROM unnest($4::text[], $5::text[], $6::text[]))"""
# Whether a thread holds a checkpoint newer than the one a forgetting saw: it stays (`DropThread.spares`).
_NEWER = f'SELECT EXISTS (SELECT 1 FROM helix_lg_checkpoints WHERE {_THREAD} AND checkpoint_id > $4 COLLATE "C")'
# The rows a deletion removes, for the writes and the checkpoints alike.
_DOOMED = {
    "runs": f"SELECT checkpoint_ns, checkpoint_id FROM helix_lg_checkpoints WHERE {_THREAD} AND run_id = ANY($4)",
    "keep_latest": f"""
        SELECT checkpoint_ns, checkpoint_id FROM helix_lg_checkpoints c WHERE {_THREAD} AND checkpoint_id < (
            SELECT max(checkpoint_id) FROM helix_lg_checkpoints l
            WHERE l.view = c.view AND l.namespace = c.namespace AND l.thread_id = c.thread_id
            AND l.checkpoint_ns = c.checkpoint_ns
        ) AND cardinality($4::text[]) >= 0""",
}

_COLUMNS = (
    "thread_id, checkpoint_ns, checkpoint_id, parent_checkpoint_id, type, checkpoint, metadata_type, metadata, run_id"
)


def _saved(row: asyncpg.Record) -> Saved:
    return Saved(
        row["thread_id"],
        row["checkpoint_ns"],
        row["checkpoint_id"],
        row["parent_checkpoint_id"],
        Serialized(row["type"], bytes(row["checkpoint"])),
        Serialized(row["metadata_type"], bytes(row["metadata"])),
        row["run_id"],
    )


class PostgresCheckpoints:
    kind = "postgres"

    def __init__(self, dsn: str, name: str = VIEW_NAME) -> None:
        self.dsn = dsn
        self.name = name
        self._pg = Pg(dsn)

    async def _pool(self) -> asyncpg.Pool:
        return await self._pg.pool(_SCHEMA)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        p = records[0].position
        pool = await self._pool()
        async with pool.acquire() as conn, conn.transaction():
            done = await conn.fetchval(_LOCK, self.name, p.topic, p.partition)
            fresh = [r for r in records if r.position.offset > done]
            for r in fresh:
                await self._fold(conn, r)
            if fresh:
                await conn.execute(_SET, self.name, p.topic, p.partition, fresh[-1].position.offset)
        return Applied(len(fresh))

    async def _fold(self, conn: asyncpg.Connection, record: Record) -> None:
        op = record_op(record)
        if op is None:
            return
        key = (self.name, record.event.namespace, record.event.session_id)
        if isinstance(op, PutCheckpoint):
            r = op.row
            c, m = r.checkpoint, r.metadata
            await conn.execute(_PUT, *key, *op.ref, r.parent_checkpoint_id, c.type, c.data, m.type, m.data, r.run_id)
            if op.blobs:
                await conn.execute(
                    _BLOBS,
                    *key,
                    r.checkpoint_ns,
                    [ch for (_, ch, _), _ in op.blobs],
                    [v for (_, _, v), _ in op.blobs],
                    [b.type for _, b in op.blobs],
                    [b.data for _, b in op.blobs],
                )
        elif isinstance(op, PutWrites):
            replace = [w for w in op.rows if op.replaces(w)]
            for sql, rows in ((_REPLACE, replace), (_ADD, [w for w in op.rows if not op.replaces(w)])):
                if rows:
                    await conn.execute(
                        sql,
                        *key,
                        *op.ref,
                        rows[0].task_id,
                        rows[0].task_path,
                        [w.idx for w in rows],
                        [w.channel for w in rows],
                        [w.value.type for w in rows],
                        [w.value.data for w in rows],
                    )
        elif isinstance(op, DeleteCheckpoints):
            if op.scope == "checkpoints":
                doomed, args = f"(checkpoint_ns, checkpoint_id) IN ({_LISTED})", _columns(op.listed)
            else:
                doomed, args = f"(checkpoint_ns, checkpoint_id) IN ({_DOOMED[op.scope]})", [list(op.run_ids)]
            if args:  # a "checkpoints" deletion may list none, and only blobs
                await conn.execute(f"DELETE FROM helix_lg_writes WHERE {_THREAD} AND {doomed}", *key, *args)
                await conn.execute(f"DELETE FROM helix_lg_checkpoints WHERE {_THREAD} AND {doomed}", *key, *args)
            if op.blobs:
                await conn.execute(_DROP_BLOBS, *key, *_columns(op.blobs))
        elif op.seen is None or not await conn.fetchval(_NEWER, *key, op.seen):
            for table in _T:
                await conn.execute(f"DELETE FROM {table} WHERE {_THREAD}", *key)

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        offset: int | None = await (await self._pool()).fetchval(_CHECKPOINT, self.name, topic, partition)
        return None if offset is None or offset < 0 else offset

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await (await self._pool()).execute(ADVANCE, self.name, topic, partition, offset)

    async def get(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str | None) -> Saved | None:
        sql = f"SELECT {_COLUMNS} FROM helix_lg_checkpoints WHERE {_THREAD} AND checkpoint_ns = $4"
        args: list[Any] = [self.name, namespace, thread_id, checkpoint_ns]
        if checkpoint_id is not None:
            sql += " AND checkpoint_id = $5"
            args.append(checkpoint_id)
        row = await (await self._pool()).fetchrow(sql + " ORDER BY checkpoint_id DESC LIMIT 1", *args)
        return None if row is None else _saved(row)

    async def listing(
        self,
        namespace: str,
        thread_id: str | None,
        checkpoint_ns: str | None,
        before: str | None,
        limit: int | None,
    ) -> list[Saved]:
        sql = f"""
            SELECT {_COLUMNS} FROM helix_lg_checkpoints
            WHERE view = $1 AND namespace = $2 AND ($3::text IS NULL OR thread_id = $3)
            AND ($4::text IS NULL OR checkpoint_ns = $4) AND ($5::text IS NULL OR checkpoint_id < $5)
            ORDER BY thread_id DESC, checkpoint_id DESC LIMIT $6
        """
        rows = await (await self._pool()).fetch(sql, self.name, namespace, thread_id, checkpoint_ns, before, limit)
        return [_saved(r) for r in rows]

    async def latest(self, namespace: str) -> list[Saved]:
        sql = f"""
            SELECT DISTINCT ON (thread_id) {_COLUMNS} FROM helix_lg_checkpoints WHERE view = $1 AND namespace = $2
            ORDER BY thread_id, checkpoint_id COLLATE "C" DESC
        """
        return [_saved(r) for r in await (await self._pool()).fetch(sql, self.name, namespace)]

    async def blobs(
        self, namespace: str, thread_id: str, checkpoint_ns: str, versions: Sequence[tuple[str, str]]
    ) -> dict[str, Serialized]:
        if not versions:
            return {}
        sql = f"""
            SELECT b.channel, b.type, b.data FROM helix_lg_blobs b
            JOIN unnest($5::text[], $6::text[]) AS v(channel, version) USING (channel, version)
            WHERE b.{_THREAD.replace(" AND ", " AND b.")} AND b.checkpoint_ns = $4 AND b.type <> $7
        """
        channels, wanted = [c for c, _ in versions], [v for _, v in versions]
        pool = await self._pool()
        rows = await pool.fetch(sql, self.name, namespace, thread_id, checkpoint_ns, channels, wanted, EMPTY)
        return {r["channel"]: Serialized(r["type"], bytes(r["data"])) for r in rows}

    async def writes(self, namespace: str, thread_id: str, checkpoint_ns: str, checkpoint_id: str) -> list[WriteRow]:
        sql = f"""
            SELECT task_id, idx, channel, type, data, task_path FROM helix_lg_writes
            WHERE {_THREAD} AND checkpoint_ns = $4 AND checkpoint_id = $5
        """
        rows = await (await self._pool()).fetch(sql, self.name, namespace, thread_id, checkpoint_ns, checkpoint_id)
        return [
            WriteRow(r["task_id"], r["idx"], r["channel"], Serialized(r["type"], bytes(r["data"])), r["task_path"])
            for r in rows
        ]

    async def runs(self, namespace: str, run_ids: Collection[str]) -> list[str]:
        sql = """
            SELECT DISTINCT thread_id FROM helix_lg_checkpoints
            WHERE view = $1 AND namespace = $2 AND run_id = ANY($3::text[]) ORDER BY thread_id
        """
        rows = await (await self._pool()).fetch(sql, self.name, namespace, list(run_ids))
        return [r["thread_id"] for r in rows]

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        async with transaction(self.dsn) as conn:
            for table in _T:
                await delete_rows(conn, table, "view = $1 AND namespace = ANY($2::text[])", self.name, list(namespaces))
            await drop_checkpoints(conn, self.name, topics)

    async def close(self) -> None:
        await self._pg.close()


def _columns(rows: Sequence[tuple[str, ...]]) -> list[list[str]]:
    """Rows as the columns `unnest` takes (none for no rows)."""
    return [list(column) for column in zip(*rows, strict=True)]
