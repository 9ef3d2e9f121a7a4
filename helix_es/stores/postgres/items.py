"""PostgreSQL items of a LangGraph store (`helix_es.views.items`), folded from the log.

Schema (made once under the schema lock):

- `helix_store_items (view, namespace, path_id, key)`: one row per live item. `path` (text[]) is
  the LangGraph namespace path, `path_id` the helix session that carries it
  (`helix_es.views.items.session_of`); `value` jsonb, `created_at`, `updated_at`, `expires_at`.
- `helix_checkpoints`: shared with the other views.

`apply` is one transaction: it locks the partition's checkpoint row (an upsert, so the first batch
of a partition locks it too), loads the current rows of the paths the batch touches, folds the
batch with `fold_item` (the fold every store shares) and writes the rows it changed, then the
checkpoint. A search narrows with `value @> <the filter's plain equalities>` and applies the
whole filter (`matches`) to what that returns, so results are exactly the in-process store's.

Forgetting: `ops`, given the store's view name, turns the item ids a forgetting names into deletes.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import asyncpg
import numpy as np

from helix_es.model.events import Position, Record
from helix_es.stores.ports import Applied, SessionKey
from helix_es.stores.postgres.pool import (
    ADVANCE,
    CHECKPOINTS,
    Pg,
    column_if_missing,
    delete_rows,
    drop_checkpoints,
    transaction,
)
from helix_es.views.items import (
    KEEP,
    Items,
    NoMessages,
    StoredItem,
    choose,
    embed,
    fold_batch,
    list_namespaces,
    ops,
    plain_equalities,
    session_of,
)

_SCHEMA = (
    CHECKPOINTS
    + """
CREATE TABLE IF NOT EXISTS helix_store_items (
    view text NOT NULL,
    namespace text NOT NULL,
    path_id text NOT NULL,
    key text NOT NULL,
    path text[] NOT NULL,
    value jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL,
    expires_at timestamptz,
    vectors bytea,
    ttl_minutes double precision,
    PRIMARY KEY (view, namespace, path_id, key)
);
"""
    # Tables made before refreshes (a TTL extended by a read): their items refresh once put again, or rebuilt.
    + column_if_missing(
        "helix_store_items", "ttl_minutes", "ALTER TABLE helix_store_items ADD COLUMN ttl_minutes double precision"
    )
)

# Locks the partition's checkpoint row, made if missing: batches of one partition apply one at a time.
_LOCK = """
INSERT INTO helix_checkpoints (view, topic, partition, "offset") VALUES ($1, $2, $3, -1)
ON CONFLICT (view, topic, partition) DO UPDATE SET "offset" = helix_checkpoints."offset"
RETURNING "offset"
"""
_LOAD = """
SELECT path_id, key, path, value::text AS value, created_at, updated_at, expires_at, ttl_minutes
FROM helix_store_items
WHERE view = $1 AND namespace = $2 AND path_id = ANY($3::text[])
"""
_UPSERT = """
INSERT INTO helix_store_items
    (view, namespace, path_id, key, path, value, created_at, updated_at, expires_at, vectors, ttl_minutes)
VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8, $9, $10, $11)
ON CONFLICT (view, namespace, path_id, key) DO UPDATE SET
    value = excluded.value, created_at = excluded.created_at, updated_at = excluded.updated_at,
    expires_at = excluded.expires_at, vectors = excluded.vectors, ttl_minutes = excluded.ttl_minutes
"""
_REFRESH = """
UPDATE helix_store_items SET expires_at = $5 WHERE view = $1 AND namespace = $2 AND path_id = $3 AND key = $4
"""
_DELETE = "DELETE FROM helix_store_items WHERE view = $1 AND namespace = $2 AND path_id = $3 AND key = $4"
_MOVE = 'UPDATE helix_checkpoints SET "offset" = $4 WHERE view = $1 AND topic = $2 AND partition = $3'
_CHECKPOINT = 'SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3'
_CHECKPOINTS = """
SELECT topic, partition, "offset" FROM helix_checkpoints
WHERE view = $1 AND (topic, partition) IN (SELECT * FROM unnest($2::text[], $3::int[]))
"""
_COLUMNS = (
    "i.path_id, i.key, i.path, i.value::text AS value, i.created_at, i.updated_at, i.expires_at, i.ttl_minutes, "
    "i.vectors"
)
_LIVE = "(i.expires_at IS NULL OR i.expires_at > $3)"
_GET = f"""
SELECT {_COLUMNS} FROM helix_store_items i
WHERE i.view = $1 AND i.namespace = $2 AND {_LIVE} AND i.path_id = $4 AND i.key = $5
"""
_FIND = f"""
SELECT {_COLUMNS} FROM helix_store_items i
WHERE i.view = $1 AND i.namespace = $2 AND {_LIVE}
  AND (cardinality($4::text[]) = 0 OR i.path[1:cardinality($4::text[])] = $4::text[])
  AND i.value @> $5::jsonb
