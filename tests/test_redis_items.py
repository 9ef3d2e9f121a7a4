"""RedisItems on one server and on a Redis Cluster: a replay is a no-op (path guards), results are
the in-process store's, a stale guard is loaded again, a lost checkpoint refuses, drop is scoped."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster

from helix_es.model import names
from helix_es.model.events import Event, ItemDeleted, ItemPut, MemoryCleared, MessageAdded, Position, Record
from helix_es.model.message import Message
from helix_es.providers.embed import EmbedSpec
from helix_es.stores.memory.items import MemoryItems
from helix_es.stores.ports import CheckpointLost, ItemStore
from helix_es.stores.redis import items as items_module
from helix_es.stores.redis.items import RedisItems, prefix
from helix_es.views.items import ItemIndex, Items, session_of
from tests.conftest import unique

T0 = datetime(2026, 1, 1, tzinfo=UTC)
VIEW = Items(store="redis", index=ItemIndex(EmbedSpec("hash", dims=16), ("text",)))


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


def put(path: tuple[str, ...], key: str, text: str, ttl: float | None = None) -> ItemPut:
    return ItemPut(path, key, json.dumps({"text": text, "n": len(text) % 3}), ttl_minutes=ttl)


def batch(ns: str, topic: str, payloads: list[Any], first: int = 0) -> list[Record]:
    out = []
    for i, p in enumerate(payloads):
        sid = session_of(p.namespace) if isinstance(p, ItemPut | ItemDeleted) else p.session
        event = Event(ns, sid, p.payload if hasattr(p, "payload") else p, timestamp=T0 + timedelta(seconds=first + i))
        out.append(Record(event, Position(topic, 0, first + i)))
    return out


class Of:
    """A payload of another session (a clear or a message), for `batch`."""

    def __init__(self, path: tuple[str, ...], payload: Any) -> None:
        self.session, self.payload = session_of(path), payload


A, B, C = ("users", "u1"), ("users", "u1", "notes"), ("docs", "a b", "ü/%{}")
PAYLOADS: list[Any] = [
    put(A, "k1", "ocean river"),
    put(A, "k2", "coffee tea"),
    put(B, "k1", "forest mountain"),
    put(C, "k1", "bread cheese", ttl=1),
    Of(A, MessageAdded(Message("user", "not an item"))),
    put(A, "k1", "ocean plane"),  # replaces k1, keeps its created_at
    ItemDeleted(A, "k2"),
    put(B, "k2", "train"),
    Of(B, MemoryCleared()),  # B's items all go
    put(B, "k3", "gamma delta"),
]


async def everything(store: RedisItems, ns: str) -> dict[str, Any]:
    """Every key under the namespace's prefix and its contents: what a replay must leave alone."""
    client = await store._client()
    out: dict[str, Any] = {}
    async for key in client.scan_iter(match=prefix(ns, store.name) + "*", count=1000):
        out[key.decode()] = await client.hgetall(key)
    return out


async def reads(store: ItemStore, ns: str, now: datetime) -> list[Any]:
    def shown(items: list[Any]) -> list[Any]:
        return [(i.namespace, i.key, i.value, i.created_at, i.updated_at, i.expires_at, i.score) for i in items]

    return [
        shown(await store.find_items(ns, (), None, 100, 0, now)),
        shown(await store.find_items(ns, ("users",), {"n": 0}, 100, 0, now)),
        shown(await store.find_items(ns, (), None, 3, 1, now, query="ocean tea")),
        shown([i for i in [await store.get_item(ns, p, k, now) for p in (A, B, C) for k in ("k1", "k2", "k3")] if i]),
        await store.item_namespaces(ns, [], None, 100, 0, now),
        await store.item_namespaces(ns, [("prefix", ("users",))], 1, 100, 0, now),
    ]


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


async def test_drop_removes_a_namespace_items_and_the_topics_checkpoints(opened: Callable[[], RedisItems]) -> None:
    store = opened()
    gone, kept = (unique("items"), unique("t")), (unique("items"), unique("t"))
    for ns, topic in (gone, kept):
        await store.apply(batch(ns, topic, PAYLOADS))
    await store.drop([gone[0]], [gone[1]])
    now = T0 + timedelta(seconds=30)
    assert await everything(store, gone[0]) == {}
    assert await store.find_items(gone[0], (), None, 100, 0, now) == []
    assert await store.checkpoint(gone[1], 0) is None
    assert await store.checkpoint(kept[1], 0) == len(PAYLOADS) - 1
    assert len(await store.find_items(kept[0], (), None, 100, 0, now)) == 3
    # Dropped, the namespace folds afresh from the log.
    assert (await store.apply(batch(gone[0], gone[1], PAYLOADS))).events == 9
    assert len(await store.find_items(gone[0], (), None, 100, 0, now)) == 3


def _slot(key: str) -> int:
    from redis.crc import key_slot

    return int(key_slot(key.encode()))


async def test_the_store_opens_a_cluster_client_on_a_cluster_node(redis_cluster_url: str) -> None:
    store = RedisItems(redis_cluster_url, VIEW)
    try:
        assert isinstance(await store._client(), RedisCluster)
    finally:
        await store.close()
