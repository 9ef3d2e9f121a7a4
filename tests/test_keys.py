"""Data-key stores (file, Redis, PostgreSQL): the suite is `tests.contracts.key_store.KeyStoreContract`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from helix_es.stores.file.keys import FileKeyStore
from helix_es.stores.ports import KeyStore
from helix_es.stores.postgres.keys import PostgresKeyStore
from helix_es.stores.redis.keys import RedisKeyStore
from tests.contracts.key_store import KeyStoreContract, NewKeys


class TestFileKeyStore(KeyStoreContract):
    kind = "file"

    @pytest.fixture
    async def new_keys(self, tmp_path: Path) -> AsyncIterator[NewKeys]:
        made: list[KeyStore] = []

        def new() -> KeyStore:
            made.append(FileKeyStore(tmp_path / "keys"))
            return made[-1]

        yield new
        for store in made:
            await store.close()


class TestRedisKeyStore(KeyStoreContract):
    kind = "redis"

    @pytest.fixture
    async def new_keys(self, redis_url: str) -> AsyncIterator[NewKeys]:
        made: list[KeyStore] = []

        def new() -> KeyStore:
            made.append(RedisKeyStore(redis_url))
            return made[-1]

        yield new
        for store in made:
            await store.close()


class TestPostgresKeyStore(KeyStoreContract):
    kind = "postgres"

    @pytest.fixture
    async def new_keys(self, postgres_dsn: str) -> AsyncIterator[NewKeys]:
        made: list[KeyStore] = []

        def new() -> KeyStore:
            made.append(PostgresKeyStore(postgres_dsn))
            return made[-1]

        yield new
        for store in made:
            await store.close()
