"""Hybrid recall on the long-conversation eval: which turns answer a question, ranked how well.

    python bench/recall.py [--k1 1.2] [--b 0.5] [--depth 50] [--no-minilm] [--no-micro] [--no-product]
                           [--postgres] [--json]
    python bench/recall.py --scale [--n 100000] [--queries 200] [--postgres]   # bench/recall_scale.py

For each of bench/recall_eval's questions, every turn of its dialogue is a candidate; a row's
recall@k is the share of the question's evidence turns in its top k (averaged over questions),
MRR the mean of 1/rank of the first evidence turn; ms is the time of one query (the question's
vector is embedded once, before timing: the rows time search, not the embedder). Rows:

- anchors: `bm25s` (the bm25s package, English stopwords, no stemmer, zero scores dropped),
  `dense` (exact cosine over all-MiniLM-L6-v2 vectors of the turn text), `rrf` (reciprocal rank
  fusion, k=60, of both);
- ours: `keyword` (helix_es.views.keywords.KeywordIndex over the index text of each turn),
  `hybrid/hash` and `hybrid/minilm` (helix_es.views.fusion.fuse of the keyword ranking and the
  dense ranking of the index text, with fuse's defaults: RRF k=2, equal weights, and the recency
  prior on questions about the present).

The index text of a turn is its text alone (`index_text`). MiniLM vectors are cached in the
temporary directory, keyed by the texts' SHA-256, so a rerun embeds nothing. `evaluate(name,
rank_fn)` takes any function from a question to turn ids: the `product/<mode>/<embedder>` rows
go through the product (bench/recall_product.py: each dialogue added to a namespace on the
embedded log, each question asked with `Memory.recall` in each `search:` mode; `--postgres` adds
them on the PostgreSQL store). `--micro` (on by default) times
KeywordIndex at 100K documents: add throughput, and query p50/p95 for a 10-term query.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from helix_es.providers.embed import HashEmbedder
from helix_es.views.fusion import Ranked, fuse, recency_for
from helix_es.views.keywords import K1, B, KeywordIndex

EVAL = Path(__file__).resolve().parent / "recall_eval"
CACHE = Path(tempfile.gettempdir()) / "helix_recall_cache"
KINDS = ("single-fact", "changed", "temporal", "multi-hop")

# The fusion this bench measures as `hybrid`: fuse's defaults, equal weights, and the recency
# prior for questions about the present (recency_for).
WEIGHTS = {"keyword": 1.0, "vector": 1.0}


@dataclass(frozen=True)
class Turn:
    id: str
    row: int  # its place in its dialogue, in the order said
    speaker: str
    text: str
    prev: str  # the index text of the previous turn of its session, "" for its first
    time_us: int


@dataclass
class Dialogue:
    name: str
    turns: list[Turn]


def load() -> tuple[dict[str, Dialogue], list[dict[str, Any]]]:
    dialogues: dict[str, Dialogue] = {}
    for line in (EVAL / "dialogues.jsonl").read_text().splitlines():
        raw = json.loads(line)
        turns: list[Turn] = []
        for session in raw["sessions"]:
            start = datetime.fromisoformat(session["date"])
            prev = ""
            for i, t in enumerate(session["turns"]):
                at = int(start.timestamp() * 1e6) + i * 60_000_000  # a minute a turn
                turns.append(Turn(t["id"], len(turns), t["speaker"], t["text"], prev, at))
                prev = f"{t['speaker']}: {t['text']}"
        dialogues[raw["dialogue"]] = Dialogue(raw["dialogue"], turns)
    questions = [json.loads(line) for line in (EVAL / "questions.jsonl").read_text().splitlines()]
    return dialogues, questions


def index_text(turn: Turn, *, name: bool = False, context: bool = False) -> str:
    """What a message is indexed under: its text (bench/recall_ideas.py measures the speaker's name
    before it, and the session's previous turn before that: both ranked worse in the hybrid)."""
    own = f"{turn.speaker}: {turn.text}" if name else turn.text
    return f"{turn.prev}\n{own}" if context and turn.prev else own


# --- embeddings, cached ---------------------------------------------------------------------------

_minilm: Any = None


def embed(model: str, texts: Sequence[str]) -> np.ndarray:
    """Unit vectors of `texts` by `model` ("minilm" or "hash"), from the cache when it has them."""
    global _minilm
    key = hashlib.sha256(json.dumps(list(texts)).encode()).hexdigest()[:16]
    path = CACHE / f"{model}-{key}.npy"
    if path.exists():
        return np.load(path)
    if model == "hash":
        out = HashEmbedder(384).embed_sync(texts)
    else:
        if _minilm is None:
            from helix_es.providers.minilm import MiniLM

            _minilm = MiniLM()
        out = np.concatenate([_minilm.encode(list(texts[i : i + 64])) for i in range(0, len(texts), 64)])
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, out)
    return out


