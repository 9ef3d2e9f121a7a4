"""Temporary stand-in (replaced by the real module at merge)."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence

import numpy as np


def terms(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


class KeywordIndex:
    def __init__(self) -> None:
        self._docs: dict[int, list[str]] = {}

    def __len__(self) -> int:
        return len(self._docs)

    def add(self, ids: Sequence[int], texts: Sequence[str]) -> None:
        for i, t in zip(ids, texts, strict=True):
            self._docs[i] = terms(t)

    def remove(self, ids: Collection[int]) -> None:
        for i in ids:
            self._docs.pop(i, None)

    def top(self, query: str, k: int, allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        q = set(terms(query))
        n = len(self._docs) or 1
        df = {t: sum(1 for d in self._docs.values() if t in d) for t in q}
        ok = None if allowed is None else set(allowed.tolist())
        scored = []
        for i, d in self._docs.items():
            if ok is not None and i not in ok:
                continue
            s = sum(math.log(1 + n / (df[t] or 1)) * d.count(t) for t in q if t in d)
            if s > 0:
                scored.append((s, i))
        scored.sort(key=lambda x: (-x[0], x[1]))
        scored = scored[:k]
        return np.array([i for _, i in scored], np.int64), np.array([s for s, _ in scored], np.float32)
