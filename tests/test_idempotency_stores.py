"""Idempotency-key stores (memory, Redis, PostgreSQL): the suite is
`tests.contracts.idempotency_store.IdempotencyStoreContract`."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from helix_es.model import names
from helix_es.stores.memory.idempotency import MemoryIdempotency
from helix_es.stores.ports import Claim, IdempotencyStore, SessionKey
from helix_es.stores.postgres.idempotency import PostgresIdempotency
from helix_es.stores.redis.idempotency import RedisIdempotency
from tests.conftest import unique
from tests.contracts.idempotency_store import IdempotencyStoreContract, NewStore


class TestMemoryIdempotency(IdempotencyStoreContract):
    kind = "memory"
    shared = False

    @pytest.fixture
    async def new_store(self) -> AsyncIterator[NewStore]:
        yield lambda remembered: MemoryIdempotency(remembered)


class TestRedisIdempotency(IdempotencyStoreContract):
    kind = "redis"

    @pytest.fixture
    async def new_store(self, redis_url: str) -> AsyncIterator[NewStore]:
        made: list[IdempotencyStore] = []

        def new(remembered: int) -> IdempotencyStore:
            made.append(RedisIdempotency(redis_url, remembered))
            return made[-1]

        yield new
        for store in made:
            await store.close()

    async def test_keys_of_a_view_whose_sessions_expire_expire_with_them(self, redis_url: str) -> None:
        store = RedisIdempotency(redis_url)
        try:
            session, view = SessionKey(unique("idem"), "s"), unique("v")
            await store.claim(view, [Claim(session, "k", 1)], ttl=30)
            name = names.idempotency_key_name(session.namespace, session.session_id, view)
            assert 0 < await store.redis.pttl(name) <= 30_000
        finally:
            await store.close()


class TestPostgresIdempotency(IdempotencyStoreContract):
    kind = "postgres"

    @pytest.fixture
    async def new_store(self, postgres_dsn: str) -> AsyncIterator[NewStore]:
        made: list[IdempotencyStore] = []

        def new(remembered: int) -> IdempotencyStore:
            made.append(PostgresIdempotency(postgres_dsn, remembered))
            return made[-1]

        yield new
        for store in made:
            await store.close()
