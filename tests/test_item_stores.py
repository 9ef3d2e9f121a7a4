"""LangGraph store item views (memory, PostgreSQL, Redis, Redis Cluster): the suite is
`tests.contracts.item_store.ItemStoreContract`; each class here runs it on one adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helix_es.stores.memory.items import MemoryItems
from helix_es.stores.postgres.items import PostgresItems
from helix_es.stores.redis.items import RedisItems
from helix_es.views.items import Items
from tests.contracts import each_closed
from tests.contracts.item_store import INDEX, ItemStoreContract, OpenItems


class TestMemoryItems(ItemStoreContract):
    @pytest.fixture
    async def opened(self) -> AsyncIterator[OpenItems]:
        one = MemoryItems(Items(index=INDEX))  # the one place a memory store has: itself
        yield lambda: one
        await one.close()


class TestPostgresItems(ItemStoreContract):
    @pytest.fixture
    async def opened(self, postgres_dsn: str) -> AsyncIterator[OpenItems]:
        async with each_closed(lambda: PostgresItems(postgres_dsn, Items(store="postgres", index=INDEX))) as new:
            yield new


class RedisItemsContract(ItemStoreContract):
    url_fixture = "redis_url"

    @pytest.fixture
    async def opened(self, request: pytest.FixtureRequest) -> AsyncIterator[OpenItems]:
        url = request.getfixturevalue(self.url_fixture)
        async with each_closed(lambda: RedisItems(url, Items(store="redis", index=INDEX))) as new:
            yield new


class TestRedisItems(RedisItemsContract):
    pass


class TestRedisClusterItems(RedisItemsContract):
    url_fixture = "redis_cluster_url"
