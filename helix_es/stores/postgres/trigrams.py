"""Which part of a substring search the pg_trgm index should look up: the query's rare pieces.

A GIN index answers `content ILIKE '%q%'` by intersecting the posting lists of q's trigrams,
and reads each list whole: a trigram in every row (a greeting, a prefix every message has)
costs hundreds of pages at a million rows, however rare the rest of q is (measured: 13.5 ms
for `ref-653159` where every row holds `ref-`, 0.7 ms for `653159`). So the index is asked for
`%p1%p2%` only: from each word of q (a run of letters and digits), its longest piece without a
frequent trigram, in order, so any row that holds q holds them; q itself is rechecked on the
rows found. Frequent means in more than `FREQUENT` of a sample of the table's rows, sampled
again every `RESAMPLE_SECONDS`. A query without such a piece is looked up whole, as before,
and so is every query on a table under `SMALL_TABLE` rows. The result is the same either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import time

import asyncpg

log = logging.getLogger(__name__)

FREQUENT = 0.02  # of the sampled rows: a posting list over 2% of a million rows is ~80 pages
SAMPLE_ROWS = 3000
SMALL_TABLE = 50_000  # rows; below this every posting list is short
RESAMPLE_SECONDS = 600.0
MIN_WORD = 3  # a shorter piece has no trigram of its own inside a pattern
_WORD = re.compile(r"[^\W_]+")  # \w without the underscore: letters and digits

# The trigrams the index holds for a sample of rows (show_trgm is what the opclass indexes, each
# once per row) that more than a share $2 of them hold; SYSTEM sampling reads whole pages: cheap.
_SAMPLE = """
WITH s AS MATERIALIZED (SELECT show_trgm({c}) AS g FROM {t} TABLESAMPLE SYSTEM ($1) REPEATABLE (1))
SELECT t FROM s, unnest(s.g) AS t GROUP BY t HAVING count(*) > $2::float8 * (SELECT count(*) FROM s)
"""
# The planner's row count, and whether pg_trgm (show_trgm) is there at all.
_ROWS = """
SELECT CASE WHEN to_regprocedure('show_trgm(text)') IS NULL THEN 0 ELSE reltuples::bigint END
FROM pg_class WHERE oid = $1::regclass
"""


def words(query: str) -> list[str]:
    """The runs of letters and digits in `query`, in order: each a substring of it."""
    return _WORD.findall(query)


def probe(query: str, frequent: frozenset[str]) -> str | None:
    """The ILIKE pattern the index should look up for `query`, if narrower than `%query%`, else None.

    From each word, its longest piece with no frequent trigram (at least MIN_WORD characters),
    joined by `%` in order: pieces of different words never overlap, so a row holding `query`
    matches. Pieces hold no `%`, `_` or `\\`, so the pattern needs no escapes.
    """
    if not frequent:
        return None
    pieces = [p for p in (_rare_piece(w, frequent) for w in words(query)) if p]
    pattern = "%" + "%".join(pieces) + "%"
    return pattern if pieces and pattern != f"%{query}%" else None


def _rare_piece(word: str, frequent: frozenset[str]) -> str:
    """The longest substring of `word` whose trigrams are all rare ('' if none of MIN_WORD characters)."""
    best, start, low = "", 0, word.lower()
    for i in range(len(word) - 2):
        if low[i : i + 3] in frequent:
            start = i + 1
        elif i + 3 - start > len(best):
            best = word[start : i + 3]
    return best


class FrequentTrigrams:
    """The trigrams of one table's text column that are too common to look up, sampled now and then:
    the first time before the search that needs it, later on a task of its own (a sample of a
    million-row table takes a few hundred ms), the old set serving meanwhile."""

    def __init__(self, table: str, column: str = "content") -> None:
        self._table = table  # double-quoted already, as `column`
        self._sample = _SAMPLE.format(t=table, c=column)
        self.trigrams: frozenset[str] | None = None
        self._due = 0.0
        self._task: asyncio.Task[None] | None = None

    async def get(self, pool: asyncpg.Pool) -> frozenset[str]:
        if self.trigrams is None:
            await self._refresh(pool)
        elif time.monotonic() >= self._due and (self._task is None or self._task.done()):
            self._task = asyncio.create_task(self._refresh(pool))
        assert self.trigrams is not None
        return self.trigrams

    async def _refresh(self, pool: asyncpg.Pool) -> None:
        self._due = time.monotonic() + RESAMPLE_SECONDS
        try:
            rows = await pool.fetchval(_ROWS, self._table) or 0
            found = (
                []
                if rows < SMALL_TABLE
                else await pool.fetch(self._sample, min(100.0, 100.0 * SAMPLE_ROWS / rows), FREQUENT)
            )
        except asyncpg.PostgresError as e:  # only a speed-up: the whole query is looked up meanwhile
            log.warning("%s: no trigram sample (%s); search looks up whole queries", self._table, e)
            found = []
        self.trigrams = frozenset(r["t"] for r in found)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
