"""Aliases in PostgreSQL: `helix_aliases`, `helix_targets` and `helix_served`."""

from __future__ import annotations

from helix_es.stores.postgres.pool import Pg

_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS helix_aliases (
    view text PRIMARY KEY,
    target text NOT NULL,
    switched_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS helix_targets (
    view text NOT NULL,
    target text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (view, target)
);
CREATE TABLE IF NOT EXISTS helix_served (
    view text NOT NULL,
    target text NOT NULL,
    until timestamptz NOT NULL,
    PRIMARY KEY (view, target)
);
"""


class PostgresAliases:
    kind = "postgres"
    cheap = False

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.pg = Pg(dsn)

    async def get(self, alias: str) -> str | None:
        pool = await self.pg.pool(_PG_SCHEMA)
        target: str | None = await pool.fetchval("SELECT target FROM helix_aliases WHERE view = $1", alias)
        return target

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        pool = await self.pg.pool(_PG_SCHEMA)
        async with pool.acquire() as conn, conn.transaction():
            # One switch of an alias at a time; readers see the old row or the new one, never neither.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('helix_aliases:' || $1))", alias)
            current = await conn.fetchval("SELECT target FROM helix_aliases WHERE view = $1", alias) or base
            if current != expect:
                return str(current)
            await conn.execute(
                "INSERT INTO helix_aliases (view, target) VALUES ($1, $2) "
                "ON CONFLICT (view) DO UPDATE SET target = excluded.target, switched_at = now()",
                alias,
                target,
            )
            await conn.execute(
                "INSERT INTO helix_targets (view, target) VALUES ($1, $2) ON CONFLICT DO NOTHING", alias, target
            )
        return None

    async def targets(self, alias: str) -> set[str]:
        pool = await self.pg.pool(_PG_SCHEMA)
        return {r["target"] for r in await pool.fetch("SELECT target FROM helix_targets WHERE view = $1", alias)}

    async def add_target(self, alias: str, target: str) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        await pool.execute(
            "INSERT INTO helix_targets (view, target) VALUES ($1, $2) ON CONFLICT DO NOTHING", alias, target
        )

    async def forget_target(self, alias: str, target: str) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        await pool.execute("DELETE FROM helix_targets WHERE view = $1 AND target = $2", alias, target)

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        pool = await self.pg.pool(_PG_SCHEMA)
        if ttl > 0:
            await pool.execute(
                "INSERT INTO helix_served (view, target, until) VALUES ($1, $2, now() + make_interval(secs => $3)) "
                "ON CONFLICT (view, target) DO UPDATE SET until = greatest(helix_served.until, excluded.until)",
                alias,
                target,
                float(ttl),
            )
        else:
            await pool.execute("DELETE FROM helix_served WHERE view = $1 AND target = $2", alias, target)

    async def served(self, alias: str) -> set[str]:
        pool = await self.pg.pool(_PG_SCHEMA)
        rows = await pool.fetch("SELECT target FROM helix_served WHERE view = $1 AND until > now()", alias)
        return {r["target"] for r in rows}

    async def close(self) -> None:
        await self.pg.close()
