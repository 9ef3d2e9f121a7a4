"""Fusing ranked candidate lists (vector, keyword, ...) into one ranking, with an optional recency prior.

Store-agnostic: each ranker hands its best-first ids and raw scores, whose scales say nothing
across rankers (cosine, BM25, ts_rank), so each list is first mapped to [0, 1] within itself and
the weighted mean of those is the fused score; an id a ranker did not return gets 0 from it.

The default is reciprocal rank fusion with a small k (2) and equal weights: on the recall eval
it beat the better ranker whichever that was (MiniLM vectors over BM25, or BM25 over hashed
vectors). Min-max, max and z-score normalised scores let the weaker ranker's flat scores bury the
stronger one's, and k=60 lets a candidate both lists hold low outrank either list's best
(bench/recall_ideas.py has the figures).

The recency prior adds `recency` times a candidate's place in time among the candidates; it
helps only questions about what is true now (it moved recall@10 of "what ... before" and of
other questions down), so `recency_for(query)` turns it on for those alone.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

Method = Literal["rrf", "minmax", "max", "zscore"]
METHOD: Method = "rrf"
RRF_K = 2.0
RECENCY_NOW = 0.2  # for a question about the present: enough to order near-equals, not to overturn
_NOW = re.compile(r"\b(now|current|currently|nowadays|these days|latest|anymore)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Ranked:
    """One ranker's candidates: `ids` (int64) and raw `scores`, best first."""

    name: str
    ids: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class Fused:
    """A fused candidate: its score and, per ranker, its raw score and 1-based rank (and the recency boost)."""

    id: int
    score: float
    explain: dict[str, dict[str, float]]


def _unit(ranked: Ranked, method: Method, k: float) -> np.ndarray:
    """Each candidate's share in [0, 1] of its ranker's best."""
    scores = np.asarray(ranked.scores, np.float64)
    if method == "rrf":
        return (k + 1.0) / (k + np.arange(1, len(scores) + 1))
    if method == "max":
        top = scores.max()
        return scores / top if top > 0 else np.ones_like(scores)
    if method == "zscore":
        spread = scores.std()
        z = (scores - scores.mean()) / spread if spread > 0 else np.zeros_like(scores)
        return np.clip((z + 3.0) / 6.0, 0.0, 1.0)
    low, high = scores.min(), scores.max()
    return (scores - low) / (high - low) if high > low else np.ones_like(scores)


def _recency(ids: list[int], times: Mapping[int, int], now: int | None) -> dict[int, float]:
    """Each candidate's place in time among the candidates: 1 for the newest (or `now`), 0 for the oldest."""
    known = {i: times[i] for i in ids if i in times}
    if not known:
        return {}
    newest = max(known.values()) if now is None else now
    oldest = min(known.values())
    span = newest - oldest
    return {i: (1.0 - (newest - t) / span if span > 0 else 1.0) for i, t in known.items()}


def recency_for(query: str) -> float:
    """The recency weight for `query`: `RECENCY_NOW` when it asks what is true now, else 0."""
    return RECENCY_NOW if _NOW.search(query) else 0.0


def fuse(
    rankings: Sequence[Ranked],
    weights: Mapping[str, float],
    *,
    times: Mapping[int, int] | None = None,
    recency: float = 0.0,
    now: int | None = None,
    limit: int,
    method: Method = METHOD,
    k: float = RRF_K,
) -> list[Fused]:
    """The `limit` best candidates of all `rankings`, best first.

    A ranker's weight is `weights[name]` (1.0 when absent; 0 leaves it out of the score but in
    `explain`); the fused score is the weighted mean of the rankers' unit scores, plus `recency`
    times the candidate's place in time (`times`: occurred_at in microseconds per id; `now`: the
    newest end of the scale, default the newest candidate).
    """
    total = sum(max(0.0, weights.get(r.name, 1.0)) for r in rankings if len(r.ids)) or 1.0
    score: dict[int, float] = {}
    explain: dict[int, dict[str, dict[str, float]]] = {}
    for ranked in rankings:
        if not len(ranked.ids):
            continue
        weight = max(0.0, weights.get(ranked.name, 1.0)) / total
        unit = _unit(ranked, method, k)
        for rank, (doc, raw, share) in enumerate(
            zip(ranked.ids.tolist(), np.asarray(ranked.scores).tolist(), unit.tolist(), strict=True), 1
        ):
            if doc in explain and ranked.name in explain[doc]:
                continue  # a ranker listing an id twice: its best place counts
            score[doc] = score.get(doc, 0.0) + weight * share
            explain.setdefault(doc, {})[ranked.name] = {"score": float(raw), "rank": float(rank)}
    if recency and times:
        for doc, place in _recency(list(score), times, now).items():
            boost = recency * place
            score[doc] += boost
            explain[doc]["recency"] = {"boost": boost}
    best = sorted(score, key=lambda d: (-score[d], d))[:limit]
    return [Fused(d, score[d], explain[d]) for d in best]
