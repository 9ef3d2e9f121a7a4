"""Redis Cluster: every Redis store on a 6-node cluster (3 masters, 3 replicas), given one node's URL.

The conformance suites of `tests/contracts` run here on the cluster (`redis_cluster_url`: the
cluster `scripts/services redis-cluster up` starts). The fault test at the end kills a master of
a private cluster of its own under load and compares every view with a clean fold of the log.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster

from helix_es import Message, open_memory
from helix_es.stores.ports import AliasStore, IdempotencyStore, KeyStore, ViewStore
from helix_es.stores.redis.aliases import RedisAliases
from helix_es.stores.redis.idempotency import RedisIdempotency
from helix_es.stores.redis.keys import RedisKeyStore
from helix_es.stores.redis.pool import connect
from helix_es.stores.redis.views import RedisStore
from helix_es.views.sliding_window import SlidingWindow
from tests.conftest import ROOT, _missing, unique, wait_for
from tests.contracts.alias_store import AliasStoreContract, NewAliases
from tests.contracts.idempotency_store import IdempotencyStoreContract, NewStore
from tests.contracts.key_store import KeyStoreContract, NewKeys
from tests.contracts.view_store import ViewStoreContract
from tests.test_faults import Projector, assert_views_match_log, caught_up, running


async def test_a_cluster_node_url_opens_a_cluster_client(redis_cluster_url: str, redis_url: str) -> None:
    cluster, plain = await connect(redis_cluster_url), await connect(redis_url)
    try:
        assert isinstance(cluster, RedisCluster)
        assert not isinstance(plain, RedisCluster)
        assert len(cluster.get_primaries()) == 3
    finally:
        await cluster.aclose()
        await plain.aclose()


async def test_hundreds_of_reads_at_once_wait_for_a_connection(redis_cluster_url: str) -> None:
    # A projector reads the checkpoints of every partition at once; they all live on one node.
    store = RedisStore(redis_cluster_url)
    try:
        view = SlidingWindow(3)
        found = await asyncio.gather(*(store.checkpoint(view, unique("t"), p) for p in range(500)))
        assert found == [None] * 500
    finally:
        await store.close()


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


# --- a master killed under load -----------------------------------------------------------------


@dataclass
class PrivateCluster:
    url: str
    run: Path  # its nodes' directories: <run>/redis-cluster/<port>/


@pytest.fixture(scope="module")
def private_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrivateCluster]:
    """A cluster of its own (ports 7010-7015), since the fault test kills one of its masters."""
    if shutil.which("redis-server") is None:
        _missing("redis-server (to start a private Redis Cluster)", "HELIX_REDIS_CLUSTER_URL")
    home = tmp_path_factory.mktemp("redis-cluster")
    env = {**os.environ, "HELIX_SERVICES_HOME": str(home), "HELIX_REDIS_CLUSTER_PORT": str(PRIVATE_PORT)}
    services = ["bash", str(ROOT / "scripts" / "services")]
    up = subprocess.run([*services, "redis-cluster", "up"], env=env, capture_output=True, text=True, timeout=120)
    if up.returncode != 0:
        _missing(f"a private Redis Cluster ({up.stderr.strip()[-300:]})", "HELIX_REDIS_CLUSTER_URL")
    try:
        yield PrivateCluster(up.stdout.strip().rpartition("=")[2], home / "run")
    finally:
        subprocess.run([*services, "redis-cluster", "down"], env=env, capture_output=True, timeout=120)


PRIVATE_PORT = 7010


class SharedBrokerProjector(Projector):
    """tests.test_faults' projector, with a session timeout the shared broker accepts (its minimum: 6 s)."""

    def start(self) -> None:
        cmd = [sys.executable, "-m", "helix_es.cli", "project", "--config", str(self.config), "--progress", "2"]
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=self.env)


