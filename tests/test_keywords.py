"""The keyword analyzer (Porter2 stems, stopwords) and the incremental BM25 index."""

from __future__ import annotations

import math

import numpy as np
import pytest

from helix_es.views.keywords import KeywordIndex, terms
from helix_es.views.stemmer import stem


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("moved", "move"), ("moving", "move"), ("moves", "move"), ("caresses", "caress"), ("ponies", "poni"),
        ("ties", "tie"), ("agreed", "agre"), ("hopping", "hop"), ("happy", "happi"), ("generously", "generous"),
        ("communication", "communic"), ("running", "run"), ("traditional", "tradit"), ("hopefulness", "hope"),
        ("sensibiliti", "sensibl"), ("adjustment", "adjust"), ("married", "marri"), ("dying", "die"),
        ("news", "news"), ("skies", "sky"), ("exceed", "exceed"), ("knackeries", "knackeri"), ("by", "by"),
    ],
)  # fmt: skip
def test_porter2_stems_as_snowball_does(word: str, expected: str) -> None:
    assert stem(word) == expected


def test_terms_casefold_drop_stopwords_and_keep_numbers() -> None:
    assert terms("Where did Caroline MOVE to in 2023? We moved!") == ["carolin", "move", "2023", "move"]
    assert terms("Ünïcode Wörter") == [stem("ünïcode"), stem("wörter")]
    assert terms("the and of") == []


def test_bm25_scores_match_a_hand_computation() -> None:
    index = KeywordIndex(k1=1.2, b=0.75)
    index.add([10, 11, 12], ["dog dog cat", "cat bird fish", "fish"])
    ids, scores = index.top("dog", 5)
    avgdl = (3 + 3 + 1) / 3
    idf = math.log(1 + (3 - 1 + 0.5) / (1 + 0.5))
    expected = idf * 2 * 2.2 / (2 + 1.2 * (1 - 0.75 + 0.75 * 3 / avgdl))
    assert ids.tolist() == [10] and ids.dtype == np.int64 and scores.dtype == np.float32
    assert scores[0] == pytest.approx(expected, rel=1e-5)
    ids, _ = index.top("fish", 5)
    assert ids.tolist() == [12, 11]  # the shorter document ranks first


def test_removal_forgets_documents_and_their_statistics() -> None:
    index = KeywordIndex()
    index.add([1, 2, 3], ["apple pie", "apple tart", "pear"])
    index.remove([1, 99])
    assert len(index) == 2
    assert index.top("apple", 5)[0].tolist() == [2]
    fresh = KeywordIndex()
    fresh.add([2, 3], ["apple tart", "pear"])
    assert index.top("apple", 5)[1] == pytest.approx(fresh.top("apple", 5)[1])
    index.remove([1, 2, 3])
    assert len(index) == 0 and index.top("apple", 5)[0].size == 0


def test_compaction_keeps_ids_and_scores() -> None:
    index = KeywordIndex()
    index.add(range(3000), [f"w{i % 7} common" for i in range(3000)])
    index.remove(range(0, 2500))  # more dead than living: rows are compacted
    ids, _ = index.top("w3", 1000)
    assert sorted(ids.tolist()) == [i for i in range(2500, 3000) if i % 7 == 3]
    index.add([5000], ["w3 w3"])
    assert index.top("w3", 1)[0].tolist() == [5000]


def test_allowed_restricts_the_answer() -> None:
    index = KeywordIndex()
    index.add([1, 5, 9], ["red fox", "red hen", "red car"])
    ids, _ = index.top("red", 10, allowed=np.array([5, 9, 40], np.int64))
    assert sorted(ids.tolist()) == [5, 9]
    assert index.top("red", 10, allowed=np.array([], np.int64))[0].size == 0


def test_ids_must_increase_and_k_limits() -> None:
    index = KeywordIndex()
    index.add([3], ["a word"])
    with pytest.raises(ValueError):
        index.add([2], ["another word"])
    index.add([4, 5], ["word", "word word"])
    assert len(index.top("word", 2)[0]) == 2
    assert index.top("word", 0)[0].size == 0
    assert index.top("absent", 3)[0].size == 0
