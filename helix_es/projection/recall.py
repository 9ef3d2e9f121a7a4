"""From a store's ranked candidates to the hits a recall answers: fused, cut to the limit, explained.

A store ranks (each ranker's best candidates under the recall's filters); this module decides
what the rankings mean together, the same for every store: one ranker's order and scores as
they are, several fused (`helix_es.views.fusion`), with a recency prior when the view asks.
"""

from __future__ import annotations

from collections.abc import Mapping

from helix_es.model.errors import InvalidInput
from helix_es.model.events import micros
from helix_es.model.recall import Recall, RecallHit, SearchMode
from helix_es.stores.ports.vector import Ranking
from helix_es.views.fusion import fuse, recency_for

# The rankers each mode asks a store for.
RANKERS: Mapping[SearchMode, tuple[str, ...]] = {
    "hybrid": ("vector", "keyword"),
    "vector": ("vector",),
    "keyword": ("keyword",),
    "substring": ("substring",),
}
WEIGHTS: Mapping[str, float] = {"vector": 1.0, "keyword": 1.0}  # equal: the eval's best in both regimes


def depth(recall: Recall) -> int:
    """Candidates each ranker gives a fused recall: enough that a hit ranked low by one ranker and
    high by the other is among them."""
    return max(50, 4 * recall.limit)


def choose(recall: Recall, own: SearchMode | None, offered: tuple[str, ...], view: str) -> SearchMode:
    """The mode a recall runs in (its own, else the view's, else vector), or `InvalidInput` for one the
    view keeps no index for."""
    mode: SearchMode = recall.mode or own or "vector"
    if mode not in offered:
        raise InvalidInput(
            "mode",
            f"view {view} cannot recall by {mode} (it serves {list(offered)}): "
            "set search: hybrid (or keyword) on the view to keep a keyword index",
        )
    return mode


def hits(ranking: Ranking, recall: Recall, mode: SearchMode) -> list[RecallHit]:
    """The best `recall.limit` candidates of `ranking`, as hits: one ranker's order as it is, several
    fused by rank, newer ones lifted for a question about the present (`recency_for`)."""
    found = ranking.found
    ranked = [r for r in ranking.ranked if r.name in RANKERS[mode]]
    recency = recency_for(recall.query) if len(RANKERS[mode]) > 1 else 0.0
    if len(ranked) == 1 and not recency:
        only = ranked[0]
        order = [
            (int(i), float(s), {only.name: {"score": float(s), "rank": float(n)}})
            for n, (i, s) in enumerate(zip(only.ids.tolist(), only.scores.tolist(), strict=True), 1)
        ]
    else:
        times = {i: micros(f.occurred_at) for i, f in found.items()} if recency else None
        fused = fuse(ranked, WEIGHTS, times=times, recency=recency, limit=recall.limit)
        order = [(f.id, f.score, f.explain) for f in fused]
    out = []
    for i, score, explain in order[: recall.limit]:
        f = found[i]
        shown = {"mode": mode, **explain} if recall.explain else None
        out.append(RecallHit(f.message, score, f.session_id, f.position, f.occurred_at, shown))
    return out