class Dense:
    """Exact cosine search per dialogue over one model's vectors of the turns' texts."""

    def __init__(self, model: str, dialogues: dict[str, Dialogue], questions: list[dict[str, Any]], text: Any):
        order = [(d, t) for d in dialogues.values() for t in d.turns]
        vectors = embed(model, [text(t) for _, t in order])
        self.matrix: dict[str, np.ndarray] = {}
        at = 0
        for d in dialogues.values():
            self.matrix[d.name] = vectors[at : at + len(d.turns)]
            at += len(d.turns)
        asked = embed(model, [q["question"] for q in questions])
        self.query = dict(zip((q["id"] for q in questions), asked, strict=True))

    def rank(self, q: dict[str, Any], depth: int) -> Ranked:
        sims = self.matrix[q["dialogue"]] @ self.query[q["id"]]
        top = np.argsort(-sims, kind="stable")[:depth]
        return Ranked("vector", top.astype(np.int64), sims[top])


class Keywords:
    """One KeywordIndex per dialogue, over each turn's index text; ids are the turns' rows."""

    def __init__(self, dialogues: dict[str, Dialogue], text: Any, k1: float, b: float, query: Any = None):
        self.index: dict[str, KeywordIndex] = {}
        self.query = query or (lambda s: s)
        for d in dialogues.values():
            self.index[d.name] = ix = KeywordIndex(k1, b)
            ix.add([t.row for t in d.turns], [text(t) for t in d.turns])

    def rank(self, q: dict[str, Any], depth: int) -> Ranked:
        ids, scores = self.index[q["dialogue"]].top(self.query(q["question"]), depth)
        return Ranked("keyword", ids, scores)


# --- evaluation -----------------------------------------------------------------------------------


@dataclass
class Row:
    name: str
    figures: dict[str, dict[str, float]]  # "all" and each kind -> r@5, r@10, mrr, p50, p95


