"""PostgreSQL vector store: rows of `helix_vectors`, searched with numpy in each reading process.

Tables (created on first use under an advisory lock):

- `helix_vectors`: one row per indexed message; primary key (view, namespace, topic,
  partition, offset), so a re-delivered event cannot add a row twice. `embedding` is the unit
  vector as float32 little-endian bytes, as in `EmbeddingRecorded`. `version` is the
  namespace's write counter when the row was written.
- `helix_vector_namespaces`: per view and namespace, the `cleared_at` watermark and `version`.
  Every write takes this row's lock first, so writes to one namespace commit in version order.
  `erasures` counts the writes that deleted a forgotten session's rows: a reader whose cache
  saw another count reads the namespace afresh (deleted rows leave no newer version to fetch).
- `helix_embeddings`: (model, content_sha256) -> vector, so a new projector process reuses
  what was embedded before without calling the model or replaying the log.
- `helix_checkpoints`: shared with the session views.

A reader keeps each namespace's vectors in process (a `VectorIndex`) and refreshes it with
one statement per search: the checkpoint, the namespace row and the rows newer than the
version it holds, all from one snapshot. A newer `cleared_at` drops cached rows at or before
it, the same rule the writer applies, so the cache never needs a full reload.
pgvector is not used: it is not installed on the machines this was built on, and the numpy
scan meets the latency target at 100k vectors.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import asyncpg
import numpy as np

from helix_es.model.events import Position, micros
from helix_es.model.message import Message
from helix_es.stores.memory.vector import VectorIndex
from helix_es.stores.ports import BatchState, Write
from helix_es.stores.postgres.pool import CHECKPOINTS, Pg, delete_rows, drop_checkpoints, transaction

_SCHEMA = (
    CHECKPOINTS
    + """
CREATE TABLE IF NOT EXISTS helix_vectors (
    view text NOT NULL,
    namespace text NOT NULL,
    topic text NOT NULL,
    partition int NOT NULL,
    "offset" bigint NOT NULL,
    session_id text NOT NULL,
    event_time timestamptz NOT NULL,
    content_sha256 text NOT NULL,
    message jsonb NOT NULL,
    embedding bytea NOT NULL,
    version bigint NOT NULL,
    PRIMARY KEY (view, namespace, topic, partition, "offset")
);
CREATE INDEX IF NOT EXISTS helix_vectors_version ON helix_vectors (view, namespace, version);
CREATE TABLE IF NOT EXISTS helix_vector_namespaces (
    view text NOT NULL,
    namespace text NOT NULL,
    cleared_at timestamptz,
    version bigint NOT NULL,
    erasures bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (view, namespace)
);
-- Tables made before erasure existed. Only when missing: ALTER TABLE locks even when it changes nothing.
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                   WHERE table_name = 'helix_vector_namespaces' AND column_name = 'erasures') THEN
        ALTER TABLE helix_vector_namespaces ADD COLUMN erasures bigint NOT NULL DEFAULT 0;
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS helix_embeddings (
    model text NOT NULL,
    content_sha256 text NOT NULL,
    vector bytea NOT NULL,
    PRIMARY KEY (model, content_sha256)
);
"""
)

_LOAD = """
SELECT k.namespace, n.cleared_at,
    (SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3) AS checkpoint
FROM unnest($4::text[]) AS k(namespace)
LEFT JOIN helix_vector_namespaces n ON n.view = $1 AND n.namespace = k.namespace
"""

# First statement of a write: lock the namespace row (creating it), move the watermark, bump the version.
_CLAIM = """
INSERT INTO helix_vector_namespaces AS n (view, namespace, cleared_at, version) VALUES ($1, $2, $3, 1)
ON CONFLICT (view, namespace) DO UPDATE
    SET cleared_at = greatest(n.cleared_at, excluded.cleared_at), version = n.version + 1
