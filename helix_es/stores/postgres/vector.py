"""PostgreSQL vector store: pgvector rows of `helix_vectors`, searched with one SQL query.

Tables (created on first use under an advisory lock, with the `vector` extension):

- `helix_vectors`: one row per indexed message; primary key (view, namespace, topic,
  partition, offset), so a re-delivered event cannot add a row twice. `vec` is the unit vector
  (pgvector `vector`, float32 as the log's embeddings), `dims` its length (generated).
  `version` is the namespace's write counter when the row was written. `embedding` (bytea) is
  what stores before pgvector wrote; it is no longer written, and rows that only have it are
  copied into `vec` when the schema is made (decoded exactly, as float32 little-endian).
- `helix_vector_namespaces`: per view and namespace, the `cleared_at` watermark, `version` and
  `erasures`. Every write takes this row's lock first, so writes to one namespace commit in
  version order.
- `helix_embeddings`: (model, content_sha256) -> vector, so a new projector process reuses
  what was embedded before without calling the model or replaying the log.
- `helix_checkpoints`: shared with the session views.

One table holds every view's vectors, of whatever length its model gives, so the HNSW index
(cosine) is partial and per length: `helix_vectors_hnsw_<dims>` on `vec::vector(dims)` where
`dims = <dims>`, made CONCURRENTLY by one process on the first write of that length. A search
is one statement: the checkpoint and the top k from one snapshot. The planner takes the HNSW
index when the namespace is a large part of the rows, else the primary key and an exact sort;
`hnsw.iterative_scan = strict_order` keeps the filtered index scan going until it has k rows
of the namespace, best first (a namespace that is a minority of a big table, yet searched
through the shared graph, can see lower recall than one alone). `hnsw.ef_search` (default
`EF_SEARCH`) trades speed for recall; bench/vector.py measures both. A reader keeps nothing
in memory.
"""

from __future__ import annotations

import struct
from collections.abc import Collection, Sequence

import asyncpg
import numpy as np

from helix_es.model.errors import HelixError
from helix_es.model.events import Position
from helix_es.model.message import Message, decode_json
from helix_es.stores.ports.vector import BatchState, RankAsk, Ranking, SessionId, Tail, Write
from helix_es.stores.postgres import vector_recall as recall_sql
from helix_es.stores.postgres.pool import (
    CHECKPOINTS,
    Pg,
    build_index,
    delete_rows,
    drop_checkpoints,
    index_if_missing,
    transaction,
)

EF_SEARCH = 100  # HNSW candidates per search: recall@10 >= 0.95 at 1M x 384 (bench/vector.py)
MAX_INDEXED_DIMS = 2000  # pgvector's HNSW limit for `vector`; longer ones are searched exactly

# Float32 little-endian bytes -> real[], exactly (IEEE 754 by hand: SQL has no bit cast), for
# rows written before pgvector. Session-local: it exists only for the migration below.
_F4LE = """
CREATE OR REPLACE FUNCTION pg_temp.helix_f4le(b bytea) RETURNS real[] LANGUAGE sql IMMUTABLE STRICT AS $f$
SELECT array_agg(((CASE WHEN e = 0 THEN m * 2::float8 ^ -149 ELSE (m + 8388608) * 2::float8 ^ (e - 150) END)
                  * (1 - 2 * s))::real ORDER BY i)
FROM (SELECT i, get_byte(b, 4 * i + 3) >> 7 AS s,
             ((get_byte(b, 4 * i + 3) & 127) << 1) | (get_byte(b, 4 * i + 2) >> 7) AS e,
             ((get_byte(b, 4 * i + 2) & 127) << 16) | (get_byte(b, 4 * i + 1) << 8) | get_byte(b, 4 * i) AS m
      FROM generate_series(0, length(b) / 4 - 1) AS i) AS f
$f$;
"""