ORDER BY i.created_at, i.path, i.key
"""
_PATHS = f"SELECT DISTINCT i.path FROM helix_store_items i WHERE i.view = $1 AND i.namespace = $2 AND {_LIVE}"


def _row(row: Mapping[str, Any]) -> StoredItem:
    return StoredItem(
        tuple(row["path"]),
        row["key"],
        row["value"],
        row["created_at"],
        row["updated_at"],
        row["expires_at"],
        ttl_minutes=row["ttl_minutes"],
    )


def _times(item: StoredItem) -> tuple[datetime, datetime, datetime | None]:
    return item.created_at, item.updated_at, item.expires_at


def _vectors(row: Mapping[str, Any], dims: int) -> np.ndarray | None:
    data = row["vectors"]
    return None if data is None else np.frombuffer(data, dtype=np.float32).reshape(-1, dims)


class PostgresItems(NoMessages):
    kind = "postgres"

    def __init__(self, dsn: str, view: Items | None = None) -> None:
        self.dsn = dsn
        self.view = view or Items(store="postgres")
        self.name = self.view.name
        self.embedder = None if self.view.index is None else self.view.index.embed.build()
        self.pg = Pg(dsn)

    async def _pool(self) -> asyncpg.Pool:
        return await self.pg.pool(_SCHEMA)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        topic, partition, batch = ops(records, self.name)
        namespace = records[0].event.namespace
        last = records[-1].position.offset
        # Embedded outside the transaction (a model's call); the ops the checkpoint covers cost a little then.
        embedded = await embed(self.embedder, self.view.index, batch)
        vectors = {op.offset: v for op, v in zip(batch, embedded, strict=True)}
        pool = await self._pool()
        async with pool.acquire() as conn, conn.transaction():
            done: int = await conn.fetchval(_LOCK, self.name, topic, partition)
            fresh = [op for op in batch if op.offset > done]
            paths = sorted({op.session_id for op in fresh})
            current = {(r["path_id"], r["key"]): _row(r) for r in await conn.fetch(_LOAD, self.name, namespace, paths)}
            state, put = fold_batch(current, fresh, vectors)
            gone = [(self.name, namespace, p, k) for (p, k) in current if (p, k) not in state]
            if gone:
                await conn.executemany(_DELETE, gone)
            changed = [  # the items a put of this batch left: each with the vectors of that put
                (
                    self.name,
                    namespace,
                    *k,
                    list(i.namespace),
                    i.value,
                    i.created_at,
                    i.updated_at,
                    i.expires_at,
                    None if v is None else np.asarray(v, dtype=np.float32).tobytes(),
                    i.ttl_minutes,
                )
                for k, i in state.items()
                if (v := put.get(k, KEEP)) is not KEEP
            ]
            if changed:
                await conn.executemany(_UPSERT, changed)
            refreshed = [(self.name, namespace, *k, state[k].expires_at) for k, v in put.items() if v is KEEP]
            if refreshed:
                await conn.executemany(_REFRESH, refreshed)
            if last > done:
                await conn.execute(_MOVE, self.name, topic, partition, last)
        return Applied(len(fresh))

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        offset: int | None = await (await self._pool()).fetchval(_CHECKPOINT, self.name, topic, partition)
        return None if offset is None or offset < 0 else offset

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await (await self._pool()).execute(ADVANCE, self.name, topic, partition, offset)

    async def behind(self, wants: Iterable[Position]) -> Position | None:
        wants = list(wants)
        rows = await (await self._pool()).fetch(
            _CHECKPOINTS, self.name, [w.topic for w in wants], [w.partition for w in wants]
        )
        applied = {(r["topic"], r["partition"]): r["offset"] for r in rows}
        return next((w for w in wants if applied.get((w.topic, w.partition), -1) < w.offset), None)

    async def get_item(self, namespace: str, path: tuple[str, ...], key: str, now: datetime) -> StoredItem | None:
        row = await (await self._pool()).fetchrow(_GET, self.name, namespace, now, session_of(path), key)
        return None if row is None else _row(row)

    async def find_items(
        self,
        namespace: str,
        prefix: tuple[str, ...],
        where: Mapping[str, Any] | None,
        limit: int,
        offset: int,
        now: datetime,
        query: str | None = None,
    ) -> list[StoredItem]:
        narrow = json.dumps(plain_equalities(where))
        rows = await (await self._pool()).fetch(_FIND, self.name, namespace, now, list(prefix), narrow)
        q = None if not query or self.embedder is None else (await self.embedder.embed([query]))[0]
        dims = 0 if self.embedder is None else self.embedder.dims
        found = [(_row(r), None if q is None else _vectors(r, dims)) for r in rows]
        return choose(found, where, limit, offset, q, text=query, index=self.view.index)

    async def item_namespaces(
        self,
        namespace: str,
        conditions: Sequence[tuple[str, tuple[str, ...]]],
        max_depth: int | None,
        limit: int,
        offset: int,
        now: datetime,
    ) -> list[tuple[str, ...]]:
        rows = await (await self._pool()).fetch(_PATHS, self.name, namespace, now)
        return list_namespaces([tuple(r["path"]) for r in rows], conditions, max_depth, limit, offset)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        async with transaction(self.dsn) as conn:
            where = "view = $1 AND namespace = ANY($2::text[])"
            await delete_rows(conn, "helix_store_items", where, self.name, list(namespaces))
            await drop_checkpoints(conn, self.name, topics)

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.checkpoint(want.topic, want.partition)

    async def close(self) -> None:
        await self.pg.close()