RETURNING cleared_at, version
"""

# Second statement, after the lock: a fresh snapshot sees every row an earlier writer committed.
_WRITE = """
WITH cleared AS (
    DELETE FROM helix_vectors
    WHERE $12::boolean AND view = $1 AND namespace = $2 AND event_time <= $3
), added AS (
    INSERT INTO helix_vectors (view, namespace, topic, partition, "offset", session_id, event_time,
                               content_sha256, message, embedding, version)
    SELECT $1, $2, a.topic, a.partition, a."offset", a.session_id, a.event_time, a.sha, a.message::jsonb,
           a.embedding, $4
    FROM unnest($5::text[], $6::int[], $7::bigint[], $8::text[], $9::timestamptz[], $10::text[], $11::text[],
                $13::bytea[]) AS a(topic, partition, "offset", session_id, event_time, sha, message, embedding)
    WHERE $3::timestamptz IS NULL OR a.event_time > $3
    ON CONFLICT DO NOTHING
)
SELECT 1
"""

# After _WRITE, under the namespace row's lock: a SessionErased deletes its session's rows except those
# after it on its partition, and counts itself only if it deleted any (readers then reload).
_ERASE = """
WITH gone AS (
    DELETE FROM helix_vectors
    WHERE view = $1 AND namespace = $2 AND session_id = $3 AND NOT (topic = $4 AND partition = $5 AND "offset" > $6)
    RETURNING 1
)
UPDATE helix_vector_namespaces SET erasures = erasures + 1
WHERE view = $1 AND namespace = $2 AND EXISTS (SELECT 1 FROM gone)
"""

_KEEP = """
WITH kept AS (
    INSERT INTO helix_embeddings (model, content_sha256, vector)
    SELECT $1, e.sha, e.vector FROM unnest($2::text[], $3::bytea[]) AS e(sha, vector)
    ON CONFLICT DO NOTHING
), checkpoint AS (
    INSERT INTO helix_checkpoints (view, topic, partition, "offset") VALUES ($4, $5, $6, $7)
    ON CONFLICT (view, topic, partition) DO UPDATE
        SET "offset" = greatest(helix_checkpoints."offset", excluded."offset")
)
SELECT 1
"""

_KNOWN = """
SELECT content_sha256, vector FROM helix_embeddings WHERE model = $1 AND content_sha256 = any($2::text[])
"""

_CHECKPOINT = 'SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3'

# One statement, one snapshot: checkpoint, watermark and the rows newer than the cached version agree.
_REFRESH = """
SELECT c.checkpoint, n.version AS ns_version, n.cleared_at, n.erasures,
       v.topic, v.partition, v."offset", v.event_time, v.message::text AS message, v.embedding
FROM (SELECT (SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $4 AND partition = $5)
      AS checkpoint) c
LEFT JOIN helix_vector_namespaces n ON n.view = $1 AND n.namespace = $2
LEFT JOIN helix_vectors v ON v.view = $1 AND v.namespace = $2 AND v.version > $3
    AND (n.cleared_at IS NULL OR v.event_time > n.cleared_at)
