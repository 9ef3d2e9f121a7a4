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

import json
from typing import Any

import asyncpg
import numpy as np

from helix_es.model.events import Position
from helix_es.stores.ports.vector import Found, RankAsk, Ranking
from helix_es.views.fusion import Ranked

K1, B = 1.2, 0.75  # Okapi BM25's usual constants

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
"""

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

# $1 view, $2 namespace, $3 sessions (NULL: all), $4 after, $5 before, $6 where (jsonb, NULL: none),
# $7 candidates, $8 the query (a vector or text).
_FILTER = """v.view = $1 AND v.namespace = $2
    AND ($3::text[] IS NULL OR v.session_id = ANY($3::text[]))
    AND ($4::timestamptz IS NULL OR coalesce(v.occurred_at, v.event_time) > $4)
    AND ($5::timestamptz IS NULL OR coalesce(v.occurred_at, v.event_time) < $5)
    AND ($6::jsonb IS NULL OR v.message -> 'metadata' @> $6::jsonb)"""

_COLUMNS = """v.topic, v.partition, v."offset", v.session_id, coalesce(v.occurred_at, v.event_time) AS said,
    v.message::text AS message"""

# The inner ORDER BY is the HNSW index's (distance alone); the outer one breaks ties in applied order.
VECTOR = f"""
SELECT * FROM (
    SELECT {_COLUMNS}, 1 - (v.vec::vector({{d}}) <=> $8::vector({{d}})) AS score, v.version
    FROM helix_vectors v
    WHERE {_FILTER} AND v.dims = {{d}}
    ORDER BY v.vec::vector({{d}}) <=> $8::vector({{d}})
    LIMIT $7
) AS t ORDER BY t.score DESC, t.version, t.topic, t.partition, t."offset"
"""

# Lexemes of the query ($8) by PostgreSQL's own analyzer, OR-ed into a tsquery the GIN index serves.
KEYWORD = f"""
WITH q AS MATERIALIZED (
    SELECT DISTINCT u.lexeme FROM unnest(to_tsvector('english', $8::text)) AS u
), tq AS MATERIALIZED (
    SELECT string_agg(quote_literal(lexeme), ' | ')::tsquery AS query FROM q
), st AS MATERIALIZED (
    SELECT greatest(n.keyword_docs, 1)::float8 AS docs,
           greatest(n.keyword_words::float8 / greatest(n.keyword_docs, 1), 1) AS avgdl
    FROM helix_vector_namespaces n WHERE n.view = $1 AND n.namespace = $2
), m AS MATERIALIZED (
    SELECT v.topic, v.partition, v."offset", v.words, v.keywords FROM helix_vectors v, tq
    WHERE v.keywords @@ tq.query AND {_FILTER}
), tf AS MATERIALIZED (
    SELECT m.topic, m.partition, m."offset", m.words, u.lexeme, array_length(u.positions, 1)::float8 AS f
    FROM m, unnest(m.keywords) AS u WHERE u.lexeme IN (SELECT lexeme FROM q)
), df AS (
    SELECT lexeme, count(*)::float8 AS n FROM tf GROUP BY lexeme
), scored AS (
    SELECT tf.topic, tf.partition, tf."offset",
           sum(ln(1 + (st.docs - df.n + 0.5) / (df.n + 0.5))
               * tf.f * ({K1} + 1) / (tf.f + {K1} * (1 - {B} + {B} * tf.words / st.avgdl))) AS score
    FROM tf JOIN df USING (lexeme) CROSS JOIN st
    GROUP BY tf.topic, tf.partition, tf."offset"
    ORDER BY score DESC, tf.topic, tf.partition, tf."offset" LIMIT $7
)
SELECT {_COLUMNS}, s.score
FROM scored s JOIN helix_vectors v ON v.view = $1 AND v.namespace = $2 AND v.topic = s.topic
    AND v.partition = s.partition AND v."offset" = s."offset"
ORDER BY s.score DESC, v.topic, v.partition, v."offset"
"""

# Oldest first (the seed's search order): event time, then log position.
SUBSTRING = f"""
SELECT {_COLUMNS}, 1.0::float8 AS score
FROM helix_vectors v
WHERE {_FILTER} AND strpos(lower(v.message ->> 'content'), lower($8::text)) > 0
ORDER BY v.event_time, v.topic, v.partition, v."offset"
LIMIT $7
"""

_CHECKPOINT = 'SELECT "offset" FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3'


def _filters(view: str, namespace: str, ask: RankAsk) -> list[Any]:
    r = ask.recall
    sessions = None if r.sessions is None else sorted(r.sessions)
    where = None if not r.where else json.dumps(dict(r.where))
    return [view, namespace, sessions, r.after, r.before, where, ask.depth]


async def rank(
    conn: asyncpg.Connection, view: str, namespace: str, ask: RankAsk, want: Position | None, decode: Any
) -> Ranking | None:
    """Each ranker `ask` names, in one repeatable-read snapshot; None while `want` is not applied.

    `decode` turns a row's JSON into a Message (the store's cached decoder)."""
    args = _filters(view, namespace, ask)
    queries: list[tuple[str, str, Any]] = []
    if ask.vector is not None and ask.vector.any():
        queries.append(("vector", VECTOR.format(d=len(ask.vector)), ask.vector))
    if ask.keywords is not None:
        queries.append(("keyword", KEYWORD, ask.keywords))
    if ask.substring is not None:
        queries.append(("substring", SUBSTRING, ask.substring))
    ids: dict[tuple[str, int, int], int] = {}
    found: dict[int, Found] = {}
    ranked: list[Ranked] = []
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        if want is not None:
            done = await conn.fetchval(_CHECKPOINT, view, want.topic, want.partition)
            if done is None or done < want.offset:
                return None
        for name, sql, query in queries:
            rows = await conn.fetch(sql, *args, query)
            order, scores = [], []
            for row in rows:
                key = (row["topic"], row["partition"], row["offset"])
                i = ids.setdefault(key, len(ids))
                if i not in found:
                    position = Position(*key)
                    found[i] = Found(decode(row["message"]), row["session_id"], position, row["said"])
                order.append(i)
                scores.append(float(row["score"]))
            ranked.append(Ranked(name, np.array(order, np.int64), np.array(scores, np.float32)))
    return Ranking(tuple(ranked), found)
