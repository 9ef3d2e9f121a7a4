"""RedisItems on one server and on a Redis Cluster, past the port's suite (tests/test_item_stores.py):
its keys, a replay its path guards alone skip, a stale guard loaded again, a lost checkpoint refused."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from helix_es.model import names
from helix_es.model.events import MessageAdded
from helix_es.model.message import Message
from helix_es.stores.memory.items import MemoryItems
from helix_es.stores.ports import CheckpointLost
from helix_es.stores.redis import items as items_module
from helix_es.stores.redis.items import RedisItems, prefix
from helix_es.views.items import Items, session_of
from tests.conftest import unique
from tests.contracts.item_store import INDEX, PAYLOADS, T0, A, B, C, Of, batch, reads

VIEW = Items(store="redis", index=INDEX)


@pytest.fixture(params=["redis", "redis-cluster"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url"))


@pytest.fixture
async def opened(url: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Callable[[], RedisItems]]:
    monkeypatch.setattr(items_module, "PAGE", 2)  # a search over the 3 paths below reads 2 pages
    made: list[RedisItems] = []

    def new() -> RedisItems:
        made.append(RedisItems(url, VIEW))
        return made[-1]

    yield new
    for store in made:
        await store.close()


async def everything(store: RedisItems, ns: str) -> dict[str, Any]:
    """Every key under the namespace's prefix and its contents: what a replay must leave alone."""
    client = await store._client()
    out: dict[str, Any] = {}
    async for key in client.scan_iter(match=prefix(ns, store.name) + "*", count=1000):
        out[key.decode()] = await client.hgetall(key)
    return out


async def test_a_replay_changes_nothing_even_when_the_checkpoint_lags(opened: Callable[[], RedisItems]) -> None:
    ns, topic = unique("items"), unique("t")
    records = batch(ns, topic, PAYLOADS)
    store = opened()
    assert (await store.apply(records)).events == 9  # every item op, clear included; the message is none
    before = await everything(store, ns)
    head = prefix(ns, store.name)
    assert session_of(C) == "docs/a b/ü%2F%25%7B%7D"  # a path's id: its labels escaped, joined by "/"
    assert set(before) == {head + "applied"} | {f"{head}{h}:{session_of(p)}" for p in (A, B, C) for h in "iv"}
    assert len({_slot(k) for k in before}) == 1

    assert (await store.apply(records)).events == 0  # the checkpoint covers it
    assert await everything(store, ns) == before
    # A projector that never saw the checkpoint, after it was lost: the path guards alone skip the batch.
    await (await store._client()).hdel(names.checkpoint_key(store.name), f"{topic}:0")
    fresh = opened()
    assert await fresh.checkpoint(topic, 0) is None
    assert (await fresh.apply(records)).events == 0
    assert await everything(fresh, ns) == before
    assert await fresh.checkpoint(topic, 0) == len(records) - 1
    # Half of it again: still the same state. A batch of no item ops only moves the checkpoint.
    assert (await fresh.apply(records[3:7])).events == 0
    assert await everything(fresh, ns) == before
    assert (await fresh.apply(batch(ns, topic, [Of(A, MessageAdded(Message("user", "hi")))], first=20))).events == 0
    assert await fresh.checkpoint(topic, 0) == 20
    assert await everything(fresh, ns) == before

    reference = MemoryItems(VIEW)
    await reference.apply(records)
    for now in (T0 + timedelta(seconds=30), T0 + timedelta(minutes=5)):  # before and after C's item expires
        assert await reads(fresh, ns, now) == await reads(reference, ns, now)
    assert await fresh.get_item(ns, C, "k1", T0 + timedelta(seconds=30)) is not None
    assert await fresh.get_item(ns, C, "k1", T0 + timedelta(minutes=5)) is None
    item = await fresh.get_item(ns, A, "k1", T0 + timedelta(seconds=30))
    assert item is not None and (item.created_at, item.updated_at) == (T0, T0 + timedelta(seconds=5))


async def test_a_guard_that_moved_since_the_load_is_loaded_again(opened: Callable[[], RedisItems]) -> None:
    ns, topic = unique("items"), unique("t")
    records = batch(ns, topic, PAYLOADS)
    first, racer = opened(), opened()
    await first.apply(records[:3])
    loaded = first._run

    async def racing(script: str, keys: Any, args: Any) -> Any:
        reply = await loaded(script, keys, args)
        if script == "read":  # another projector applies the same events between our load and our write
            first._run = loaded  # type: ignore[method-assign]
            await racer.apply(records[3:6])
        return reply

    first._run = racing  # type: ignore[method-assign]
    assert (await first.apply(records[3:6])).events == 0  # its second load saw the racer's guards
    reference = MemoryItems(VIEW)
    await reference.apply(records[:6])
    now = T0 + timedelta(seconds=30)
    assert await reads(first, ns, now) == await reads(reference, ns, now)


async def test_a_lost_checkpoint_refuses_the_write(opened: Callable[[], RedisItems]) -> None:
    ns, topic = unique("items"), unique("t")
    records = batch(ns, topic, PAYLOADS)
    store = opened()
    await store.apply(records[:3])
    before = await everything(store, ns)
    await (await store._client()).hdel(names.checkpoint_key(store.name), f"{topic}:0")  # as a FLUSHALL would
    with pytest.raises(CheckpointLost):
        await store.apply(records[3:])
    assert await everything(store, ns) == before
    assert await store.checkpoint(topic, 0) is None


def _slot(key: str) -> int:
    from redis.crc import key_slot

    return int(key_slot(key.encode()))


async def test_the_store_opens_a_cluster_client_on_a_cluster_node(redis_cluster_url: str) -> None:
    store = RedisItems(redis_cluster_url, VIEW)
    try:
        assert isinstance(await store._client(), RedisCluster)
    finally:
        await store.close()
