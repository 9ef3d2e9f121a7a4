"""Fusing ranked lists: order, a missing ranker, explain, weights and the recency prior."""

from __future__ import annotations

import numpy as np
import pytest

from helix_es.views.fusion import Ranked, fuse, recency_for


def _r(name: str, ids: list[int], scores: list[float]) -> Ranked:
    return Ranked(name, np.array(ids, np.int64), np.array(scores, np.float32))


def test_a_candidate_both_rankers_like_wins() -> None:
    vector = _r("vector", [1, 2, 3], [0.9, 0.8, 0.1])
    keyword = _r("keyword", [2, 4], [12.0, 3.0])
    fused = fuse([vector, keyword], {"vector": 1.0, "keyword": 1.0}, limit=10)
    assert fused[0].id == 2
    assert {f.id for f in fused} == {1, 2, 3, 4}
    assert [f.score for f in fused] == sorted((f.score for f in fused), reverse=True)


def test_explain_names_each_rankers_score_and_rank() -> None:
    fused = fuse([_r("vector", [7, 8], [0.8, 0.5]), _r("keyword", [8], [4.0])], {}, limit=2)
    by_id = {f.id: f for f in fused}
    assert by_id[8].explain == {"vector": {"score": 0.5, "rank": 2.0}, "keyword": {"score": 4.0, "rank": 1.0}}
    assert by_id[7].explain == {"vector": {"score": pytest.approx(0.8), "rank": 1.0}}


def test_a_missing_or_empty_ranker_leaves_the_other_ranking() -> None:
    vector = _r("vector", [3, 1, 2], [0.9, 0.5, 0.2])
    alone = fuse([vector], {"vector": 1.0, "keyword": 1.0}, limit=3)
    with_empty = fuse([vector, _r("keyword", [], [])], {"vector": 1.0, "keyword": 1.0}, limit=3)
    assert [f.id for f in alone] == [f.id for f in with_empty] == [3, 1, 2]
    assert alone[0].score == pytest.approx(1.0)  # a perfect match of the only ranker
    assert fuse([], {}, limit=3) == []


def test_weights_decide_between_disagreeing_rankers() -> None:
    vector = _r("vector", [1, 2], [0.9, 0.1])
    keyword = _r("keyword", [2, 1], [9.0, 1.0])
    assert fuse([vector, keyword], {"vector": 3.0, "keyword": 1.0}, limit=1)[0].id == 1
    assert fuse([vector, keyword], {"vector": 1.0, "keyword": 3.0}, limit=1)[0].id == 2


def test_scores_scale_does_not_matter_to_score_methods() -> None:
    a = _r("keyword", [1, 2, 3], [30.0, 20.0, 10.0])
    b = _r("keyword", [1, 2, 3], [0.3, 0.2, 0.1])
    for method in ("rrf", "minmax", "max", "zscore"):
        x = fuse([a], {}, limit=3, method=method)
        y = fuse([b], {}, limit=3, method=method)
        assert [f.score for f in x] == pytest.approx([f.score for f in y])


def test_recency_prefers_the_newer_of_equals_and_reports_its_boost() -> None:
    vector = _r("vector", [1, 2], [0.5, 0.5])
    keyword = _r("keyword", [2, 1], [1.0, 1.0])  # a tie: each is first once
    times = {1: 2_000_000, 2: 1_000_000}
    fused = fuse([vector, keyword], {}, times=times, recency=0.1, limit=2)
    assert [f.id for f in fused] == [1, 2]
    assert fused[0].explain["recency"]["boost"] == pytest.approx(0.1)
    assert fused[1].explain["recency"]["boost"] == pytest.approx(0.0)
    plain = fuse([vector, keyword], {}, times=times, limit=2)
    assert all("recency" not in f.explain for f in plain)


def test_recency_does_not_overturn_a_clear_winner() -> None:
    vector = _r("vector", [1, 2, 3], [0.9, 0.3, 0.2])
    keyword = _r("keyword", [1, 3], [5.0, 1.0])
    times = {1: 0, 2: 5, 3: 10}
    assert fuse([vector, keyword], {}, times=times, recency=0.1, now=10, limit=3)[0].id == 1


def test_recency_is_for_questions_about_the_present() -> None:
    assert recency_for("Which city does Caroline live in now?") > 0
    assert recency_for("What is Caroline's current occupation?") > 0
    assert recency_for("Where did Caroline live before the move?") == 0
    assert recency_for("Is the snow nowhere to be seen?") == 0
