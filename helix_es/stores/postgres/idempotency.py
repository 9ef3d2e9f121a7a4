"""Idempotency keys in PostgreSQL: `helix_idempotency`, one row per view, session and key."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from helix_es.model.events import REMEMBERED_KEYS
from helix_es.stores.ports import Claim
from helix_es.stores.postgres.pool import Pg, index_if_missing

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_idempotency (
    view text NOT NULL,
    namespace text NOT NULL,
    session_id text NOT NULL,
    key text NOT NULL,
    "offset" bigint NOT NULL,
    PRIMARY KEY (view, namespace, session_id, key)
);
""" + index_if_missing(
    "helix_idempotency_newest",
    'CREATE INDEX helix_idempotency_newest ON helix_idempotency (view, namespace, session_id, "offset")',
)

# A key's first event wins: of a batch the lowest offset, against the table whatever is there.
_INSERT = """
INSERT INTO helix_idempotency (view, namespace, session_id, key, "offset")
SELECT $1, t.ns, t.sid, t.k, min(t.o) FROM unnest($2::text[], $3::text[], $4::text[], $5::bigint[]) AS t(ns, sid, k, o)
GROUP BY t.ns, t.sid, t.k
ON CONFLICT DO NOTHING
"""

_FIRSTS = """
SELECT h.namespace, h.session_id, h.key, h."offset" FROM helix_idempotency h
JOIN unnest($2::text[], $3::text[], $4::text[]) AS t(ns, sid, k)
  ON (h.namespace, h.session_id, h.key) = (t.ns, t.sid, t.k)
WHERE h.view = $1
"""

# Keep each touched session's newest $4 keys.
_TRIM = """
DELETE FROM helix_idempotency h
USING (SELECT DISTINCT ns, sid FROM unnest($2::text[], $3::text[]) AS t(ns, sid)) s
WHERE h.view = $1 AND h.namespace = s.ns AND h.session_id = s.sid AND h."offset" < (
    SELECT i."offset" FROM helix_idempotency i WHERE i.view = $1 AND i.namespace = s.ns AND i.session_id = s.sid
    ORDER BY i."offset" DESC OFFSET $4 - 1 LIMIT 1
)
"""

_DROP = "DELETE FROM helix_idempotency WHERE view = $1 AND namespace = ANY($2::text[])"


class PostgresIdempotency:
    kind = "postgres"

    def __init__(self, dsn: str, remembered: int = REMEMBERED_KEYS) -> None:
        self.pg = Pg(dsn)
        self.remembered = remembered

    def __repr__(self) -> str:
        return "PostgresIdempotency()"  # a DSN may hold a password

    async def claim(self, view: str, claims: Sequence[Claim], *, ttl: float | None = None) -> list[int]:
        if not claims:
            return []
        ns = [c.key.namespace for c in claims]
        sid = [c.key.session_id for c in claims]
        keys = [c.idempotency_key for c in claims]
        pool = await self.pg.pool(_PG_SCHEMA)
        async with pool.acquire() as conn, conn.transaction():
            status = await conn.execute(_INSERT, view, ns, sid, keys, [c.offset for c in claims])
            rows = await conn.fetch(_FIRSTS, view, ns, sid, keys)
            if not status.endswith(" 0"):  # new keys: a session may be over what it remembers
                await conn.execute(_TRIM, view, ns, sid, self.remembered)
        firsts = {(r["namespace"], r["session_id"], r["key"]): r["offset"] for r in rows}
        return [int(firsts[(c.key.namespace, c.key.session_id, c.idempotency_key)]) for c in claims]

    async def drop(self, view: str, namespaces: Collection[str]) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        await pool.execute(_DROP, view, list(namespaces))

    async def close(self) -> None:
        await self.pg.close()
