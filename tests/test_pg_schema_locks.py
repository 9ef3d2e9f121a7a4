"""Opening a PostgreSQL store on tables that exist takes no table lock: a `helix-es lag`, a client or a
restarted projector does not queue behind the writes in flight, nor the next writes behind it.

`CREATE INDEX IF NOT EXISTS` takes its table's SHARE lock before it looks for the index, and `ALTER
TABLE ... ADD COLUMN IF NOT EXISTS` an ACCESS EXCLUSIVE one: each open waited for every open write
transaction on the table (the crash stress's lag polls stalled over a minute behind projectors)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg
import pytest

from helix_es.stores.postgres.checkpoints import PostgresCheckpoints
from helix_es.stores.postgres.idempotency import PostgresIdempotency
from helix_es.stores.postgres.items import PostgresItems
from helix_es.stores.postgres.keys import PostgresKeyStore
from helix_es.stores.postgres.vector import PostgresVectorStore


def _checkpoints(dsn: str) -> tuple[Any, Callable[[Any], Awaitable[object]]]:
    return PostgresCheckpoints(dsn), lambda s: s.checkpoint("t", 0)


def _items(dsn: str) -> tuple[Any, Callable[[Any], Awaitable[object]]]:
    return PostgresItems(dsn), lambda s: s.checkpoint("t", 0)


def _idempotency(dsn: str) -> tuple[Any, Callable[[Any], Awaitable[object]]]:
    return PostgresIdempotency(dsn), lambda s: s.drop("v", ["no-such-namespace"])


def _keys(dsn: str) -> tuple[Any, Callable[[Any], Awaitable[object]]]:
    return PostgresKeyStore(dsn), lambda s: s.rows("ns", "s")


def _vectors(dsn: str) -> tuple[Any, Callable[[Any], Awaitable[object]]]:
    return PostgresVectorStore(dsn), lambda s: s.checkpoint("v", "t", 0)


STORES = {
    "helix_lg_checkpoints": _checkpoints,
    "helix_store_items": _items,
    "helix_idempotency": _idempotency,
    "helix_keys": _keys,
    "helix_vectors": _vectors,
}


@pytest.mark.parametrize("table", sorted(STORES))
async def test_opening_a_store_waits_for_no_write_in_flight(postgres_dsn: str, table: str) -> None:
    first, read = STORES[table](postgres_dsn)
    try:
        await read(first)  # the tables exist
    except Exception as exc:  # pgvector missing: nothing to open
        pytest.skip(f"{table}: {exc}")
    finally:
        await first.close()
    writer = await asyncpg.connect(postgres_dsn)
    try:
        async with writer.transaction():
            # A write in flight takes ROW EXCLUSIVE, as the projectors' do: held until the open is done.
            await writer.execute(f"LOCK TABLE {table} IN ROW EXCLUSIVE MODE")
            store, read = STORES[table](postgres_dsn)
            try:
                await asyncio.wait_for(read(store), 5)
            finally:
                await store.close()
    finally:
        await writer.close()