async def _masters(url: str) -> list[int]:
    client = await connect(url)
    try:
        assert isinstance(client, RedisCluster)
        return sorted(int(node.port) for node in client.get_primaries())
    finally:
        await client.aclose()


async def _cluster_ok(port: int) -> bool:
    client = aioredis.Redis(host="127.0.0.1", port=port)
    try:
        info = await client.execute_command("CLUSTER", "INFO")
        text = info.decode() if isinstance(info, bytes) else str(info)
        return "cluster_state:ok" in text
    except redis_errors.RedisError:
        return False
    finally:
        await client.aclose()


@pytest.mark.timeout(600)
async def test_a_master_killed_under_load_fails_over_and_every_view_equals_a_clean_fold(
    private_cluster: PrivateCluster, kafka_bootstrap: str, tmp_path: Path
) -> None:
    """16 sessions add as fast as they can through Kafka while a `helix-es project` process folds four
    Redis views into the cluster; one master (not the URL's node) is SIGKILLed, its replica takes over,
    the adds go on. The projector rides the failover out (its writes retry), and afterwards every view
    equals a clean fold of the log: nothing lost, nothing applied twice."""
    url = private_cluster.url
    prefix, ns = unique("rcf"), unique("ns")
    views: list[dict[str, Any]] = [
        {"type": "sliding-window", "window_size": 4, "tool_pairs": "split"},
        {"type": "token-window", "max_tokens": 40},
        {"type": "conversation"},
        {"type": "long-term"},
    ]
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 4, "topic_prefix": prefix},
        "agents": [
            {"id": f"a{i}", "memory": {"namespace": ns, "read_timeout": 120, "store": "redis", "redis_url": url, **v}}
            for i, v in enumerate(views)
        ],
    }
    sessions = [f"s{i}" for i in range(16)]
    added: Counter[str] = Counter()
    stop_adding = asyncio.Event()

    async def writer(sid: str) -> None:
        async with open_memory(cfg, session_id=sid, agent=0) as mem:
            while not stop_adding.is_set():
                await mem.add(Message("user" if added[sid] % 2 else "assistant", f"{sid} says {added[sid]}"))
                added[sid] += 1
                await asyncio.sleep(0.05)

    victim = next(p for p in await _masters(url) if p != PRIVATE_PORT)
    pid = int((private_cluster.run / "redis-cluster" / str(victim) / "redis.pid").read_text())
    projector = SharedBrokerProjector(cfg, tmp_path)
    with running(projector):
        writers = asyncio.gather(*(writer(s) for s in sessions))
        try:
            await wait_for(lambda: asyncio.sleep(0, sum(added.values()) >= 300), 60, "adds before the failover")
            await asyncio.sleep(2)  # the projector writes to every master meanwhile
            os.kill(pid, signal.SIGKILL)
            killed_at = time.monotonic()
            before = sum(added.values())
            await wait_for(lambda: _promoted(url, victim), 60, "a replica to take the dead master's slots")
            failover = time.monotonic() - killed_at
            await wait_for(lambda: asyncio.sleep(0, sum(added.values()) >= before + 300), 60, "adds after it")
        finally:
            stop_adding.set()
            await asyncio.wait_for(writers, 60)
        await caught_up(projector, 180)
        assert projector.alive(), projector.tail()
        records = await assert_views_match_log(cfg, ns, what=" after a master was killed")
        assert len(records) == sum(added.values())
        assert projector.stop() == 0, projector.tail()
    warnings = [line for line in projector.output().splitlines() if "WARNING" in line]
    print(f"failover in {failover:.1f} s; {len(records)} events; projector warnings: {len(warnings)} {warnings[:3]}")


async def _promoted(url: str, victim: int) -> bool:
    # Cluster state ok again (seen from the URL's node) with the victim no longer among the masters.
    if not await _cluster_ok(PRIVATE_PORT):
        return False
    try:
        return victim not in await _masters(url)
    except redis_errors.RedisError:
        return False
