"""Recall over `helix_vectors`: filters, the vector ranker (HNSW), the keyword ranker (full text, BM25).

A row of a view that keeps keywords holds `keywords`, PostgreSQL's `english` tsvector of the text
the view gave (`Write.keywords`), and `words`, its length; the namespace row keeps `keyword_docs`
and `keyword_words`, moved by every insert and delete in the same statement, so BM25's document
count and average length cost no scan. The keyword ranker matches any of the query's lexemes
through the GIN index, counts each lexeme's documents among the matches (the namespace's
document frequency when no filter narrows them) and ranks by Okapi BM25 in SQL. `occurred_at`
is when a message was said, NULL for "at its event time".
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import asyncpg
import numpy as np

from helix_es.model.events import Position
from helix_es.stores.ports.vector import Found, RankAsk, Ranking
from helix_es.views.fusion import Ranked

K1, B = 1.2, 0.75  # Okapi BM25's usual constants
CANDIDATES = 1500  # rows the keyword ranker scores at most, give or take its last lexeme's

# Appended to the store's schema: what recall reads, on tables made before it.
SCHEMA = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                   WHERE table_name = 'helix_vectors' AND column_name = 'keywords') THEN
        ALTER TABLE helix_vectors ADD COLUMN occurred_at timestamptz, ADD COLUMN keywords tsvector,
            ADD COLUMN words int;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                   WHERE table_name = 'helix_vector_namespaces' AND column_name = 'keyword_docs') THEN
        ALTER TABLE helix_vector_namespaces ADD COLUMN keyword_docs bigint NOT NULL DEFAULT 0,
            ADD COLUMN keyword_words bigint NOT NULL DEFAULT 0;
    END IF;
END $$;
CREATE TABLE IF NOT EXISTS helix_vector_terms (
    view text NOT NULL,
    namespace text NOT NULL,
    lexeme text NOT NULL,
    docs bigint NOT NULL,
    PRIMARY KEY (view, namespace, lexeme)
);
"""


def keyword_stats(plus: str, minus: str, *, erasures: bool | str = False) -> str:
    """The tail of a write statement whose CTEs `plus` and `minus` return the `words` and `keywords` of
    the rows it inserted and deleted: the namespace's document count, total length and each lexeme's
    document frequency follow them, in the same statement (a view without keywords changes nothing,
    but an erasure, which counts itself once it deleted any row; `erasures` as SQL: what it adds to the
    count, for a statement erasing several sessions)."""
    changed = (
        f"SELECT 1 FROM {minus}"
        if erasures
        else (f"SELECT 1 FROM {plus} WHERE words IS NOT NULL UNION ALL SELECT 1 FROM {minus} WHERE words IS NOT NULL")
    )
    return f"""
, terms AS (
    INSERT INTO helix_vector_terms AS t (view, namespace, lexeme, docs)
    SELECT $1, $2, c.lexeme, sum(c.d) FROM (
        SELECT u.lexeme, 1 AS d FROM {plus} AS p, unnest(p.keywords) AS u
        UNION ALL SELECT u.lexeme, -1 FROM {minus} AS m, unnest(m.keywords) AS u
    ) AS c GROUP BY c.lexeme HAVING sum(c.d) <> 0
    ON CONFLICT (view, namespace, lexeme) DO UPDATE SET docs = t.docs + excluded.docs
)
UPDATE helix_vector_namespaces SET {_counted(erasures)}
    keyword_docs = keyword_docs + (SELECT count(words) FROM {plus}) - (SELECT count(words) FROM {minus}),
    keyword_words = keyword_words + (SELECT coalesce(sum(words), 0) FROM {plus})
        - (SELECT coalesce(sum(words), 0) FROM {minus})
WHERE view = $1 AND namespace = $2 AND EXISTS ({changed})
"""


def _counted(erasures: bool | str) -> str:
    if not erasures:
        return ""
    return f"erasures = erasures + {'1' if erasures is True else erasures},"


# Made on the first write with keywords, like the HNSW index (see PostgresVectorStore.ensure_index).
GIN = "helix_vectors_keywords"
GIN_INDEX = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {GIN} ON helix_vectors USING gin (keywords) WHERE keywords IS NOT NULL"
)
GIN_VALID = f"SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('{GIN}') AND indisvalid)"
GIN_INVALID = (
    f"SELECT array(SELECT indexrelid::regclass::text FROM pg_index WHERE indexrelid = to_regclass('{GIN}')"
    " AND NOT indisvalid)"
)

# Every ranker's statement: $1 view, $2 namespace, $3 candidates, $4 the query (a vector or text), then
# the recall's filters, each only when given: a condition "$n IS NULL OR ..." would leave the planner a
# generic plan that scans the namespace instead of the HNSW index, once asyncpg has prepared it.
_SAID = "coalesce(v.occurred_at, v.event_time)"

