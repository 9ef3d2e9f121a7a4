"""Alias stores (memory, Redis, PostgreSQL): the suite is `tests.contracts.alias_store.AliasStoreContract`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helix_es.stores.memory.aliases import MemoryAliases
from helix_es.stores.ports import AliasStore
from helix_es.stores.postgres.aliases import PostgresAliases
from helix_es.stores.redis.aliases import RedisAliases
from tests.contracts.alias_store import AliasStoreContract, NewAliases


class TestMemoryAliases(AliasStoreContract):
    kind, cheap, shared = "memory", True, False

    @pytest.fixture
    def new_aliases(self) -> NewAliases:
        return MemoryAliases


class TestRedisAliases(AliasStoreContract):
    kind, cheap, shared = "redis", False, True

    @pytest.fixture
    async def new_aliases(self, redis_url: str) -> AsyncIterator[NewAliases]:
        made: list[AliasStore] = []

        def new() -> AliasStore:
            made.append(RedisAliases(redis_url))
            return made[-1]

        yield new
        for store in made:
            await store.close()


class TestPostgresAliases(AliasStoreContract):
    kind, cheap, shared = "postgres", False, True

    @pytest.fixture
    async def new_aliases(self, postgres_dsn: str) -> AsyncIterator[NewAliases]:
        made: list[AliasStore] = []

        def new() -> AliasStore:
            made.append(PostgresAliases(postgres_dsn))
            return made[-1]

        yield new
        for store in made:
            await store.close()
