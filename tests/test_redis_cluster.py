"""Redis Cluster: every Redis store on a 6-node cluster (3 masters, 3 replicas), given one node's URL.

The conformance suites of `tests/contracts` run here on the cluster (`redis_cluster_url`: the
cluster `scripts/services redis-cluster up` starts). The fault test in tests/test_redis_failover.py
kills a master of a private cluster.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from redis.asyncio.cluster import RedisCluster

from helix_es.stores.ports import ViewStore
from helix_es.stores.redis.pool import connect
from helix_es.stores.redis.views import RedisStore
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
