"""pgvector under the PostgreSQL vector store: the HNSW plan, exactness, the migration, a missing extension.

Each test gets a database of its own (from template1, which scripts/services gives the vector
extension; template0 for the one that must lack it), so the planner sees only its rows.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import numpy as np
import pytest

from helix_es import Message
from helix_es.model import names
from helix_es.model.events import Position
from helix_es.stores.ports.vector import Entry, Write
from helix_es.stores.postgres.vector import _SEARCH, PostgresVectorStore, VectorExtensionMissing, vector_codec
from tests.conftest import unique
from tests.contracts.vector_store import T0

DIMS = 32


def _with_db(dsn: str, db: str) -> str:
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path=f"/{db}"))


@asynccontextmanager
async def database(dsn: str, template: str = "template1") -> AsyncIterator[str]:
    db = unique("helix_t").replace("-", "_")
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{db}" TEMPLATE {template}')
        try:
            yield _with_db(dsn, db)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    finally:
        await admin.close()


CENTERS = np.random.default_rng(0).standard_normal((20, DIMS))


def vectors(n: int, seed: int = 7) -> np.ndarray:
    """Unit vectors around shared centres: texts' embeddings are not uniform, and queries look like them."""
    rng = np.random.default_rng(seed)
    m = CENTERS[rng.integers(0, 20, n)] + 0.5 * rng.standard_normal((n, DIMS))
    return (m / np.linalg.norm(m, axis=1, keepdims=True)).astype(np.float32)


async def fill(store: PostgresVectorStore, view: str, ns: str, matrix: np.ndarray) -> None:
    topic = names.topic(ns)
    for start in range(0, len(matrix), 1000):
        idx = range(start, min(start + 1000, len(matrix)))
        entries = [
            Entry(ns, "s", Position(topic, 0, i), T0 + timedelta(microseconds=i), f"{i:064x}", Message("user", str(i)))
            for i in idx
        ]
        await store.write(view, "m", Write(topic, 0, idx[-1], entries, matrix[idx.start : idx.stop], {}, {}))


def exact(matrix: np.ndarray, q: np.ndarray, k: int) -> list[str]:
    return [str(i) for i in np.argsort(-(matrix @ q), kind="stable")[:k]]


async def plan(dsn: str, view: str, ns: str, q: np.ndarray, k: int) -> str:
    conn = await asyncpg.connect(dsn)
    try:
        await vector_codec(conn)
        await conn.execute("ANALYZE helix_vectors")
        rows = await conn.fetch("EXPLAIN " + _SEARCH.format(d=DIMS), view, ns, None, None, None, k, q)
        return "\n".join(r[0] for r in rows)
    finally:
        await conn.close()


async def test_a_large_namespace_is_searched_through_the_hnsw_index(postgres_dsn: str) -> None:
    async with database(postgres_dsn) as dsn:
        store = PostgresVectorStore(dsn)
        try:
            view, ns, small = unique("vector-test"), unique("vec"), unique("vec")
            big = vectors(4000)
            await fill(store, view, ns, big)
            few = vectors(30, seed=8)
            await fill(store, view, small, few)
            queries = vectors(20, seed=9)
            assert "helix_vectors_hnsw_32" in await plan(dsn, view, ns, queries[0], 10)
            found = 0
            for q in queries:
                got = await store.search(view, ns, q, 10, None)
                assert got is not None and len(got) == 10
                found += len({m.content for m in got} & set(exact(big, q, 10)))
            assert found / (10 * len(queries)) >= 0.95
            # A namespace that is a sliver of the rows: the primary key and an exact sort, exact results.
            assert "helix_vectors_hnsw_32" not in await plan(dsn, view, small, queries[0], 5)
            for q in queries[:5]:
                got = await store.search(view, small, q, 5, None)
                assert got is not None and [m.content for m in got] == exact(few, q, 5)
        finally:
            await store.close()


# What helix_vectors looked like before pgvector: the vectors as float32 little-endian bytes.
_OLD = """
CREATE TABLE helix_vectors (
    view text NOT NULL, namespace text NOT NULL, topic text NOT NULL, partition int NOT NULL,
    "offset" bigint NOT NULL, session_id text NOT NULL, event_time timestamptz NOT NULL,
    content_sha256 text NOT NULL, message jsonb NOT NULL, embedding bytea NOT NULL, version bigint NOT NULL,
    PRIMARY KEY (view, namespace, topic, partition, "offset")
);
"""


async def test_rows_written_before_pgvector_are_migrated_exactly(postgres_dsn: str) -> None:
    async with database(postgres_dsn) as dsn:
        view, ns = unique("vector-test"), unique("vec")
        old = vectors(50)
        old[0, :3] = [1e-40, -0.0, 3.4e38]  # a subnormal, a negative zero, a huge one: every branch of the decode
        # (in a view of its own: it is no unit vector)
        conn = await asyncpg.connect(dsn)
        try:
            await conn.execute(_OLD)
            await conn.executemany(
                "INSERT INTO helix_vectors VALUES ($1, $2, $3, 0, $4, 's', $5, $6, $7::jsonb, $8, 1)",
                [
                    (
                        view if i else "odd",
                        ns,
                        names.topic(ns),
                        i,
                        T0,
                        f"{i:064x}",
                        Message("user", str(i)).to_json(),
                        v.tobytes(),
                    )
                    for i, v in enumerate(old.astype("<f4"))
                ],
            )
            await conn.execute(
                'CREATE TABLE helix_checkpoints (view text, topic text, partition int, "offset" bigint, '
                "PRIMARY KEY (view, topic, partition))"
            )
            store = PostgresVectorStore(dsn)
            try:
                await store.ensure_schema()
                texts = await conn.fetch('SELECT vec::text AS v FROM helix_vectors ORDER BY "offset"')
                back = np.array([[float(x) for x in r["v"].strip("[]").split(",")] for r in texts], np.float32)
                assert np.array_equal(back, old)  # bit for bit, -0.0 aside (equal as floats)
                await store.ensure_index(DIMS)
                q = vectors(1, seed=3)[0]
                got = await store.search(view, ns, q, 3, None)
                assert got is not None and [m.content for m in got] == [str(int(i) + 1) for i in exact(old[1:], q, 3)]
            finally:
                await store.close()
        finally:
            await conn.close()


async def test_a_database_without_pgvector_gets_a_typed_error(postgres_dsn: str) -> None:
    conn = await asyncpg.connect(postgres_dsn)
    try:
        superuser = await conn.fetchval("SELECT rolsuper FROM pg_roles WHERE rolname = current_user")
    finally:
        await conn.close()
    async with database(postgres_dsn, template="template0") as dsn:
        store = PostgresVectorStore(dsn)
        try:
            if superuser:  # a superuser (the docker images' helix) makes the extension itself
                await store.ensure_schema()
                return
            with pytest.raises(VectorExtensionMissing, match="CREATE EXTENSION vector"):
                await store.ensure_schema()
        finally:
            await store.close()
