"""Keyword search: the analyzer (`terms`) and an incremental Okapi BM25 index (`KeywordIndex`).

The analyzer splits on Unicode word characters, casefolds, drops English stopwords and stems
with Porter2: what PostgreSQL's `english` configuration does, so the memory store and a
`to_tsvector('english', ...)` column see the same terms. Numbers stay terms ("2023", "100").

The index keeps, per term, the rows of the documents holding it and their term frequencies as
numpy arrays grown by doubling; a query adds each of its terms' BM25 contributions into a dense
score array, so its cost is the length of the postings it reads. Removal marks a row dead (its
document length leaves the average and its terms' document frequencies at once) and the rows are
compacted when the dead outnumber the living.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Collection, Sequence

import numpy as np

from helix_es.views.stemmer import stem

# PostgreSQL's english.stop (the Snowball list), so both stores drop the same words.
_STOPWORDS = """i me my myself we our ours ourselves you your yours yourself yourselves he him his himself
    she her hers herself it its itself they them their theirs themselves what which who whom this that
    these those am is are was were be been being have has had having do does did doing a an the and
    but if or because as until while of at by for with about against between into through during
    before after above below to from up down in out on off over under again further then once here
    there when where why how all any both each few more most other some such no nor not only own same
    so than too very s t can will just don should now"""
STOPWORDS = frozenset(_STOPWORDS.split())
_WORD = re.compile(r"\w+")

K1 = 1.2
B = 0.5  # turns are short and alike in length: less length normalisation ranked better


def terms(text: str) -> list[str]:
    """The keyword terms of `text`, in order: words casefolded, stopwords dropped, stemmed."""
    return [stem(w) for w in _WORD.findall(text.casefold()) if w not in STOPWORDS]


class _Postings:
    """One term's documents (rows) and term frequencies, with room to grow."""

    __slots__ = ("rows", "size", "tfs")

    def __init__(self) -> None:
        self.rows = np.empty(4, np.int64)
        self.tfs = np.empty(4, np.float32)
        self.size = 0

    def extend(self, rows: Sequence[int] | np.ndarray, tfs: Sequence[int] | np.ndarray) -> None:
        end = self.size + len(rows)
        if end > len(self.rows):
            cap = max(end, 2 * len(self.rows))
            self.rows = np.resize(self.rows, cap)
            self.tfs = np.resize(self.tfs, cap)
        self.rows[self.size : end] = rows
        self.tfs[self.size : end] = tfs
        self.size = end


