"""The long-term view kept as rows (`LongTermRows`: its fold over any `RowStore`) passes the long-term
contract on every row store: the view's meaning lives in its fold, and no store adapter knows it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncpg
import pytest

from helix_es.model import names
from helix_es.projection.long_term import LongTermRows
from helix_es.projection.protocol import Projection
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.stores.redis.rows import RedisRows
from helix_es.views.long_term_rows import tables
from tests.conftest import copy_always
from tests.contracts.long_term import LongTermContract

TABLE = "rows_long_term"  # apart from the long-term adapters' own table


async def _sessions(store: Projection, namespace: str) -> list[str]:
    assert isinstance(store, LongTermRows)
    return [r["session_id"] for r in await store.rows(namespace)]


class RedisRowsLongTerm(LongTermContract):
    refuses_after_a_lost_checkpoint = True  # Redis loses checkpoints with their data: refused once
    url_fixture = "redis_url"

    @pytest.fixture
    async def store(self, request: pytest.FixtureRequest) -> AsyncIterator[Projection]:
        url = request.getfixturevalue(self.url_fixture)
        s = LongTermRows(RedisRows(url, "long-term", tables(TABLE)), TABLE)
        yield s
        await s.close()

    async def stored_sessions(self, store: Projection, namespace: str) -> list[str]:
        return await _sessions(store, namespace)

    async def forget_checkpoint(self, store: Projection, topic: str, partition: int) -> None:
        assert isinstance(store, LongTermRows) and isinstance(store.store, RedisRows)
        await store.store.redis.hdel(names.checkpoint_key(store.name), f"{topic}:{partition}")


class TestRedisRowsLongTerm(RedisRowsLongTerm):
    pass


class TestRedisClusterRowsLongTerm(RedisRowsLongTerm):
    url_fixture = "redis_cluster_url"


class TestPostgresRowsLongTerm(LongTermContract):
    @pytest.fixture
    async def store(self, postgres_dsn: str) -> AsyncIterator[Projection]:
        s = LongTermRows(PostgresRows(postgres_dsn, "long-term", tables(TABLE)), TABLE)
        yield s
        await s.close()

    async def stored_sessions(self, store: Projection, namespace: str) -> list[str]:
        return await _sessions(store, namespace)

    async def forget_checkpoint(self, store: Projection, topic: str, partition: int) -> None:
        assert isinstance(store, LongTermRows) and isinstance(store.store, PostgresRows)
        conn = await asyncpg.connect(store.store.dsn)
        try:
            await conn.execute(
                "DELETE FROM helix_checkpoints WHERE view = $1 AND topic = $2 AND partition = $3",
                store.name,
                topic,
                partition,
            )
        finally:
            await conn.close()


class TestPostgresCopyRowsLongTerm(TestPostgresRowsLongTerm):
    """Every run of new rows by COPY, as a rebuild's batches write them."""

    @pytest.fixture
    async def store(self, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Projection]:
        copy_always(monkeypatch)
        s = LongTermRows(PostgresRows(postgres_dsn, "long-term", tables(TABLE)), TABLE)
        yield s
        await s.close()
