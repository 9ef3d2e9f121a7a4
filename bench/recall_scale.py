"""Recall at scale: ingest and query latency of every `search:` mode at 100,000 messages in one namespace.

    python bench/recall_scale.py [--n 100000] [--queries 200] [--postgres] [--no-memory] [--json]

Targets (same run): recall p95 <= 50 ms at 100K messages (hash embedder) through the projection
(embed the query, read-your-writes check, rank, fuse, hits back) on the memory and PostgreSQL
stores; hybrid ingest (vectors and a keyword index) >= 0.8x vector-only ingest on the same store.

The messages are the committed eval's turns (bench/recall_eval), cycled with a number appended so
no two are equal, spread over 200 sessions; the queries are the eval's questions. Messages go in
through `VectorProjection.apply` in batches of 1,000 events, as a projector folds them. Anchors,
interleaved query by query: exact dense top-10 (`matrix @ q` and an argpartition over the same
vectors) and, when `bm25s` is installed, its BM25 top-10 over the same texts.
`--postgres` uses HELIX_POSTGRES_DSN (views of their own, dropped afterwards).
"""

from __future__ import annotations

import json
import os
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
from cli import missed, parser, run  # bench/, this script's directory

from helix_es import Message
from helix_es.model import names
from helix_es.model.events import Event, MessageAdded, Position, Record
from helix_es.model.recall import make_recall
from helix_es.projection.vector import VectorProjection
from helix_es.providers.embed import HashEmbedder
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.stores.ports import SessionKey
from helix_es.stores.ports.vector import VectorStore

EVAL = Path(__file__).resolve().parent / "recall_eval"
TARGET_MS = 50.0
TARGET_INGEST = 0.8
MODES = ("hybrid", "vector", "keyword", "substring")
T0 = datetime(2030, 1, 1, tzinfo=UTC)
DIMS = 256
BATCH = 1000


def corpus(n: int) -> tuple[list[tuple[str, str]], list[str]]:
    """`n` (speaker, text) turns and the eval's questions."""
    turns = []
    for line in (EVAL / "dialogues.jsonl").read_text().splitlines():
        for session in json.loads(line)["sessions"]:
            turns += [(t["speaker"], t["text"]) for t in session["turns"]]
    questions = [json.loads(line)["question"] for line in (EVAL / "questions.jsonl").read_text().splitlines()]
    return [(turns[i % len(turns)][0], f"{turns[i % len(turns)][1]} ({i})") for i in range(n)], questions


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def ingest(views: list[VectorProjection], ns: str, turns: list[tuple[str, str]]) -> list[float]:
    """Messages per second through each projection's `apply`, one partition, batches of BATCH, the
    views taking turns batch by batch (so both see the same load and the same table sizes)."""
    topic = names.topic(ns)
    took = [0.0] * len(views)
    for start in range(0, len(turns), BATCH):
        records = [
            Record(
                Event(
                    ns,
                    f"s{i % 200}",
                    MessageAdded(Message("user", text, name=who)),
                    timestamp=T0 + timedelta(seconds=i),
                ),
                Position(topic, 0, i),
            )
            for i, (who, text) in enumerate(turns[start : start + BATCH], start)
        ]
        for v, p in enumerate(views):
            t = time.perf_counter()
            await p.apply(records)
            took[v] += time.perf_counter() - t
    return [len(turns) / t for t in took]


def anchors(turns: list[tuple[str, str]]) -> tuple[np.ndarray, Any]:
    matrix = HashEmbedder(DIMS).embed_sync([f"{who}: {text}" for who, text in turns])
    try:
        import bm25s
    except ImportError:
        return matrix, None
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize([f"{who}: {text}" for who, text in turns], stopwords="en", show_progress=False),
        show_progress=False,
    )
    return matrix, retriever