class KeywordIndex:
    """Okapi BM25 over documents with stable, increasing int ids; add and remove at any time."""

    def __init__(self, k1: float = K1, b: float = B) -> None:
        self.k1 = k1
        self.b = b
        self._postings: dict[str, _Postings] = {}
        self._df: Counter[str] = Counter()  # living documents per term
        self._ids = np.empty(16, np.int64)  # row -> document id, increasing
        self._lengths = np.empty(16, np.float32)
        self._alive = np.empty(16, bool)
        self._doc_terms: list[tuple[str, ...]] = []  # row -> its distinct terms, to undo them on removal
        self._rows = 0
        self._living = 0
        self._total_length = 0.0

    def __len__(self) -> int:
        return self._living

    def _grow(self, rows: int) -> None:
        if rows > len(self._ids):
            cap = max(rows, 2 * len(self._ids))
            self._ids = np.resize(self._ids, cap)
            self._lengths = np.resize(self._lengths, cap)
            self._alive = np.resize(self._alive, cap)

    def add(self, ids: Sequence[int], texts: Sequence[str]) -> None:
        """Index `texts` under `ids`, which must be increasing and above every id added before."""
        if len(ids) != len(texts):
            raise ValueError(f"add: {len(ids)} ids for {len(texts)} texts")
        last = int(self._ids[self._rows - 1]) if self._rows else None
        for doc_id in ids:
            if last is not None and doc_id <= last:
                raise ValueError(f"add: ids must increase; {doc_id} follows {last}")
            last = doc_id
        start = self._rows
        self._grow(start + len(ids))
        batch: dict[str, tuple[list[int], list[int]]] = {}
        for offset, text in enumerate(texts):
            row = start + offset
            counts = Counter(terms(text))
            length = sum(counts.values())
            self._lengths[row] = length
            self._total_length += length
            self._doc_terms.append(tuple(counts))
            for term, tf in counts.items():
                rows, tfs = batch.setdefault(term, ([], []))
                rows.append(row)
                tfs.append(tf)
        for term, (rows, tfs) in batch.items():
            postings = self._postings.get(term)
            if postings is None:
                postings = self._postings[term] = _Postings()
            postings.extend(rows, tfs)
            self._df[term] += len(rows)
        self._ids[start : start + len(ids)] = ids
        self._alive[start : start + len(ids)] = True
        self._rows += len(ids)
        self._living += len(ids)

    def remove(self, ids: Collection[int]) -> None:
        """Forget these documents; ids never added, or removed already, are ignored."""
        rows = self._rows_of(np.fromiter(ids, np.int64, len(ids)))
        for row in rows.tolist():
            if not self._alive[row]:
                continue
            self._alive[row] = False
            self._living -= 1
            self._total_length -= float(self._lengths[row])
            for term in self._doc_terms[row]:
                self._df[term] -= 1
        if self._rows - self._living > max(1024, self._living):
            self._compact()

    def _rows_of(self, wanted: np.ndarray) -> np.ndarray:
        """The rows of those of `wanted`'s ids that were added (living or dead)."""
        ids = self._ids[: self._rows]
        at = np.searchsorted(ids, wanted)
        inside = at < len(ids)
        at = at[inside]
        found: np.ndarray = at[ids[at] == wanted[inside]]
        return found

    def _compact(self) -> None:
        """Drop dead rows: renumber the living ones and filter every term's postings."""
        alive = self._alive[: self._rows]
        new_row = np.cumsum(alive) - 1
        for term in list(self._postings):
            old = self._postings[term]
            keep = alive[old.rows[: old.size]]
            if not keep.any():
                del self._postings[term]
                del self._df[term]
                continue
            fresh = _Postings()
            fresh.extend(new_row[old.rows[: old.size][keep]], old.tfs[: old.size][keep])
            self._postings[term] = fresh
        self._doc_terms = [t for t, a in zip(self._doc_terms, alive.tolist(), strict=True) if a]
        n = self._living
        self._ids[:n] = self._ids[: self._rows][alive]
        self._lengths[:n] = self._lengths[: self._rows][alive]
        self._alive[:n] = True
        self._rows = n

    def top(self, query: str, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ids and BM25 scores of the `k` best documents for `query`, best first; only ids in
        `allowed` (a sorted int64 array) when given. Documents sharing no term are never returned."""
        empty = (np.empty(0, np.int64), np.empty(0, np.float32))
        if k <= 0 or not self._living:
            return empty
        n = self._rows
        scores = np.zeros(n, np.float32)
        avgdl = self._total_length / self._living or 1.0
        for term, qtf in Counter(terms(query)).items():
            postings = self._postings.get(term)
            df = self._df.get(term, 0)
            if postings is None or df <= 0:
                continue
            idf = math.log(1.0 + (self._living - df + 0.5) / (df + 0.5))
            rows = postings.rows[: postings.size]
            tf = postings.tfs[: postings.size]
            norm = self.k1 * (1.0 - self.b + self.b * self._lengths[rows] / avgdl)
            scores[rows] += np.float32(qtf * idf) * tf * (self.k1 + 1.0) / (tf + norm)
        scores[~self._alive[:n]] = 0.0
        if allowed is not None:
            mask = np.zeros(n, bool)
            mask[self._rows_of(np.asarray(allowed, np.int64))] = True
            scores[~mask] = 0.0
        hits = np.flatnonzero(scores > 0)
        if len(hits) > k:
            hits = hits[np.argpartition(-scores[hits], k - 1)[:k]]
        hits = hits[np.argsort(-scores[hits], kind="stable")]
        return self._ids[hits].copy(), scores[hits]