ORDER BY v.version, v.topic, v.partition, v."offset"
"""

_COUNT = "SELECT count(*) FROM helix_vectors WHERE view = $1 AND namespace = $2"


def _bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


@dataclass
class _Cached:
    """A namespace's rows as this process last read them."""

    index: VectorIndex | None = None
    version: int = 0
    cleared_at: datetime | None = None
    erasures: int = 0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class PostgresVectorStore:
    kind = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pg = Pg(dsn)
        self._cached: dict[tuple[str, str], _Cached] = {}

    async def ensure_schema(self) -> None:
        """Connect if needed and create the tables if absent; runs on first use, safe to repeat."""
        await self._pool_ready()

    async def _pool_ready(self) -> asyncpg.Pool:
        return await self.pg.pool(_SCHEMA)

    async def load(self, view: str, topic: str, partition: int, namespaces: Sequence[str]) -> BatchState:
        pool = await self._pool_ready()
        rows = await pool.fetch(_LOAD, view, topic, partition, list(namespaces))
        checkpoint = rows[0]["checkpoint"] if rows else await pool.fetchval(_CHECKPOINT, view, topic, partition)
        return BatchState(checkpoint, {r["namespace"]: r["cleared_at"] for r in rows if r["cleared_at"] is not None})

    async def known(self, model: str, shas: Collection[str]) -> dict[str, np.ndarray]:
        pool = await self._pool_ready()
        rows = await pool.fetch(_KNOWN, model, list(shas))
        return {r["content_sha256"]: np.frombuffer(r["vector"], dtype="<f4").astype(np.float32) for r in rows}

    async def write(self, view: str, model: str, write: Write) -> None:
        pool = await self._pool_ready()
        groups: dict[str, list[int]] = {}
        for i, e in enumerate(write.entries):
            groups.setdefault(e.namespace, []).append(i)
        for ns in write.cleared:
            groups.setdefault(ns, [])
        for ns, _session in write.erased:
            groups.setdefault(ns, [])
        shas = list(write.embeddings)
        keep = (
            model,
            shas,
            [_bytes(write.embeddings[s]) for s in shas],
            view,
            write.topic,
            write.partition,
            write.checkpoint,
        )
        if not groups:
            await pool.execute(_KEEP, *keep)  # only cached embeddings and the checkpoint: one statement
            return
        async with pool.acquire() as conn, conn.transaction():
            for ns in sorted(groups):  # one lock order: two writers never deadlock
                rows = [write.entries[i] for i in groups[ns]]
                claim = await conn.fetchrow(_CLAIM, view, ns, write.cleared.get(ns))
                await conn.execute(
                    _WRITE,
                    view,
                    ns,
                    claim["cleared_at"],
                    claim["version"],
                    [e.position.topic for e in rows],
                    [e.position.partition for e in rows],
                    [e.position.offset for e in rows],
                    [e.session_id for e in rows],
                    [e.timestamp for e in rows],
                    [e.sha for e in rows],
                    [e.message.to_json() for e in rows],
                    ns in write.cleared,
                    [_bytes(write.vectors[i]) for i in groups[ns]],
                )
                for (erased_ns, session), at in write.erased.items():
                    if erased_ns == ns:
                        await conn.execute(_ERASE, view, ns, session, at.topic, at.partition, at.offset)
            await conn.execute(_KEEP, *keep)

    async def checkpoint(self, view: str, topic: str, partition: int) -> int | None:
        pool = await self._pool_ready()
        offset: int | None = await pool.fetchval(_CHECKPOINT, view, topic, partition)
        return offset

    async def _refresh(self, view: str, namespace: str, want: Position | None) -> tuple[int | None, _Cached]:
        pool = await self._pool_ready()
        cached = self._cached.setdefault((view, namespace), _Cached())
        where = (want.topic, want.partition) if want is not None else (None, None)
        async with cached.lock:  # two searches must not both append the same new rows
            rows = await pool.fetch(_REFRESH, view, namespace, cached.version, *where)
            version = rows[0]["ns_version"]
            if version is not None and (version < cached.version or rows[0]["erasures"] != cached.erasures):
                # The tables were emptied and written again, or a session erased: read the namespace afresh.
                cached.index, cached.version, cached.cleared_at = None, 0, None
                rows = await pool.fetch(_REFRESH, view, namespace, 0, *where)
                version = rows[0]["ns_version"]
            if version is None:
                cached.index, cached.version, cached.cleared_at = None, 0, None
            else:
                self._merge(cached, rows)
            return rows[0]["checkpoint"], cached

    def _merge(self, cached: _Cached, rows: list[asyncpg.Record]) -> None:
        head = rows[0]
        cleared_at = head["cleared_at"]
        if (
            cleared_at is not None
            and cached.index is not None
            and (cached.cleared_at is None or cleared_at > cached.cleared_at)
        ):
            cached.index.drop_until(micros(cleared_at))
        cached.cleared_at = cleared_at
        cached.erasures = head["erasures"]
        new = [r for r in rows if r["offset"] is not None]
        if new:
            vectors = np.frombuffer(b"".join(r["embedding"] for r in new), dtype="<f4").reshape(len(new), -1)
            if cached.index is None:
                cached.index = VectorIndex(vectors.shape[1])
            seqs = range(len(cached.index), len(cached.index) + len(new))  # unused: no cap here
            cached.index.add(
                vectors,
                [micros(r["event_time"]) for r in new],
                seqs,
                [Message.from_json(r["message"]) for r in new],
                [Position(r["topic"], r["partition"], r["offset"]) for r in new],
            )
        cached.version = head["ns_version"]

    async def search(
        self, view: str, namespace: str, query: np.ndarray, k: int, want: Position | None
    ) -> list[Message] | None:
        checkpoint, cached = await self._refresh(view, namespace, want)
        if want is not None and (checkpoint is None or checkpoint < want.offset):
            return None
        return cached.index.top(query, k) if cached.index is not None else []

    async def count(self, view: str, namespace: str) -> int:
        pool = await self._pool_ready()
        n: int = await pool.fetchval(_COUNT, view, namespace)
        return n

    async def drop(self, view: str, namespaces: Collection[str], topics: Collection[str]) -> None:
        async with transaction(self.dsn) as conn:
            for table in ("helix_vectors", "helix_vector_namespaces"):
                await delete_rows(conn, table, "view = $1 AND namespace = ANY($2::text[])", view, list(namespaces))
            await drop_checkpoints(conn, view, topics)
        for ns in namespaces:
            self._cached.pop((view, ns), None)

    async def close(self) -> None:
        await self.pg.close()
