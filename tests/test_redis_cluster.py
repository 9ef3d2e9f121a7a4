"""Redis Cluster: every Redis store on a 6-node cluster (3 masters, 3 replicas), given one node's URL.

The conformance suites of `tests/contracts` run here on the cluster (`redis_cluster_url`: the
cluster `scripts/services redis-cluster up` starts). The fault test in tests/test_redis_failover.py
kills a master of a private cluster.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from redis.asyncio.cluster import RedisCluster

from helix_es.model import names
from helix_es.projection.protocol import Projection
from helix_es.stores.ports import AliasStore, IdempotencyStore, KeyStore, ViewStore
from helix_es.stores.redis.aliases import RedisAliases
from helix_es.stores.redis.idempotency import RedisIdempotency
from helix_es.stores.redis.keys import RedisKeyStore
from helix_es.stores.redis.long_term import RedisLongTerm, prefix
from helix_es.stores.redis.pool import connect
from helix_es.stores.redis.views import RedisStore
from tests.contracts.alias_store import AliasStoreContract, NewAliases
from tests.contracts.idempotency_store import IdempotencyStoreContract, NewStore
from tests.contracts.key_store import KeyStoreContract, NewKeys
from tests.contracts.long_term import LongTermContract
from tests.contracts.view_store import ViewStoreContract


async def test_a_cluster_node_url_opens_a_cluster_client(redis_cluster_url: str, redis_url: str) -> None:
    cluster, plain = await connect(redis_cluster_url), await connect(redis_url)
    try:
        assert isinstance(cluster, RedisCluster)
        assert not isinstance(plain, RedisCluster)
        assert len(cluster.get_primaries()) == 3
    finally:
        await cluster.aclose()
        await plain.aclose()


class TestClusterViewStore(ViewStoreContract):
    @pytest.fixture
    async def store(self, redis_cluster_url: str) -> AsyncIterator[ViewStore]:
        s = RedisStore(redis_cluster_url)
        yield s
        await s.close()


class TestClusterAliases(AliasStoreContract):
    kind, cheap, shared = "redis", False, True

    @pytest.fixture
    async def new_aliases(self, redis_cluster_url: str) -> AsyncIterator[NewAliases]:
        made: list[AliasStore] = []

        def new() -> AliasStore:
            made.append(RedisAliases(redis_cluster_url))
            return made[-1]

        yield new
        for store in made:
            await store.close()


class TestClusterKeyStore(KeyStoreContract):
    kind = "redis"

    @pytest.fixture
    async def new_keys(self, redis_cluster_url: str) -> AsyncIterator[NewKeys]:
        made: list[KeyStore] = []

        def new() -> KeyStore:
            made.append(RedisKeyStore(redis_cluster_url))
            return made[-1]

        yield new
        for store in made:
            await store.close()


class TestClusterIdempotency(IdempotencyStoreContract):
    kind = "redis"

    @pytest.fixture
    async def new_store(self, redis_cluster_url: str) -> AsyncIterator[NewStore]:
        made: list[IdempotencyStore] = []

        def new(remembered: int) -> IdempotencyStore:
            made.append(RedisIdempotency(redis_cluster_url, remembered))
            return made[-1]

        yield new
        for store in made:
            await store.close()


class TestClusterLongTerm(LongTermContract):
    refuses_after_a_lost_checkpoint = True

    @pytest.fixture
    async def store(self, redis_cluster_url: str) -> AsyncIterator[Projection]:
        s = RedisLongTerm(redis_cluster_url)
        yield s
        await s.close()

    async def stored_sessions(self, store: Projection, namespace: str) -> list[str]:
        assert isinstance(store, RedisLongTerm)
        client = await connect(store.url)
        try:
            base = prefix(namespace, store.name, cluster=True)  # one slot per namespace
            members = await client.zrange(base + "index", 0, -1)
            values = [await client.get(base.encode() + b"m:" + m) for m in members]
            return [json.loads(v)["session_id"] for v in values]
        finally:
            await client.aclose()

    async def forget_checkpoint(self, store: Projection, topic: str, partition: int) -> None:
        assert isinstance(store, RedisLongTerm)
        client = await connect(store.url)
        try:
            await client.hdel(names.checkpoint_key(store.name), f"{topic}:{partition}")
        finally:
            await client.aclose()
