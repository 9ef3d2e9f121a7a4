"""What was tried for hybrid recall, each figure next to the default it would replace.

    python bench/recall_ideas.py [--no-minilm] [--json]

Runs on bench/recall.py's eval and rows: index texts for keywords and for vectors (the speaker's
name, the session's previous or next turn, the session's month and year), BM25's k1 and b, query
terms dropped, fusion methods, weights and depth, and a recency prior (for every question, or only
for those asking what is true "now", as `recency_for` does: the default). Each line: recall@10
overall and per kind, and MRR. The
hybrid lines fuse the keyword ranking with hashed vectors (`hash`: BM25 the stronger ranker) and
with all-MiniLM-L6-v2 (`minilm`: the vectors stronger); a default must hold up in both.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from recall import KINDS, Dense, Dialogue, Keywords, Turn, evaluate, hybrid, load, turn_ids

from helix_es.views.fusion import recency_for
from helix_es.views.keywords import K1, B


def texts(dialogues: dict[str, Dialogue]) -> dict[str, Callable[[Turn], str]]:
    following: dict[str, str] = {}
    for d in dialogues.values():
        for a, b in zip(d.turns, d.turns[1:], strict=False):
            if b.prev:  # the same session
                following[a.id] = f"{b.speaker}: {b.text}"

    def month(t: Turn) -> str:
        at = datetime.fromtimestamp(t.time_us / 1e6, UTC)
        return f"{at:%B} {at.year}"

    def named(t: Turn) -> str:
        return f"{t.speaker}: {t.text}"

    return {
        "text": lambda t: t.text,
        "name: text": named,
        "prev + text": lambda t: f"{t.prev}\n{t.text}",
        "prev + name: text": lambda t: f"{t.prev}\n{named(t)}",
        "name: text + next": lambda t: f"{named(t)}\n{following.get(t.id, '')}",
        "prev + name: text + next": lambda t: f"{t.prev}\n{named(t)}\n{following.get(t.id, '')}",
        "text + month year": lambda t: f"{t.text}\n{month(t)}",
        "name: text + month year": lambda t: f"{named(t)}\n{month(t)}",
    }


def line(name: str, figures: dict[str, dict[str, float]]) -> dict[str, Any]:
    return {"idea": name, "r@10": figures["all"]["r@10"], "mrr": figures["all"]["mrr"]} | {
        k: figures[k]["r@10"] for k in KINDS
    }


def ideas(minilm: bool, echo: bool) -> list[dict[str, Any]]:
    dialogues, questions = load()
    variants = texts(dialogues)
    out: list[dict[str, Any]] = []

    def ranked(name: str, rank: Callable[[dict[str, Any]], list[str]]) -> None:
        out.append(line(name, evaluate(name, rank, questions).figures))
        if echo:
            print(_format(out[-1]), flush=True)

    def by(index: Any) -> Callable[[dict[str, Any]], list[str]]:
        return lambda q: turn_ids(dialogues, q, index.rank(q, 50).ids)

    for label, text in variants.items():
        ranked(f"keyword, index text {label}", by(Keywords(dialogues, text, K1, B)))
    for k1 in (0.9, 1.2, 1.5):
        for b in (0.25, 0.5, 0.75):
            ranked(f"keyword, text, k1={k1} b={b}", by(Keywords(dialogues, variants["text"], k1, b)))
    keywords = Keywords(dialogues, variants["text"], K1, B)
    question_words = {"name", "kind", "person", "current", "first"}
    drop = " ".join
    dropped = Keywords(
        dialogues,
        variants["text"],
        K1,
        B,
        query=lambda s: drop(w for w in re.findall(r"\w+", s) if w.lower() not in question_words),
    )
    ranked("keyword, query without name/kind/person/current/first", by(dropped))
    named = Keywords(dialogues, variants["name: text"], K1, B)
    models = ("hash", "minilm") if minilm else ("hash",)
    for model in models:
        for label in ("text", "name: text", "prev + name: text"):
            dense = Dense(model, dialogues, questions, variants[label])
            ranked(f"{model}: dense, index text {label}", by(dense))
            for kw_label, kw in (("text", keywords), ("name: text", named)):
                ranked(f"{model}: hybrid, vectors of {label}, keywords of {kw_label}", hybrid(kw, dense, dialogues, 50))
        dense = Dense(model, dialogues, questions, variants["text"])
        for k in (1, 2, 5, 10, 60):
            ranked(f"{model}: hybrid rrf k={k}", hybrid(keywords, dense, dialogues, 50, method="rrf", k=k))
        for method in ("minmax", "max", "zscore"):
            ranked(f"{model}: hybrid {method}", hybrid(keywords, dense, dialogues, 50, method=method))
        for method in ("rrf", "minmax"):
            for w in ((2, 1), (1, 2)):
                weights = {"keyword": float(w[0]), "vector": float(w[1])}
                ranked(f"{model}: hybrid {method} keyword:vector={w[0]}:{w[1]}", hybrid(
                    keywords, dense, dialogues, 50, method=method, weights=weights
                ))  # fmt: skip
        for depth in (20, 100):
            ranked(f"{model}: hybrid depth {depth}", hybrid(keywords, dense, dialogues, depth))
        ranked(f"{model}: hybrid, no recency prior", hybrid(keywords, dense, dialogues, 50, recency=0.0))
        for recency in (0.05, 0.1, 0.2):
            ranked(f"{model}: hybrid recency {recency} on every question", hybrid(
                keywords, dense, dialogues, 50, recency=recency
            ))  # fmt: skip
        for recency in (0.1, 0.5):
            now = hybrid(keywords, dense, dialogues, 50, recency=recency)
            plain = hybrid(keywords, dense, dialogues, 50, recency=0.0)
            ranked(f"{model}: hybrid recency {recency} on 'now' questions", lambda q, now=now, plain=plain: (
                now if recency_for(q["question"]) else plain
            )(q))  # fmt: skip
    return out


def _format(row: dict[str, Any]) -> str:
    kinds = " ".join(f"{row[k]:.3f}" for k in KINDS)
    return f"{row['idea']:<62} {row['r@10']:.3f} {row['mrr']:.3f}   {kinds}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--no-minilm", dest="minilm", action="store_false", help="skip the MiniLM lines")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = parser.parse_args()
    if not args.json:
        print(f"{'idea':<62} r@10  mrr     r@10 of " + " / ".join(KINDS))
    rows = ideas(args.minilm, echo=not args.json)
    if args.json:
        print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