_SCHEMA = (
    "CREATE EXTENSION IF NOT EXISTS vector;\n"
    + CHECKPOINTS
    + _F4LE
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
    embedding bytea,
    version bigint NOT NULL,
    vec vector,
    dims int GENERATED ALWAYS AS (vector_dims(vec)) STORED,
    PRIMARY KEY (view, namespace, topic, partition, "offset")
);
-- A table from before pgvector: add the columns, copy its vectors over (only when missing:
-- ALTER TABLE locks even when it changes nothing).
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                   WHERE table_name = 'helix_vectors' AND column_name = 'vec') THEN
        ALTER TABLE helix_vectors ALTER COLUMN embedding DROP NOT NULL, ADD COLUMN vec vector;
        UPDATE helix_vectors SET vec = pg_temp.helix_f4le(embedding)::vector;
        ALTER TABLE helix_vectors ADD COLUMN dims int GENERATED ALWAYS AS (vector_dims(vec)) STORED;
    END IF;
END $$;
"""
    + index_if_missing(
        "helix_vectors_version", "CREATE INDEX helix_vectors_version ON helix_vectors (view, namespace, version)"
    )
    + """CREATE TABLE IF NOT EXISTS helix_vector_namespaces (
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
CREATE TABLE IF NOT EXISTS helix_vector_tails (
    view text NOT NULL,
    namespace text NOT NULL,
    session_id text NOT NULL,
    topic text NOT NULL,
    partition int NOT NULL,
    upto bigint NOT NULL,
    offsets bigint[] NOT NULL,
    PRIMARY KEY (view, namespace, session_id, topic, partition)
);
CREATE TABLE IF NOT EXISTS helix_embeddings (
    model text NOT NULL,
    content_sha256 text NOT NULL,
    vector bytea NOT NULL,
    PRIMARY KEY (model, content_sha256)
);
"""
    + recall_sql.SCHEMA
)

# The HNSW index of one vector length, made on its first write (see ensure_index). On a table
# that already holds many rows of that length (a migrated one) this is a long build: writers
# go on meanwhile, and searches scan exactly until it is valid.
_INDEX = """
CREATE INDEX CONCURRENTLY IF NOT EXISTS helix_vectors_hnsw_{d} ON helix_vectors
    USING hnsw ((vec::vector({d})) vector_cosine_ops) WITH (m = 16, ef_construction = 64) WHERE dims = {d}
"""

_LOAD = """
SELECT k.namespace, n.cleared_at,
    (SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3) AS checkpoint
FROM unnest($4::text[]) AS k(namespace)
LEFT JOIN helix_vector_namespaces n ON n.view = $1 AND n.namespace = k.namespace
"""

_TAILS = """
SELECT namespace, session_id, upto, offsets FROM helix_vector_tails
WHERE view = $1 AND topic = $2 AND partition = $3
  AND (namespace, session_id) IN (SELECT * FROM unnest($4::text[], $5::text[]))
"""

# With the entries, under the namespace row's lock: the tails the batch moved, and the entries its
# retractions took back.
_TAILS_WRITE = """
INSERT INTO helix_vector_tails AS t (view, namespace, session_id, topic, partition, upto, offsets)
SELECT $1, $2, s.session_id, $3, $4, s.upto, s.offsets::bigint[]
FROM unnest($5::text[], $6::bigint[], $7::text[]) AS s(session_id, upto, offsets)
ON CONFLICT (view, namespace, session_id, topic, partition) DO UPDATE
    SET upto = excluded.upto, offsets = excluded.offsets WHERE t.upto < excluded.upto
"""
_NONE = "none AS (SELECT NULL::int AS words, NULL::tsvector AS keywords WHERE false)"

_RETRACT = f"""
WITH gone AS (
    DELETE FROM helix_vectors WHERE view = $1 AND namespace = $2 AND topic = $3 AND partition = $4
        AND "offset" = ANY($5::bigint[])
    RETURNING words, keywords
), {_NONE}
{recall_sql.keyword_stats("none", "gone")}"""

# First statement of a write: lock the namespace row (creating it), move the watermark, bump the version.
_CLAIM = """
INSERT INTO helix_vector_namespaces AS n (view, namespace, cleared_at, version) VALUES ($1, $2, $3, 1)
ON CONFLICT (view, namespace) DO UPDATE
    SET cleared_at = greatest(n.cleared_at, excluded.cleared_at), version = n.version + 1
RETURNING cleared_at, version
"""

# Second statement, after the lock: a fresh snapshot sees every row an earlier writer committed.
_WRITE = f"""
WITH cleared AS (
    DELETE FROM helix_vectors
    WHERE $12::boolean AND view = $1 AND namespace = $2 AND event_time <= $3
    RETURNING words, keywords
), added AS (
    INSERT INTO helix_vectors (view, namespace, topic, partition, "offset", session_id, event_time,
                               content_sha256, message, vec, version, occurred_at, keywords, words)
    SELECT $1, $2, a.topic, a.partition, a."offset", a.session_id, a.event_time, a.sha, a.message::jsonb,
           a.vec, $4, a.occurred_at, k.tsv, length(k.tsv)
    FROM unnest($5::text[], $6::int[], $7::bigint[], $8::text[], $9::timestamptz[], $10::text[], $11::text[],
                $13::vector[], $14::timestamptz[], $15::text[])
         AS a(topic, partition, "offset", session_id, event_time, sha, message, vec, occurred_at, kw)
    CROSS JOIN LATERAL (SELECT to_tsvector('english', a.kw) AS tsv) AS k
    WHERE $3::timestamptz IS NULL OR a.event_time > $3
    ON CONFLICT DO NOTHING
    RETURNING words, keywords
)
{recall_sql.keyword_stats("added", "cleared")}"""

# After _WRITE, under the namespace row's lock: a write's erasures delete each session's rows except those
# after its erasure on its partition, all in one statement (one pass over the namespace's rows however many
# sessions a person's erasure names), and count the sessions that lost rows (readers then reload).
_ERASE = f"""
WITH gone AS (
    DELETE FROM helix_vectors v
    USING unnest($3::text[], $4::text[], $5::int[], $6::bigint[]) AS e(session_id, topic, partition, upto)
    WHERE v.view = $1 AND v.namespace = $2 AND v.session_id = e.session_id
        AND NOT (v.topic = e.topic AND v.partition = e.partition AND v."offset" > e.upto)
    RETURNING v.session_id, v.words, v.keywords
), {_NONE}
{recall_sql.keyword_stats("none", "gone", erasures="(SELECT count(DISTINCT session_id) FROM gone)")}"""

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

# One statement, one snapshot: the checkpoint and, if it covers `want` ($3 NULL: no want), the
# top $6. The inner ORDER BY is the index's (distance alone); the outer one breaks ties in
# applied order among the rows it returned. The cast's length is a literal: the index is on it.
_SEARCH = """
WITH cp AS MATERIALIZED (
    SELECT (SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $3 AND partition = $4) AS o
)
SELECT cp.o AS checkpoint,
    CASE WHEN $3::text IS NULL OR cp.o >= $5 THEN array(
        SELECT t.message FROM (
            SELECT message::text AS message, vec::vector({d}) <=> $7::vector({d}) AS distance,
                   version, topic, partition, "offset"
            FROM helix_vectors WHERE view = $1 AND namespace = $2 AND dims = {d}
            ORDER BY vec::vector({d}) <=> $7::vector({d}) LIMIT $6
        ) AS t ORDER BY t.distance, t.version, t.topic, t.partition, t."offset"
    ) END AS messages
FROM cp
"""

_COUNT = "SELECT count(*) FROM helix_vectors WHERE view = $1 AND namespace = $2"


class VectorExtensionMissing(HelixError):
    """The database has no pgvector `vector` extension, and helix-es may not or cannot create it."""


def _bytes(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def vector_bytes(vector: np.ndarray) -> bytes:
    """pgvector's binary form: int16 length, int16 unused, float32 big-endian (text would cost ~1 µs a float)."""
    v = np.asarray(vector, dtype=">f4")
    return struct.pack(">HH", len(v), 0) + v.tobytes()


def _encode(vector: np.ndarray | bytes) -> bytes:
    # Elements of a vector[] go as bytes: asyncpg would take an array for a nested array.
    return vector if isinstance(vector, bytes) else vector_bytes(vector)


def _decode(data: bytes) -> np.ndarray:
    (dims,) = struct.unpack_from(">H", data)
    return np.frombuffer(data, dtype=">f4", count=dims, offset=4).astype(np.float32)


async def vector_codec(conn: asyncpg.Connection) -> None:
    """Send and read `vector` as numpy arrays on `conn`, once the extension exists (else nothing yet)."""
    schema = await conn.fetchval(
        "SELECT n.nspname FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE t.typname = 'vector'"
    )
    if schema is not None:
        await conn.set_type_codec("vector", schema=schema, encoder=_encode, decoder=_decode, format="binary")


class PostgresVectorStore:
    kind = "postgres"

    def __init__(self, dsn: str, *, ef_search: int = EF_SEARCH) -> None:
        self.dsn = dsn
        self.ef_search = ef_search
        # Set per connection: a search is one statement, with no room for SET LOCAL.
        # No JIT: a search is milliseconds of work, and a large namespace's estimates cross jit_above_cost
        # (compiling a recall's plan took 0.2-0.7 s).
        settings = {"hnsw.ef_search": str(ef_search), "hnsw.iterative_scan": "strict_order", "jit": "off"}
        self.pg = Pg(dsn, settings, init=vector_codec)
        self._indexed: set[int] = set()
        self._keywords_indexed = False
        self._sizes = recall_sql.Sizes()

    async def ensure_schema(self) -> None:
        """Connect if needed and create the tables if absent; runs on first use, safe to repeat."""
        await self._pool_ready()

    async def _pool_ready(self) -> asyncpg.Pool:
        try:
            # The schema's connection was opened before the extension was there: its codec now.
            return await self.pg.pool(_SCHEMA, check=vector_codec)
        except (asyncpg.InsufficientPrivilegeError, asyncpg.UndefinedFileError, asyncpg.FeatureNotSupportedError) as e:
            raise VectorExtensionMissing(
                f"PostgreSQL at this DSN has no usable pgvector extension ({e}). Install pgvector on the server "
                "(Debian: build it as scripts/services does, or use the pgvector/pgvector image), then run "
                "CREATE EXTENSION vector; in this database as a superuser."
            ) from e

    async def ensure_index(self, dims: int, *, maintenance_work_mem: str | None = None) -> bool:
        """The HNSW index of vectors of length `dims` (none past MAX_INDEXED_DIMS); safe to repeat.

        Built CONCURRENTLY by one process (see `build_index`): False while another builds it.
        Over many rows the build is much faster while the graph fits in `maintenance_work_mem`
        (about 2.5 GB at 1M x 384): pass more than the server's default for a big build."""
        if dims in self._indexed or dims > MAX_INDEXED_DIMS:
            return True
        pool = await self._pool_ready()
        name = f"helix_vectors_hnsw_{int(dims)}"
        async with pool.acquire() as conn:
            if maintenance_work_mem is not None:
                await conn.execute("SELECT set_config('maintenance_work_mem', $1, false)", maintenance_work_mem)
            try:
                built = await build_index(
                    conn,
                    name,
                    f"SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('{name}') AND indisvalid)",
                    f"SELECT array(SELECT indexrelid::regclass::text FROM pg_index"
                    f" WHERE indexrelid = to_regclass('{name}') AND NOT indisvalid)",
                    _INDEX.format(d=int(dims)),
                )
            finally:
                if maintenance_work_mem is not None:
                    await conn.execute("RESET maintenance_work_mem")
        self._indexed.add(dims)  # built, or being built by another process: not asked again
        return built

    async def ensure_keyword_index(self) -> bool:
        """The GIN index of the keyword rows (a view with `search: hybrid` or `keyword`); safe to repeat."""
        if self._keywords_indexed:
            return True
        pool = await self._pool_ready()
        async with pool.acquire() as conn:
            built = await build_index(
                conn, recall_sql.GIN, recall_sql.GIN_VALID, recall_sql.GIN_INVALID, recall_sql.GIN_INDEX
            )
            if await conn.fetchval(recall_sql.HAS_TRGM):  # substring recall's index: only a speed-up
                built &= await build_index(
                    conn, recall_sql.TRGM, recall_sql.TRGM_VALID, recall_sql.TRGM_INVALID, recall_sql.TRGM_INDEX
                )
        self._keywords_indexed = True  # built, or being built by another process: not asked again
        return built

    async def load(
        self, view: str, topic: str, partition: int, namespaces: Sequence[str], sessions: Sequence[SessionId] = ()
    ) -> BatchState:
        pool = await self._pool_ready()
        rows = await pool.fetch(_LOAD, view, topic, partition, list(namespaces))
        checkpoint = rows[0]["checkpoint"] if rows else await pool.fetchval(_CHECKPOINT, view, topic, partition)
        tails: dict[SessionId, Tail] = {}
        if sessions:
            found = await pool.fetch(_TAILS, view, topic, partition, [s[0] for s in sessions], [s[1] for s in sessions])
            tails = {(r["namespace"], r["session_id"]): Tail(r["upto"], tuple(r["offsets"])) for r in found}
        cleared = {r["namespace"]: r["cleared_at"] for r in rows if r["cleared_at"] is not None}
        return BatchState(checkpoint, cleared, tails)

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
        for ns, _session in [*write.erased, *write.tails]:
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
        if len(write.entries):
            await self.ensure_index(write.vectors.shape[1])
            if write.keywords is not None:
                await self.ensure_keyword_index()
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
                    [vector_bytes(write.vectors[i]) for i in groups[ns]],
                    [e.occurred_at for e in rows],
                    None if write.keywords is None else [write.keywords[i] for i in groups[ns]],
                )
                erased = [(session, at) for (erased_ns, session), at in write.erased.items() if erased_ns == ns]
                if erased:
                    upto = [at for _, at in erased]
                    where = ([a.topic for a in upto], [a.partition for a in upto], [a.offset for a in upto])
                    await conn.execute(_ERASE, view, ns, [session for session, _ in erased], *where)
                await self._follow(conn, view, ns, write)
            await conn.execute(_KEEP, *keep)

    @staticmethod
    async def _follow(conn: asyncpg.Connection, view: str, ns: str, write: Write) -> None:
        """The namespace's part of the tails and retractions of `write`."""
        tails = [(sid, t) for (n, sid), t in write.tails.items() if n == ns]
        if tails:
            await conn.execute(
                _TAILS_WRITE,
                view,
                ns,
                write.topic,
                write.partition,
                [sid for sid, _ in tails],
                [t.upto for _, t in tails],
                ["{" + ",".join(map(str, t.offsets)) + "}" for _, t in tails],
            )
        gone = [p.offset for n, p in write.retracted if n == ns]
        if gone:
            await conn.execute(_RETRACT, view, ns, write.topic, write.partition, gone)

    async def checkpoint(self, view: str, topic: str, partition: int) -> int | None:
        pool = await self._pool_ready()
        offset: int | None = await pool.fetchval(_CHECKPOINT, view, topic, partition)
        return offset

    async def search(
        self, view: str, namespace: str, query: np.ndarray, k: int, want: Position | None
    ) -> list[Message] | None:
        pool = await self._pool_ready()
        where = (want.topic, want.partition, want.offset) if want is not None else (None, None, None)
        limit = k if k > 0 and query.any() else 0  # a zero query has no cosine: nothing is near it
        row = await pool.fetchrow(_SEARCH.format(d=len(query)), view, namespace, *where, limit, query)
        if row["messages"] is None:
            return None
        return [Message.from_json(m) for m in row["messages"]]

    async def rank(self, view: str, namespace: str, ask: RankAsk, want: Position | None) -> Ranking | None:
        return await recall_sql.rank(await self._pool_ready(), view, namespace, ask, want, decode_json, self._sizes)

    async def count(self, view: str, namespace: str) -> int:
        pool = await self._pool_ready()
        n: int = await pool.fetchval(_COUNT, view, namespace)
        return n

    async def drop(self, view: str, namespaces: Collection[str], topics: Collection[str]) -> None:
        async with transaction(self.dsn) as conn:
            for table in ("helix_vectors", "helix_vector_namespaces", "helix_vector_tails", "helix_vector_terms"):
                await delete_rows(conn, table, "view = $1 AND namespace = ANY($2::text[])", view, list(namespaces))
            await drop_checkpoints(conn, view, topics)

    async def close(self) -> None:
        await self.pg.close()
