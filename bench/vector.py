"""Vector search speed: top-5 over 100_000 x 384-dim vectors, next to a raw numpy anchor from the same run.

    python bench/vector.py [--n 100000] [--dims 384] [--queries 300] [--postgres] [--json]

Target: p50 <= 15 ms per `search` through the projection (hash-embed the query, read-your-writes
check, brute-force top-k, messages back). The anchor is the least any brute-force search can do:
one `matrix @ q` and an `argpartition` on a plain contiguous matrix of the same vectors.
`--postgres` also times the Postgres store (needs HELIX_POSTGRES_DSN): one refresh round trip
per search, then the same numpy scan over its in-process cache; its rows are deleted afterwards.

The vectors are random unit vectors written straight into the store (embedding 100k texts would
time the embedder, not the search). numpy's matrix-vector product runs in OpenBLAS: where
OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE are set (see the machine notes) it may pick a slower kernel,
so compare with both unset in that command alone:

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python bench/vector.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from helix_es import Message
from helix_es.model import names
from helix_es.model.events import Position
from helix_es.projection.vector import VectorProjection
from helix_es.providers.embed import HashEmbedder
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.stores.ports import Entry, SessionKey, VectorStore, Write

TARGET_MS = 15.0
T0 = datetime(2030, 1, 1, tzinfo=UTC)
WORDS = ["flight", "hotel", "invoice", "cat", "tea", "meeting", "passport", "train", "budget", "dentist"]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def blas() -> dict[str, Any]:
    info: dict[str, Any] = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        info["threadpoolctl"] = "not installed (pip install threadpoolctl to see the kernel)"
        return info
    for pool in threadpool_info():
        if pool.get("user_api") == "blas":
            info.update(kernel=pool.get("architecture"), threads=pool.get("num_threads"), blas=pool.get("version"))
    return info


def query(i: int) -> str:
    return f"where is the {WORDS[i % len(WORDS)]} note from trip {i}"


async def fill(store: VectorStore, view: str, ns: str, matrix: np.ndarray, chunk: int) -> float:
    topic = names.topic(ns)
    t = time.perf_counter()
    for start in range(0, len(matrix), chunk):
        rows = range(start, min(start + chunk, len(matrix)))
        entries = [
            Entry(
                ns,
                f"s{i % 50}",
                Position(topic, 0, i),
                T0 + timedelta(microseconds=i),
                f"{i:064x}",
                Message("user", f"message {i} about the {WORDS[i % len(WORDS)]}"),
            )
            for i in rows
        ]
        await store.write(
            view, "bench/random", Write(topic, 0, rows[-1], entries, matrix[start : rows[-1] + 1], {}, {})
        )
    return time.perf_counter() - t


async def measure(
    store: VectorStore, view: str, ns: str, matrix: np.ndarray, queries: int, warmup: int = 20
) -> dict[str, float]:
    """Interleaved, query by query: the anchor, the store's top-k, and the projection's whole search.

    Interleaving puts the three under the same load (other processes, caches) at each moment.
    """
    n, dims = matrix.shape
    projection = VectorProjection(view, HashEmbedder(dims), store, top_k=5)
    key = SessionKey(ns, "s0")
    want = Position(names.topic(ns), 0, n - 1)  # a reader that just wrote the last entry
    vectors = HashEmbedder(dims).embed_sync([query(i) for i in range(queries + warmup)])
    plain = np.ascontiguousarray(matrix)
    times: dict[str, list[float]] = {"anchor": [], "topk": [], "search": []}
    for i in range(queries + warmup):
        t0 = time.perf_counter()
        scores = plain @ vectors[i]
        best = np.argpartition(scores, -5)[-5:]
        best[np.argsort(-scores[best])]
        t1 = time.perf_counter()
        hits = await store.search(view, ns, vectors[i], 5, None)
        t2 = time.perf_counter()
        found = await projection.search(key, query(i), 5, want)  # a new text each time: no query cache
        t3 = time.perf_counter()
        assert hits is not None and found is not None and len(hits) == len(found) == 5
        if i >= warmup:
            for name, took in (("anchor", t1 - t0), ("topk", t2 - t1), ("search", t3 - t2)):
                times[name].append(took)
    quantiles = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
    return {f"{name}_{q}": pct(samples, p) for name, samples in times.items() for q, p in quantiles}


async def main(n: int, dims: int, queries: int, postgres: bool) -> dict[str, Any]:
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((n, dims), dtype=np.float32)
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    result: dict[str, Any] = {"n": n, "dims": dims, "queries": queries, **blas()}

    memory = MemoryVectorStore(cap=max(n, 1))
    result["memory_fill_s"] = await fill(memory, "bench", ns, matrix, 10_000)
    result.update({f"memory_{k}": v for k, v in (await measure(memory, "bench", ns, matrix, queries)).items()})
    del memory

    if postgres:
        from helix_es.stores.postgres.vector import PostgresVectorStore

        dsn = os.environ.get("HELIX_POSTGRES_DSN", "postgresql://helix:helix@127.0.0.1:5432/helix")
        store = PostgresVectorStore(dsn)
        view = f"bench-vector-{uuid.uuid4().hex[:8]}"
        try:
            result["postgres_fill_s"] = await fill(store, view, ns, matrix, 5_000)
            t = time.perf_counter()
            await store.search(view, ns, matrix[0], 5, None)  # a new reader loads the namespace once
            result["postgres_first_load_s"] = time.perf_counter() - t
            result.update({f"postgres_{k}": v for k, v in (await measure(store, view, ns, matrix, queries)).items()})
        finally:
            pool = await store._pool_ready()
            for table in ("helix_vectors", "helix_vector_namespaces", "helix_checkpoints"):
                await pool.execute(f"DELETE FROM {table} WHERE view = $1", view)
            await store.close()
    return result


def report(r: dict[str, Any]) -> None:
    print(
        f"top-5 over {r['n']:,} x {r['dims']} float32, {r['queries']} queries; "
        f"OPENBLAS_CORETYPE={r['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={r['OPENBLAS_L2_SIZE']} "
        f"kernel={r.get('kernel', r.get('threadpoolctl'))} threads={r.get('threads')}"
    )
    print(f"{'what':62} {'p50 ms':>7} {'p99 ms':>7}")
    rows = [
        ("raw numpy anchor: matrix @ q + argpartition", "memory_anchor"),
        ("memory store: top-k of an embedded query", "memory_topk"),
        ("memory: projection.search (embed + read-your-writes + top-k)", "memory_search"),
        ("raw numpy anchor, interleaved with the postgres run", "postgres_anchor"),
        ("postgres store: refresh round trip + top-k", "postgres_topk"),
        ("postgres: projection.search", "postgres_search"),
    ]
    for label, key in rows:
        if f"{key}_p50" in r:
            print(f"{label:62} {r[key + '_p50']:7.2f} {r[key + '_p99']:7.2f}")
    for key in ("memory_fill_s", "postgres_fill_s", "postgres_first_load_s"):
        if key in r:
            print(f"{key}: {r[key]:.2f} s")
    worst = max(r[k] for k in ("memory_search_p50", "postgres_search_p50") if k in r)
    print(f"target: search p50 <= {TARGET_MS} ms: {'met' if worst <= TARGET_MS else 'NOT met'} ({worst:.2f} ms)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--dims", type=int, default=384)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--postgres", action="store_true", help="also time the Postgres store")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = asyncio.run(main(args.n, args.dims, args.queries, args.postgres))
    print(json.dumps(out)) if args.json else report(out)
