"""Temporary stand-in (replaced by the real module at merge)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Ranked:
    name: str
    ids: np.ndarray
    scores: np.ndarray


@dataclass(frozen=True)
class Fused:
    id: int
    score: float
    explain: dict[str, dict[str, float]]


def fuse(
    rankings: Sequence[Ranked],
    weights: Mapping[str, float],
    *,
    times: Mapping[int, int] | None = None,
    recency: float = 0.0,
    now: int | None = None,
    limit: int,
) -> list[Fused]:
    total: dict[int, float] = {}
    explain: dict[int, dict[str, dict[str, float]]] = {}
    for r in rankings:
        w = weights.get(r.name, 1.0)
        for rank, (i, s) in enumerate(zip(r.ids.tolist(), r.scores.tolist(), strict=True), 1):
            total[i] = total.get(i, 0.0) + w / (60 + rank)
            explain.setdefault(i, {})[r.name] = {"score": float(s), "rank": float(rank)}
    best = sorted(total, key=lambda i: (-total[i], i))[:limit]
    return [Fused(i, total[i], explain[i]) for i in best]