async def measure(store: VectorStore, n: int, queries: int) -> dict[str, Any]:
    turns, questions = corpus(n)
    ns = f"bench-recall-{uuid.uuid4().hex[:8]}"
    out: dict[str, Any] = {}
    plain = VectorProjection(f"vector-bench-{uuid.uuid4().hex[:6]}", HashEmbedder(DIMS), store)
    hybrid = VectorProjection(f"vector-bench-{uuid.uuid4().hex[:6]}", HashEmbedder(DIMS), store, search="hybrid")
    try:
        out["ingest_vector_per_s"], out["ingest_hybrid_per_s"] = await ingest([plain, hybrid], ns, turns)
        out["ingest_ratio"] = out["ingest_hybrid_per_s"] / out["ingest_vector_per_s"]
        matrix, bm25 = anchors(turns)
        key = SessionKey(ns, "s0")
        want = Position(names.topic(ns), 0, n - 1)  # a reader that just wrote the last message
        times: dict[str, list[float]] = {m: [] for m in (*MODES, "exact", "bm25s")}
        embedder = HashEmbedder(DIMS)
        for i in range(queries + 10):
            question = f"{questions[i % len(questions)]} {i}"  # a new text each time: no query cache
            t = time.perf_counter()
            q = embedder.embed_sync([question])[0]
            scores = matrix @ q
            best = np.argpartition(scores, -10)[-10:]
            best[np.argsort(-scores[best])]
            exact = time.perf_counter() - t
            if bm25 is not None:
                import bm25s

                t = time.perf_counter()
                bm25.retrieve(
                    bm25s.tokenize([question], stopwords="en", show_progress=False), k=10, show_progress=False
                )
                times["bm25s"].append(time.perf_counter() - t) if i >= 10 else None
            for mode in MODES:
                ask = make_recall(question.split()[0] if mode == "substring" else question, 10, mode=mode)
                t = time.perf_counter()
                hits = await hybrid.recall(key, ask, want)
                took = time.perf_counter() - t
                assert hits is not None
                if i >= 10:
                    times[mode].append(took)
            if i >= 10:
                times["exact"].append(exact)
        for name, samples in times.items():
            if samples:
                out[f"{name}_p50_ms"] = pct(samples, 0.5)
                out[f"{name}_p95_ms"] = pct(samples, 0.95)
    finally:
        for p in (plain, hybrid):
            await p.drop([ns], [names.topic(ns)])
    return out


async def main(args: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"n": args.n, "queries": args.queries, "dims": DIMS}
    if not args.no_memory:
        result["memory"] = await measure(MemoryVectorStore(cap=max(args.n * 2, 100_000)), args.n, args.queries)
    if args.postgres:
        from helix_es.stores.postgres.vector import PostgresVectorStore

        store = PostgresVectorStore(os.environ["HELIX_POSTGRES_DSN"])
        try:
            result["postgres"] = await measure(store, args.n, args.queries)
        finally:
            await store.close()
    return result


def targets(r: dict[str, Any]) -> list[tuple[str, bool]]:
    out = []
    for store in ("memory", "postgres"):
        if store in r:
            s = r[store]
            for mode in MODES:
                out.append(
                    (
                        f"{store} {mode} p95 {s[f'{mode}_p95_ms']:.1f} ms <= {TARGET_MS} ms",
                        s[f"{mode}_p95_ms"] <= TARGET_MS,
                    )
                )
            out.append(
                (
                    f"{store} hybrid ingest {s['ingest_ratio']:.2f}x vector-only >= {TARGET_INGEST}x",
                    s["ingest_ratio"] >= TARGET_INGEST,
                )
            )
    return out


def report(r: dict[str, Any]) -> None:
    print(f"recall at {r['n']:,} messages, one namespace, hash embedder ({r['dims']} dims), {r['queries']} queries")
    for store in ("memory", "postgres"):
        if store not in r:
            continue
        s = r[store]
        print(
            f"\n{store}: ingest vector-only {s['ingest_vector_per_s']:,.0f}/s, hybrid {s['ingest_hybrid_per_s']:,.0f}/s"
            f" ({s['ingest_ratio']:.2f}x)"
        )
        print(f"  {'mode':<12}{'p50 ms':>9}{'p95 ms':>9}")
        for name in (*MODES, "exact", "bm25s"):
            if f"{name}_p50_ms" in s:
                label = {"exact": "anchor: exact dense", "bm25s": "anchor: bm25s"}.get(name, name)
                print(f"  {label:<22}{s[f'{name}_p50_ms']:>9.1f}{s[f'{name}_p95_ms']:>9.1f}")


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=200)
    p.add_argument("--postgres", action="store_true", help="also the PostgreSQL store (HELIX_POSTGRES_DSN)")
    p.add_argument("--no-memory", action="store_true", help="skip the memory store")
    done = run(p, main)
    if done is not None:
        args, result = done
        report(result)
        raise SystemExit(missed(line for line, ok in targets(result) if not ok))
