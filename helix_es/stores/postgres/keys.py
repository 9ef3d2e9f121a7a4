"""Data keys in PostgreSQL: `helix_keys`, one live key per session, erased rows kept as tombstones."""

from __future__ import annotations

from datetime import datetime

from helix_es.stores.ports import KeyRow
from helix_es.stores.postgres.pool import Pg, index_if_missing

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_keys (
    namespace text NOT NULL,
    session_id text NOT NULL,
    key_id text NOT NULL,
    wrapped_key bytea,
    wrapped_by text,
    created_at timestamptz NOT NULL,
    erased_at timestamptz,
    PRIMARY KEY (namespace, session_id, key_id),
    CHECK ((erased_at IS NULL) = (wrapped_key IS NOT NULL))
);
""" + index_if_missing(
    "helix_keys_live",
    "CREATE UNIQUE INDEX helix_keys_live ON helix_keys (namespace, session_id) WHERE erased_at IS NULL",
)

_PG_ROWS = """
SELECT key_id, wrapped_key, wrapped_by, created_at, erased_at FROM helix_keys
WHERE namespace = $1 AND session_id = $2 ORDER BY created_at, key_id
"""

# No conflict target: the primary key or the one-live-key index; a racing writer's key wins.
_PG_INSERT = """
INSERT INTO helix_keys (namespace, session_id, key_id, wrapped_key, wrapped_by, created_at)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT DO NOTHING
"""

_PG_ERASE = """
UPDATE helix_keys SET wrapped_key = NULL, erased_at = $3
WHERE namespace = $1 AND session_id = $2 AND erased_at IS NULL RETURNING key_id
"""


class PostgresKeyStore:
    """`helix_keys` in PostgreSQL. An erased row keeps its id and `erased_at`; its wrapped key is NULL.

    PostgreSQL keeps the old row version until VACUUM reclaims it, and WAL and backups keep it
    longer: all useless without the master key (see docs/operations/erasure.md on backups).
    """

    kind = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pg = Pg(dsn)

    def __repr__(self) -> str:
        return "PostgresKeyStore()"  # a DSN may hold a password

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        pool = await self.pg.pool(_PG_SCHEMA)
        found = await pool.fetch(_PG_ROWS, namespace, session_id)
        return [
            KeyRow(
                namespace, session_id, r["key_id"], r["wrapped_key"], r["wrapped_by"], r["created_at"], r["erased_at"]
            )
            for r in found
        ]

    async def insert(self, row: KeyRow) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        await pool.execute(
            _PG_INSERT, row.namespace, row.session_id, row.key_id, row.wrapped_key, row.wrapped_by, row.created_at
        )

    async def erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        pool = await self.pg.pool(_PG_SCHEMA)
        return [r["key_id"] for r in await pool.fetch(_PG_ERASE, namespace, session_id, at)]

    async def close(self) -> None:
        await self.pg.close()
