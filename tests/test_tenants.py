"""Many namespaces on one projector: new ones join without a rebalance, idle partitions wake at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from helix_es import Message, load_config, open_memory
from helix_es.log.live import tiers
from helix_es.log.live.source import KafkaLive
from helix_es.projection.session import SessionProjection
from helix_es.stores.redis.views import RedisStore
from helix_es.views.base import View
from projectors.runner import Projector
from tests.conftest import unique, wait_for


def config(log: dict[str, Any], redis_url: str, namespace: str, consistency: str) -> dict[str, Any]:
    memory = {
        "type": "sliding-window",
        "window_size": 3,
        "store": "redis",
        "redis_url": redis_url,
        "namespace": namespace,
        "consistency": consistency,
        "read_timeout": 30,
    }
    return {"log": log, "memory": memory}


async def test_new_namespaces_join_without_a_rebalance_and_idle_partitions_wake(
    kafka_bootstrap: str, redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tiers, "IDLE_SECONDS", 1.5)  # so that partitions go idle within the test
    prefix, head = unique("tn"), unique("tn")
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "topic_prefix": prefix, "partitions": 2}
    spaces = [f"{head}-{i}" for i in range(10)]

    async def add(ns: str, text: str, consistency: str = "read-your-writes") -> list[str]:
        async with open_memory(config(log, redis_url, ns, consistency), session_id="s") as mem:
            await mem.add(Message("user", text))
            return [m.content for m in await mem.get()] if consistency != "eventual" else []

    for ns in spaces[:5]:  # written before the projector starts
        await add(ns, f"before in {ns}", "eventual")
    view = load_config(config(log, redis_url, spaces[0], "eventual")).memory.view
    assert isinstance(view, View)
    store = RedisStore(redis_url)
    projector = Projector(
        SessionProjection(view, store), bootstrap_servers=kafka_bootstrap, topic_prefix=prefix, namespaces=[f"{head}-*"]
    )
    stop = asyncio.Event()
    task = asyncio.create_task(projector.run(stop))
    try:
        await wait_for(lambda: _assigned(projector, 10), 60, "the first five namespaces' partitions")
        live = projector.live
        assert isinstance(live, KafkaLive)
        deals = live.shards.deals
        for ns in spaces[5:]:  # new namespaces while it runs: each one's first add is read back
            assert await add(ns, f"first in {ns}") == [f"first in {ns}"]
        assert len(projector.progress.assigned) == 20
        assert live.shards.deals == deals, "a new namespace's topic rebalanced the group"

        tiered = live.tiers
        await wait_for(lambda: _all_cold(tiered), 30, "every partition to go idle")
        for ns in spaces:  # an idle partition's next record wakes it
            got = await add(ns, f"again in {ns}")
            assert got[-1] == f"again in {ns}" and len(got) == 2, got
        assert tiered._hot, "the partitions that had records again are fetched apart"
        assert live.shards.deals == deals
    finally:
        stop.set()
        await task
        await store.close()


async def _assigned(projector: Projector, n: int) -> bool:
    return len(projector.progress.assigned) >= n


async def _all_cold(tiered: tiers.Tiers) -> bool:
    return not tiered._hot