_COLUMNS = """v.topic, v.partition, v."offset", v.session_id, coalesce(v.occurred_at, v.event_time) AS said,
    v.message::text AS message"""

# The inner ORDER BY is the HNSW index's (distance alone); the outer one breaks ties in applied order.
VECTOR = f"""
SELECT * FROM (
    SELECT {_COLUMNS}, 1 - (v.vec::vector({{d}}) <=> $4::vector({{d}})) AS score, v.version
    FROM helix_vectors v
    WHERE {{where}} AND v.dims = {{d}}
    ORDER BY v.vec::vector({{d}}) <=> $4::vector({{d}})
    LIMIT $3
) AS t ORDER BY t.score DESC, t.version, t.topic, t.partition, t."offset"
"""

# Lexemes of the query ($4) by PostgreSQL's own analyzer, with their document frequencies. Candidates are
# the rows that hold the rarest of them, taken rarest first while they hold at most CANDIDATES rows in all
# (the rarest always): rows that only share the commoner words would rank low, and scoring them is what
# costs.
# Every candidate is scored with all the query's lexemes, by Okapi BM25 over the whole namespace.
KEYWORD = f"""
WITH q AS MATERIALIZED (
    SELECT DISTINCT u.lexeme, coalesce(t.docs, 0)::float8 AS docs FROM unnest(to_tsvector('english', $4::text)) AS u
    LEFT JOIN helix_vector_terms t ON t.view = $1 AND t.namespace = $2 AND t.lexeme = u.lexeme
), pick AS MATERIALIZED (
    SELECT lexeme FROM (
        SELECT lexeme, docs, sum(docs) OVER (ORDER BY docs, lexeme) - docs AS before FROM q WHERE docs > 0
    ) AS x WHERE before = 0 OR before + docs <= {CANDIDATES}
), tq AS MATERIALIZED (
    SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS query FROM pick
), st AS MATERIALIZED (
    SELECT greatest(n.keyword_docs, 1)::float8 AS docs,
           greatest(n.keyword_words::float8 / greatest(n.keyword_docs, 1), 1) AS avgdl
    FROM helix_vector_namespaces n WHERE n.view = $1 AND n.namespace = $2
), m AS MATERIALIZED (
    SELECT v.topic, v.partition, v."offset", v.words, v.keywords FROM helix_vectors v, tq
    WHERE v.keywords @@ tq.query AND {{where}}
), scored AS (
    SELECT m.topic, m.partition, m."offset",
           sum(ln(1 + (st.docs - q.docs + 0.5) / (q.docs + 0.5))
               * tf.f * ({K1} + 1) / (tf.f + {K1} * (1 - {B} + {B} * m.words / st.avgdl))) AS score
    FROM m CROSS JOIN LATERAL (
        SELECT u.lexeme, array_length(u.positions, 1)::float8 AS f FROM unnest(m.keywords) AS u
    ) AS tf JOIN q USING (lexeme) CROSS JOIN st
    GROUP BY m.topic, m.partition, m."offset"
    ORDER BY score DESC, m.topic, m.partition, m."offset" LIMIT $3
)
SELECT {_COLUMNS}, s.score
FROM scored s JOIN helix_vectors v ON v.view = $1 AND v.namespace = $2 AND v.topic = s.topic
    AND v.partition = s.partition AND v."offset" = s."offset"
ORDER BY s.score DESC, v.topic, v.partition, v."offset"
"""

# Oldest first (the seed's search order): event time, then log position.
# The pattern is lower($4) with LIKE's wildcards escaped: planned for its value (see `rank`), a constant
# the trigram index (on keyword rows, where pg_trgm is installed) looks its rarer trigrams up by.
SUBSTRING = f"""
SELECT {_COLUMNS}, 1.0::float8 AS score
FROM helix_vectors v
WHERE {{where}} AND lower(v.message ->> 'content')
    LIKE '%' || replace(replace(replace(lower($4::text), '\\', '\\\\'), '%', '\\%'), '_', '\\_') || '%'
ORDER BY v.event_time, v.topic, v.partition, v."offset"
LIMIT $3
"""

TRGM = "helix_vectors_trgm"
TRGM_INDEX = (
    f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {TRGM} ON helix_vectors"
    " USING gin ((lower(message ->> 'content')) gin_trgm_ops) WHERE keywords IS NOT NULL"
)
TRGM_VALID = f"SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass('{TRGM}') AND indisvalid)"
TRGM_INVALID = (
    f"SELECT array(SELECT indexrelid::regclass::text FROM pg_index WHERE indexrelid = to_regclass('{TRGM}')"
    " AND NOT indisvalid)"
)
HAS_TRGM = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')"