def evaluate(name: str, rank_fn: Callable[[dict[str, Any]], Sequence[str]], questions: list[dict[str, Any]]) -> Row:
    """Score `rank_fn` (question -> turn ids, best first) over `questions`."""
    per: dict[str, list[tuple[float, float, float, float]]] = {}
    for q in questions:
        started = time.perf_counter()
        ranked = list(rank_fn(q))
        ms = (time.perf_counter() - started) * 1000
        evidence = set(q["evidence"])
        r5 = len(evidence & set(ranked[:5])) / len(evidence)
        r10 = len(evidence & set(ranked[:10])) / len(evidence)
        rr = next((1 / i for i, t in enumerate(ranked, 1) if t in evidence), 0.0)
        for key in ("all", q["kind"]):
            per.setdefault(key, []).append((r5, r10, rr, ms))
    figures = {}
    for key, rows in per.items():
        ms = sorted(r[3] for r in rows)
        figures[key] = {
            "n": len(rows),
            "r@5": statistics.fmean(r[0] for r in rows),
            "r@10": statistics.fmean(r[1] for r in rows),
            "mrr": statistics.fmean(r[2] for r in rows),
            "p50_ms": ms[len(ms) // 2],
            "p95_ms": ms[min(len(ms) - 1, int(len(ms) * 0.95))],
        }
    return Row(name, figures)


def turn_ids(dialogues: dict[str, Dialogue], q: dict[str, Any], rows: Sequence[int]) -> list[str]:
    turns = dialogues[q["dialogue"]].turns
    return [turns[int(r)].id for r in rows]


def rrf(lists: Sequence[Sequence[int]], k: float = 60.0) -> list[int]:
    score: dict[int, float] = {}
    for ids in lists:
        for rank, i in enumerate(ids, 1):
            score[i] = score.get(i, 0.0) + 1 / (k + rank)
    return sorted(score, key=lambda i: -score[i])


def bm25s_anchor(dialogues: dict[str, Dialogue]) -> Callable[[dict[str, Any], int], list[int]] | None:
    try:
        import bm25s
    except ImportError:
        return None
    models = {}
    for d in dialogues.values():
        model = bm25s.BM25()
        model.index(bm25s.tokenize([t.text for t in d.turns], stopwords="en", show_progress=False), show_progress=False)
        models[d.name] = model

    def rank(q: dict[str, Any], depth: int) -> list[int]:
        model = models[q["dialogue"]]
        tokens = bm25s.tokenize([q["question"]], stopwords="en", show_progress=False)
        docs, scores = model.retrieve(tokens, k=min(depth, len(dialogues[q["dialogue"]].turns)), show_progress=False)
        return [int(d) for d, s in zip(docs[0], scores[0], strict=True) if s > 0]  # no zero-score tail

    return rank


def hybrid(keywords: Keywords, dense: Dense, dialogues: dict[str, Dialogue], depth: int, **options: Any) -> Any:
    def rank(q: dict[str, Any]) -> list[str]:
        lists = [keywords.rank(q, depth), dense.rank(q, depth)]
        turns = dialogues[q["dialogue"]].turns
        times = {int(i): turns[int(i)].time_us for r in lists for i in r.ids}
        weights = options.get("weights", WEIGHTS)
        fused = fuse(lists, weights, times=times, limit=depth, **_fuse_options(options, q["question"]))
        return turn_ids(dialogues, q, [f.id for f in fused])

    return rank


def _fuse_options(options: dict[str, Any], question: str) -> dict[str, Any]:
    recency = options.get("recency", recency_for(question))
    return {"recency": recency, **{k: options[k] for k in ("method", "k") if k in options}}


def rows(args: argparse.Namespace) -> list[Row]:
    dialogues, questions = load()
    depth = args.depth
    out: list[Row] = []
    plain = Dense("minilm", dialogues, questions, index_text) if args.minilm else None
    anchor = bm25s_anchor(dialogues)
    if anchor is not None:
        out.append(evaluate("bm25s", lambda q: turn_ids(dialogues, q, anchor(q, depth)), questions))
    if plain is not None:
        out.append(evaluate("dense", lambda q: turn_ids(dialogues, q, plain.rank(q, depth).ids), questions))
    if anchor is not None and plain is not None:
        both = lambda q: turn_ids(dialogues, q, rrf([anchor(q, depth), plain.rank(q, depth).ids.tolist()]))  # noqa: E731
        out.append(evaluate("rrf", both, questions))
    keywords = Keywords(dialogues, index_text, args.k1, args.b)
    out.append(evaluate("keyword", lambda q: turn_ids(dialogues, q, keywords.rank(q, depth).ids), questions))
    hashed = Dense("hash", dialogues, questions, index_text)
    out.append(evaluate("dense/hash", lambda q: turn_ids(dialogues, q, hashed.rank(q, depth).ids), questions))
    out.append(evaluate("hybrid/hash", hybrid(keywords, hashed, dialogues, depth), questions))
    if plain is not None:  # the dense anchor's vectors are those of the index text
        out.append(evaluate("hybrid/minilm", hybrid(keywords, plain, dialogues, depth), questions))
    return out


def micro(n: int = 100_000, seed: int = 7) -> dict[str, float]:
    """KeywordIndex at `n` documents of ~20 words from a Zipf vocabulary: add and query speed."""
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}x" for i in range(30_000)]
    ranks = np.minimum(rng.zipf(1.2, size=(n, 20)) - 1, len(vocab) - 1)
    texts = [" ".join(vocab[r] for r in row) for row in ranks.tolist()]
    index = KeywordIndex()
    started = time.perf_counter()
    for i in range(0, n, 1000):
        index.add(range(i, min(n, i + 1000)), texts[i : i + 1000])
    add_s = time.perf_counter() - started
    queries = [" ".join(vocab[r] for r in rng.integers(0, 2000, 10)) for _ in range(300)]
    allowed = np.sort(rng.choice(n, n // 10, replace=False)).astype(np.int64)
    times, scoped = [], []
    for query in queries:
        started = time.perf_counter()
        index.top(query, 10)
        times.append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        index.top(query, 10, allowed)
        scoped.append((time.perf_counter() - started) * 1000)
    times.sort()
    scoped.sort()
    return {
        "docs": n,
        "add_docs_per_s": n / add_s,
        "query_p50_ms": times[len(times) // 2],
        "query_p95_ms": times[int(len(times) * 0.95)],
        "allowed_p50_ms": scoped[len(scoped) // 2],
        "allowed_p95_ms": scoped[int(len(scoped) * 0.95)],
    }


def product(args: argparse.Namespace) -> list[Row]:
    """The same questions through the product's `Memory.recall`, each `search:` mode (bench/recall_product.py)."""
    import os

    import recall_product  # bench/, this script's directory

    dialogues, questions = load()
    embed = "local" if args.minilm else "hash"
    stores = [{"store": "memory"}]
    if args.postgres:
        stores.append({"store": "postgres", "dsn": os.environ["HELIX_POSTGRES_DSN"]})
    out = []
    for store in stores:
        found = recall_product.rows(dialogues, questions, evaluate, embed, store)
        out += [Row(f"{r.name}/{store['store']}" if store["store"] != "memory" else r.name, r.figures) for r in found]
    return out


def table(results: list[Row]) -> str:
    head = f"{'row':<30}" + "".join(f"{k:>24}" for k in ("all", *KINDS)) + f"{'p50/p95 ms':>14}"
    sub = f"{'':<30}" + f"{'r@5   r@10   mrr':>24}" * 5
    lines = [head, sub]
    for row in results:
        cells = "".join(
            f"{f['r@5']:>8.3f}{f['r@10']:>7.3f}{f['mrr']:>7.3f}  " for f in (row.figures[k] for k in ("all", *KINDS))
        )
        lines.append(f"{row.name:<30}{cells}{row.figures['all']['p50_ms']:>7.2f}/{row.figures['all']['p95_ms']:.2f}")
    return "\n".join(lines)


def scale(args: argparse.Namespace) -> int:
    """`--scale`: bench/recall_scale.py's run (ingest, and p50/p95 of every mode at `--n` messages), its targets."""
    import asyncio

    import recall_scale  # bench/, this script's directory

    opts = argparse.Namespace(n=args.n, queries=args.queries, postgres=args.postgres, no_memory=False)
    result = asyncio.run(recall_scale.main(opts))
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        recall_scale.report(result)
    return recall_scale.missed(line for line, ok in recall_scale.targets(result) if not ok)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--k1", type=float, default=K1, help="KeywordIndex k1")
    parser.add_argument("--b", type=float, default=B, help="KeywordIndex b")
    parser.add_argument("--depth", type=int, default=50, help="candidates each ranker hands to fusion")
    parser.add_argument("--no-minilm", dest="minilm", action="store_false", help="skip the MiniLM rows")
    parser.add_argument("--no-micro", dest="micro", action="store_false", help="skip the 100K micro-benchmark")
    parser.add_argument(
        "--no-product",
        dest="product",
        action="store_false",
        help="skip the rows that run through Memory.recall (every search: mode)",
    )
    parser.add_argument("--postgres", action="store_true", help="product rows on PostgreSQL too (HELIX_POSTGRES_DSN)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--scale", action="store_true", help="instead: every mode at 100K messages (bench/recall_scale.py)"
    )
    parser.add_argument("--n", type=int, default=100_000, help="--scale: messages in the namespace")
    parser.add_argument("--queries", type=int, default=200, help="--scale: queries timed")
    args = parser.parse_args(argv)
    if args.scale:
        return scale(args)
    results = rows(args)
    if args.product:
        results += product(args)
    speed = micro() if args.micro else None
    if args.json:
        print(json.dumps({"rows": {r.name: r.figures for r in results}, "micro": speed}, indent=1))
        return 0
    print(table(results))
    if speed:
        print("KeywordIndex at {docs} docs: add {add_docs_per_s:,.0f} docs/s; top-10 of a 10-term query p50 "
              "{query_p50_ms:.2f} ms, p95 {query_p95_ms:.2f} ms; with allowed (10%) p50 {allowed_p50_ms:.2f} ms, "
              "p95 {allowed_p95_ms:.2f} ms".format(**speed))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