_CHECKPOINT = 'SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3'

# Past EXACT rows a namespace is searched through the HNSW index whatever the planner thinks: it
# counts a namespace that is a minority of the table as small, and an exact sort of 100,000 rows
# costs a quarter of a second. Below it the planner chooses (an exact sort of a small namespace
# is fast and finds every row; an index scan would wade through other namespaces' rows).
EXACT = 10_000
_LARGE = "SELECT count(*) = $3 FROM (SELECT 1 FROM helix_vectors WHERE view = $1 AND namespace = $2 LIMIT $3) AS n"


def _filters(ask: RankAsk) -> tuple[str, list[Any]]:
    """The WHERE of the recall's filters (parameters from $5 on), and their values."""
    r = ask.recall
    conditions, values = ["v.view = $1", "v.namespace = $2"], []
    given: list[tuple[str, Any]] = [
        ("v.session_id = ANY(${}::text[])", None if r.sessions is None else sorted(r.sessions)),
        (f"{_SAID} > ${{}}", r.after),
        (f"{_SAID} < ${{}}", r.before),
        ("v.message -> 'metadata' @> ${}::jsonb", json.dumps(dict(r.where)) if r.where else None),
    ]
    for condition, value in given:
        if value is not None:
            values.append(value)
            conditions.append(condition.format(4 + len(values)))
    return " AND ".join(conditions), values


class Sizes:
    """Which namespaces are past EXACT rows, asked at most once a `ttl` each (they rarely shrink back)."""

    def __init__(self, ttl: float = 60.0) -> None:
        self.ttl = ttl
        self._known: dict[tuple[str, str], tuple[bool, float]] = {}

    async def large(self, pool: asyncpg.Pool, view: str, namespace: str) -> bool:
        known = self._known.get((view, namespace))
        now = time.monotonic()
        if known is None or known[1] < now:
            known = (bool(await pool.fetchval(_LARGE, view, namespace, EXACT)), now + self.ttl)
            self._known[(view, namespace)] = known
        return known[0]


async def rank(
    pool: asyncpg.Pool, view: str, namespace: str, ask: RankAsk, want: Position | None, decode: Any, sizes: Sizes
) -> Ranking | None:
    """Each ranker `ask` names, side by side on connections of their own (once `want` is applied; else
    None): a hybrid recall takes as long as its slower ranker. `decode` turns a row's JSON into a
    Message (the store's cached decoder)."""
    if want is not None:
        done = await pool.fetchval(_CHECKPOINT, view, want.topic, want.partition)
        if done is None or done < want.offset:
            return None
    where, values = _filters(ask)
    queries: list[tuple[str, str, Any]] = []
    if ask.vector is not None and ask.vector.any():
        queries.append(("vector", VECTOR.format(d=len(ask.vector), where=where), ask.vector))
    if ask.keywords is not None:
        queries.append(("keyword", KEYWORD.format(where=where), ask.keywords))
    if ask.substring is not None:
        indexed = f"{where} AND v.keywords IS NOT NULL" if ask.keyword_rows else where  # the trigram index's
        queries.append(("substring", SUBSTRING.format(where=indexed), ask.substring))
    large = bool(queries) and queries[0][0] == "vector" and await sizes.large(pool, view, namespace)

    async def run(name: str, sql: str, query: Any) -> list[asyncpg.Record]:
        # Planned for its own values: a generic plan (asyncpg prepares every statement) cannot see which
        # lexemes are rare, and scanned the namespace: 0.7 s instead of 15 ms at 100,000 rows. A large
        # namespace is read in the HNSW index's order, never by sorting every row.
        settings = "SET LOCAL plan_cache_mode = force_custom_plan"
        if large and name == "vector":
            settings += "; SET LOCAL enable_sort = off"
        async with pool.acquire() as conn, conn.transaction(readonly=True):
            await conn.execute(settings)
            found: list[asyncpg.Record] = await conn.fetch(sql, view, namespace, ask.depth, query, *values)
            return found

    answers = await asyncio.gather(*(run(*q) for q in queries))
    ids: dict[tuple[str, int, int], int] = {}
    found: dict[int, Found] = {}
    ranked: list[Ranked] = []
    for (name, _, _), rows in zip(queries, answers, strict=True):
        order, scores = [], []
        for row in rows:
            key = (row["topic"], row["partition"], row["offset"])
            i = ids.setdefault(key, len(ids))
            if i not in found:
                found[i] = Found(decode(row["message"]), row["session_id"], Position(*key), row["said"])
            order.append(i)
            scores.append(float(row["score"]))
        ranked.append(Ranked(name, np.array(order, np.int64), np.array(scores, np.float32)))
    return Ranking(tuple(ranked), found)
