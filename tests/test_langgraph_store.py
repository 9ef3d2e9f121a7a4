"""HelixStore, a LangGraph BaseStore on the log, held against LangGraph's own InMemoryStore: on the
embedded log, and on Kafka with its items in PostgreSQL, Redis and a Redis Cluster (`items_at`)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from langgraph.store.base import BaseStore, GetOp, Item
from langgraph.store.memory import InMemoryStore

from helix_es.integrations.langgraph_store import HelixStore
from helix_es.log.embedded import EmbeddedLog
from helix_es.model.errors import InvalidInput
from helix_es.model.events import ItemDeleted, ItemPut, ItemTouched
from tests.conftest import start_projector, unique


def embedded(tmp_path: Path, namespace: str = "lg") -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "store": {"namespace": namespace},
    }


def view(item: Item | None) -> tuple[Any, ...] | None:
    return None if item is None else (item.namespace, item.key, item.value)


def ident(item: Item) -> str:
    """An item as text, its value's keys sorted (PostgreSQL's jsonb keeps them in its own order)."""
    return json.dumps([item.namespace, item.key, item.value], sort_keys=True)


async def same(ours: BaseStore, theirs: BaseStore, call: str, *args: Any, **kwargs: Any) -> Any:
    got = await getattr(ours, call)(*args, **kwargs)
    if call == "alist_namespaces":
        theirs = await holding(theirs)
    want = await getattr(theirs, call)(*args, **kwargs)
    if call == "aget":
        assert view(got) == view(want), (call, args, kwargs)
    elif call == "asearch":
        # The same items pass; the order is ours (first put first): InMemoryStore's depends on which
        # namespaces any call touched first, reads included, which no log can tell.
        window = {k: kwargs.pop(k) for k in ("limit", "offset") if k in kwargs}
        ours_all = await ours.asearch(*args, **kwargs, limit=10_000)
        theirs_all = await theirs.asearch(*args, **kwargs, limit=10_000)
        assert sorted(map(ident, ours_all)) == sorted(map(ident, theirs_all)), (call, args, kwargs)
        assert [i.created_at for i in ours_all] == sorted(i.created_at for i in ours_all)
        offset, limit = window.get("offset", 0), window.get("limit", 10)
        assert list(map(view, got)) == list(map(view, ours_all[offset : offset + limit]))
    else:
        assert got == want, (call, args, kwargs)
    return got


async def holding(reference: BaseStore) -> InMemoryStore:
    """The reference's live items in a fresh InMemoryStore. InMemoryStore lists a namespace for good
    once anything touched it (a get of a missing key, or after its last item went); HelixStore lists
    the namespaces that hold items, which is what LangGraph's PostgreSQL store does."""
    fresh = InMemoryStore()
    for item in await reference.asearch((), limit=10_000):
        await fresh.aput(item.namespace, item.key, item.value)
    return fresh


FILTERS = [None, {"tag": "red"}, {"n": {"$gte": 3}}, {"meta": {"lang": "nb"}}, {"list": [1]}, {"n": {"$ne": 2}}]
PATHS = [("users", "u1"), ("users", "u2"), ("users", "u1", "notes"), ("docs",), ("a b", "ü/%{}")]


def random_value(rng: random.Random) -> dict[str, Any]:
    return {
        "n": rng.randint(0, 5),
        "tag": rng.choice(["red", "blue"]),
        "meta": {"lang": rng.choice(["en", "nb"]), "deep": {"x": rng.randint(0, 1)}},
        "list": [rng.randint(0, 2)],
    }


@pytest.fixture(params=["postgres", "redis", "redis-cluster"])
def items_at(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """Where a Kafka deployment's items live: the `store:` mapping's store and its address."""
    if request.param == "postgres":
        return {"store": "postgres", "dsn": request.getfixturevalue("postgres_dsn")}
    url = request.getfixturevalue("redis_url" if request.param == "redis" else "redis_cluster_url")
    monkeypatch.delenv("HELIX_REDIS_URL", raising=False)  # it would win over the mapping's URL (the cluster's)
    return {"store": "redis", "redis_url": url}


def on_kafka(bootstrap: str, store: dict[str, Any]) -> dict[str, Any]:
    log = {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 3, "topic_prefix": unique("lgstore")}
    return {"log": log, "store": {**store, "namespace": unique("items")}}


async def random_calls(store: BaseStore, seed: int, calls: int) -> None:
    rng = random.Random(seed)
    reference = InMemoryStore()
    for _ in range(calls):
        path, key = rng.choice(PATHS), rng.choice(["k1", "k2", "k3"])
        roll = rng.random()
        if roll < 0.45:
            value = random_value(rng)
            await store.aput(path, key, value)
            await reference.aput(path, key, value)
        elif roll < 0.55:
            await store.adelete(path, key)
            await reference.adelete(path, key)
        elif roll < 0.7:
            await same(store, reference, "aget", path, key)
        elif roll < 0.9:
            where = rng.choice(
                [
                    None,
                    {"tag": "red"},
                    {"n": {"$gte": 3}},
                    {"meta": {"lang": "nb"}},
                    {"list": [1]},
                    {"n": {"$ne": 2}},
                ]
            )
            prefix = rng.choice([(), ("users",), ("users", "u1"), ("docs",), ("nothing",)])
            await same(
                store,
                reference,
                "asearch",
                prefix,
                filter=where,
                limit=rng.choice([2, 10]),
                offset=rng.choice([0, 1]),
            )
        else:
            await same(store, reference, "alist_namespaces", max_depth=rng.choice([None, 1, 2]), limit=50)
            await same(store, reference, "alist_namespaces", prefix=("users",), limit=50)
            await same(store, reference, "alist_namespaces", suffix=("notes",), limit=50)
            await same(store, reference, "alist_namespaces", prefix=("users", "*"), limit=1, offset=1)


async def test_random_calls_behave_as_in_memory_store(tmp_path: Path) -> None:
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        await random_calls(store, 7, 400)


async def test_on_kafka_it_behaves_as_in_memory_store(
    tmp_path: Path, kafka_bootstrap: str, items_at: dict[str, Any], procs: list[Any]
) -> None:
    cfg = on_kafka(kafka_bootstrap, items_at)
    procs.append(start_projector(cfg, tmp_path))
    async with HelixStore.from_config({**cfg, "store": {**cfg["store"], "read_timeout": 60}}) as store:
        await random_calls(store, 11, 150)
        await store.aput(("kept",), "k", {"v": "on the log"})
    # A fresh store (another client, the same view) reads what the projector folded.
    async with HelixStore.from_config(cfg) as again:
        item = await again.aget(("kept",), "k")
        assert item is not None and item.value == {"v": "on the log"}
    if items_at["store"] == "redis":  # in the Redis (or the cluster) the mapping names, under the namespace's tag
        from helix_es.stores.redis.items import prefix
        from helix_es.stores.redis.pool import connect

        client = await connect(items_at["redis_url"])
        try:
            assert await client.hexists(prefix(cfg["store"]["namespace"], "langgraph-store") + "i:kept", "k")
        finally:
            await client.aclose()


async def test_a_fresh_store_reads_the_items_back_from_the_log(tmp_path: Path) -> None:
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        await store.aput(("users", "u1"), "prefs", {"theme": "dark"})
        await store.aput(("users", "u1"), "prefs", {"theme": "light"})
        await store.aput(("users", "u1"), "gone", {"x": 1})
        await store.adelete(("users", "u1"), "gone")
        first = await store.aget(("users", "u1"), "prefs")
    async with HelixStore.from_config(embedded(tmp_path)) as again:
        item = await again.aget(("users", "u1"), "prefs")
        assert item is not None and item.value == {"theme": "light"}
        assert first is not None and item.created_at == first.created_at and item.updated_at == first.updated_at
        assert item.created_at < item.updated_at  # the first put made it, the second changed it
        assert await again.aget(("users", "u1"), "gone") is None
    # Every put and delete is an event on the log, in order.
    log = EmbeddedLog(str(tmp_path / "log"), fsync=False)
    payloads = [r.event.payload async for r in log.read("lg")]
    await log.close()
    assert [type(p) for p in payloads] == [ItemPut, ItemPut, ItemPut, ItemDeleted]
    assert payloads[0] == ItemPut(("users", "u1"), "prefs", '{"theme": "dark"}')


async def test_a_batch_reads_before_its_puts_and_its_last_put_wins(tmp_path: Path) -> None:
    from langgraph.store.base import GetOp, PutOp

    ops = [
        PutOp(("b",), "k", {"v": 1}),
        GetOp(("b",), "k"),
        PutOp(("b",), "k", {"v": 2}),
    ]
    reference = InMemoryStore()
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        got = await store.abatch(ops)
        want = await reference.abatch(ops)
        assert got == want == [None, None, None]
        assert view(await store.aget(("b",), "k")) == view(await reference.aget(("b",), "k")) == (("b",), "k", {"v": 2})


async def test_ttl_hides_an_item_once_it_expires(tmp_path: Path) -> None:
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        await store.aput(("t",), "short", {"v": 1}, ttl=0.0005)  # 30 ms
        await store.aput(("t",), "long", {"v": 2}, ttl=60)
        import asyncio

        await asyncio.sleep(0.1)
        assert await store.aget(("t",), "short") is None
        assert [i.key for i in await store.asearch(("t",))] == ["long"]
        assert await store.alist_namespaces() == [("t",)]
        assert store.ttl_config == {}  # LangGraph's defaults: refresh_on_read, no default TTL
    # A refresh never brings an expired item back: its read found nothing, so nothing was appended.
    assert [type(p) for p in await events_on(tmp_path)] == [ItemPut, ItemPut]


TTL = 0.03  # minutes: 1.8 s; under CI's load an embedded append and read took several hundred ms


async def refreshes(store: HelixStore, step: float) -> None:
    """An item read with refresh outlives its TTL from its put; one read without refresh does not."""
    import asyncio

    await store.aput(("r",), "read", {"v": 1}, ttl=TTL * step)
    await store.aput(("r",), "kept", {"v": 2}, ttl=TTL * step)
    await store.aput(("r",), "plain", {"v": 3}, ttl=None)
    for _ in range(3):  # 3 x 60%: past the TTL, alive only by the refreshes
        await asyncio.sleep(TTL * step * 60 * 0.6)
        assert await store.aget(("r",), "read") is not None
        assert await store.aget(("r",), "plain", refresh_ttl=True) is not None  # no TTL: nothing to refresh
        assert [i.key for i in await store.asearch(("r",), filter={"v": 2}, refresh_ttl=True)] == ["kept"]
    assert await store.aget(("r",), "kept", refresh_ttl=False) is not None
    await asyncio.sleep(TTL * step * 60 * 1.2)
    assert await store.aget(("r",), "read") is None
    assert [i.key for i in await store.asearch(("r",), refresh_ttl=True)] == ["plain"]


async def test_a_read_with_refresh_extends_the_ttl_by_an_event_on_the_log(tmp_path: Path) -> None:
    import asyncio

    async with HelixStore.from_config(embedded(tmp_path), ttl={"refresh_on_read": True}) as store:
        await refreshes(store, 1)
        await store.aput(("again",), "k", {"v": 1}, ttl=TTL)
        for _ in range(2):
            await asyncio.sleep(TTL * 60 * 0.6)
            assert await store.aget(("again",), "k") is not None
    touched = [p for p in await events_on(tmp_path) if isinstance(p, ItemTouched)]
    assert {(p.namespace, p.key) for p in touched} == {(("r",), "read"), (("r",), "kept"), (("again",), "k")}
    # A fresh store folds the log again: the same refreshes, so the item is still live, as it was.
    async with HelixStore.from_config(embedded(tmp_path)) as again:
        assert await again.aget(("again",), "k", refresh_ttl=False) is not None


async def test_refresh_on_read_false_and_default_ttl(tmp_path: Path) -> None:
    import asyncio

    ttl = {"default_ttl": TTL, "refresh_on_read": False}
    async with HelixStore.from_config(embedded(tmp_path), ttl=ttl) as store:  # type: ignore[arg-type]
        await store.aput(("d",), "k", {"v": 1})  # the default TTL
        await asyncio.sleep(TTL * 60 * 0.6)
        assert await store.aget(("d",), "k") is not None  # no refresh: the store says so
        await asyncio.sleep(TTL * 60 * 0.6)
        assert await store.aget(("d",), "k", refresh_ttl=True) is None
    assert not [p for p in await events_on(tmp_path) if isinstance(p, ItemTouched)]
    for bad, field in (({"default_ttl": -1}, "ttl.default_ttl"), ({"sweep": 1}, "ttl.sweep"), ("x", "ttl")):
        with pytest.raises(InvalidInput, match=field):
            HelixStore.from_config(embedded(tmp_path), ttl=bad)  # type: ignore[arg-type]


def test_a_refresh_extends_only_a_live_item_with_a_ttl() -> None:
    from datetime import UTC, datetime, timedelta

    from helix_es.views.items import ItemOp, StoredItem, fold_item

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    item = StoredItem(("a",), "k", "{}", t0, t0, t0 + timedelta(minutes=1), ttl_minutes=1.0)
    touch = ItemTouched(("a",), "k")
    later = fold_item(item, ItemOp(1, "a", t0 + timedelta(seconds=50), touch))
    assert later is not None and later.expires_at == t0 + timedelta(seconds=110) and later.updated_at == t0
    assert fold_item(item, ItemOp(1, "a", t0 + timedelta(seconds=61), touch)) == item  # expired: stays so
    assert fold_item(None, ItemOp(1, "a", t0, touch)) is None
    forever = StoredItem(("a",), "k", "{}", t0, t0)
    assert fold_item(forever, ItemOp(1, "a", t0 + timedelta(days=9), touch)) == forever
    # At most one refresh per item per tenth of its TTL (at most a second).
    assert not item.refreshable(t0 + timedelta(seconds=0.5)) and item.refreshable(t0 + timedelta(seconds=1))


async def test_refresh_on_kafka(
    tmp_path: Path, kafka_bootstrap: str, items_at: dict[str, Any], procs: list[Any]
) -> None:
    """The projector folds the refreshes into PostgreSQL, Redis and a Redis Cluster as the fold does."""
    import asyncio

    from langgraph.store.base import PutOp

    cfg = on_kafka(kafka_bootstrap, items_at)
    cfg["store"]["index"] = INDEX  # a refresh keeps the item's vectors
    procs.append(start_projector(cfg, tmp_path))
    async with HelixStore.from_config({**cfg, "store": {**cfg["store"], "read_timeout": 60}}) as store:
        await store.aput(("w",), "warm", {"text": "ocean river"}, ttl=60)
        assert await store.aget(("w",), "warm") is not None  # the projector is up: reads wait no more than a fold
        await refreshes(store, 1.2)  # 2.2 s TTLs: a projector's round trip is well within a tenth
        for _ in range(2):  # a refresh keeps the item's vectors
            [found] = await store.asearch(("w",), query="ocean river")
            assert (found.key, round(found.score or 0, 3)) == ("warm", 1.0)
            await asyncio.sleep(1.1)  # past the refresh throttle (a second at most): the search refreshes it
        # A put in the same batch as a refresh of its item wins: the TTL is the put's.
        await store.aput(("b",), "k", {"v": 1}, ttl=TTL * 1.2)
        await store.abatch([GetOp(("b",), "k"), PutOp(("b",), "k", {"v": 2}, ttl=None)])
        await asyncio.sleep(TTL * 1.2 * 60 * 1.2)
        item = await store.aget(("b",), "k")
        assert item is not None and item.value == {"v": 2}


async def test_bad_input_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        for call in (
            lambda: store.aput(("ns",), "k", {"bad": object()}),
            lambda: store.aput(("ns",), "k", {"nan": float("nan")}),
            lambda: store.aput(("ns",), "", {"v": 1}),
            lambda: store.aput(("ns",), "k", {"v": 1}, ttl=-1),
        ):
            with pytest.raises(InvalidInput):
                await call()
        with pytest.raises(ValueError):  # LangGraph's own namespace check, before ours
            await store.aput(("a.b",), "k", {"v": 1})
        assert await store.alist_namespaces() == []
    log = EmbeddedLog(str(tmp_path / "log"), fsync=False)
    assert [r async for r in log.read("lg")] == []
    await log.close()


def test_the_sync_store_works_from_plain_code(tmp_path: Path) -> None:
    with HelixStore.from_config(embedded(tmp_path)) as store:
        store.put(("s",), "k", {"v": 1})
        item = store.get(("s",), "k")
        assert item is not None and item.value == {"v": 1}
        assert [i.key for i in store.search(("s",))] == ["k"]
        store.delete(("s",), "k")
        assert store.get(("s",), "k") is None


async def test_the_store_mapping_is_checked(tmp_path: Path) -> None:
    from helix_es.model.errors import ConfigError

    with pytest.raises(ConfigError, match="store"):
        async with HelixStore.from_config({"log": {"type": "embedded", "path": str(tmp_path)}}):
            pass
    with pytest.raises(ConfigError, match=r"store\.type"):
        async with HelixStore.from_config({"store": {"type": "conversation"}}):
            pass
    with pytest.raises(ConfigError, match=r"store\.namespace"):
        async with HelixStore.from_config({"store": {"namespace": "a*"}}):
            pass
    assert unique("x") != unique("x")


WORDS = ["alpha", "beta", "gamma", "delta", "ocean", "river", "mountain", "forest", "coffee", "tea", "bread"]
WORDS += ["cheese", "train", "plane"]
INDEX = {"embed": {"provider": "hash", "dims": 64}, "fields": ["text", "tags[*]"]}


def reference_index() -> dict[str, Any]:
    """LangGraph's InMemoryStore with the very vectors helix-es computes (the hash embedder)."""
    from helix_es.providers.embed import HashEmbedder

    embedder = HashEmbedder(64)
    return {"dims": 64, "embed": lambda texts: embedder.embed_sync(texts).tolist(), "fields": ["text", "tags[*]"]}


async def semantic_calls(store: BaseStore, seed: int, calls: int) -> None:
    rng = random.Random(seed)
    reference = InMemoryStore(index=reference_index())  # type: ignore[arg-type]
    for n in range(calls):
        path = rng.choice([("docs",), ("docs", "a"), ("notes",)])
        roll = rng.random()
        if roll < 0.5:
            text = " ".join(rng.sample(WORDS, 3)) + f" #{n}"  # distinct texts: no ties in the ranking
            value = {"text": text, "tags": rng.sample(WORDS, 2), "n": n % 3}
            index = rng.choice([None, None, ["text"], False])
            key = f"k{rng.randint(0, 8)}"
            await store.aput(path, key, value, index=index)
            # InMemoryStore keeps an item's old vectors of fields a later put does not embed: a put
            # replaces the whole item in HelixStore, so the reference forgets it first.
            await reference.adelete(path, key)
            await reference.aput(path, key, value, index=index)
        elif roll < 0.6:
            key = f"k{rng.randint(0, 8)}"
            await store.adelete(path, key)
            await reference.adelete(path, key)
        else:
            query = " ".join(rng.sample(WORDS, 2))
            prefix = rng.choice([(), ("docs",)])
            where = rng.choice([None, {"n": 1}])
            limit = rng.choice([3, 10])
            got = await store.asearch(prefix, query=query, filter=where, limit=limit)
            want = await reference.asearch(prefix, query=query, filter=where, limit=limit)
            # The same scores, best first; items of equal score (one shared word) may come in either order.
            assert [i.score for i in got if i.score is not None] == pytest.approx(
                [i.score for i in want if i.score is not None], abs=1e-6
            ), query
            every = {
                ident(i): i.score
                for i in await reference.asearch(prefix, query=query, filter=where, limit=10_000)
                if i.score is not None
            }
            assert all(abs(every.get(ident(i), -9) - i.score) < 1e-6 for i in got if i.score is not None), query
            # The unscored rest fills the page with the same items, in our order.
            unscored = {ident(i) for i in got if i.score is None}
            assert unscored <= {ident(i) for i in await reference.asearch(prefix, filter=where, limit=10_000)}
            assert len(got) == len(want)


async def test_semantic_search_ranks_as_in_memory_store_does(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    cfg["store"]["index"] = INDEX
    async with HelixStore.from_config(cfg) as store:
        await semantic_calls(store, 3, 300)


async def test_semantic_search_on_kafka(
    tmp_path: Path, kafka_bootstrap: str, items_at: dict[str, Any], procs: list[Any]
) -> None:
    cfg = on_kafka(kafka_bootstrap, items_at)
    cfg["store"]["index"] = INDEX
    procs.append(start_projector(cfg, tmp_path))
    async with HelixStore.from_config({**cfg, "store": {**cfg["store"], "read_timeout": 60}}) as store:
        await semantic_calls(store, 5, 120)


async def test_an_index_config_is_checked(tmp_path: Path) -> None:
    from helix_es.model.errors import ConfigError

    for index, field in (
        ({"embed": {"provider": "hash"}, "fields": "text"}, r"store\.index\.fields"),
        ({"dims": 3}, r"store\.index\.dims"),
        ({"embed": {"provider": "openai"}}, r"store\.index\.embed"),
        ("yes", r"store\.index"),
        ({"embed": {"provider": "hash"}, "search": "keyword"}, r"store\.index\.search"),
    ):
        cfg = embedded(tmp_path)
        cfg["store"]["index"] = index
        with pytest.raises(ConfigError, match=field):
            async with HelixStore.from_config(cfg):
                pass


async def events_on(tmp_path: Path) -> list[Any]:
    log = EmbeddedLog(str(tmp_path / "log"), fsync=False)
    try:
        return [r.event.payload async for r in log.read("lg")]
    finally:
        await log.close()


@pytest.mark.parametrize("bad", [(), ("a.b",), ("ok", ""), ("ok", 1), ("nul\x00",)])
async def test_a_batch_with_a_bad_namespace_label_writes_nothing(tmp_path: Path, bad: tuple[Any, ...]) -> None:
    from langgraph.store.base import InvalidNamespaceError, ListNamespacesOp, MatchCondition, PutOp, SearchOp

    async with HelixStore.from_config(embedded(tmp_path)) as store:
        # An empty prefix is a search of everything; an empty path is no item's.
        for op in [PutOp(bad, "k", {"v": 1}), PutOp(bad, "k", None), *([SearchOp(bad)] if bad else [])]:
            with pytest.raises(InvalidNamespaceError):  # the good put before it is not written either
                await store.abatch([PutOp(("good",), "k", {"v": 1}), op])
        if bad:
            with pytest.raises(InvalidNamespaceError):
                await store.abatch([ListNamespacesOp((MatchCondition("suffix", bad),))])
        with pytest.raises(InvalidNamespaceError):  # the public put also refuses a "langgraph" root
            await store.aput(("langgraph", "x"), "k", {"v": 1})
        assert await store.aget(("good",), "k") is None
    assert await events_on(tmp_path) == []


async def test_a_bad_value_late_in_a_batch_writes_nothing(tmp_path: Path) -> None:
    from langgraph.store.base import PutOp

    async with HelixStore.from_config(embedded(tmp_path)) as store:
        with pytest.raises(InvalidInput, match="value"):
            await store.abatch([PutOp(("a",), "k", {"v": 1}), PutOp(("a",), "j", {"bad": object()})])
    assert await events_on(tmp_path) == []


async def test_empty_prefixes_and_wildcards_answer_as_in_memory_store(tmp_path: Path) -> None:
    reference = InMemoryStore()
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        for path in [("tenant", "a_%"), ("tenant", "b", "child"), ("a", "b", "f"), ("a", "c", "f"), ("x",)]:
            await store.aput(path, "k", {"v": 1})
            await reference.aput(path, "k", {"v": 1})
        for kwargs in (
            {"prefix": ("tenant", "*"), "suffix": ("*",)},
            {"prefix": ("a", "*", "f")},
            {"suffix": ("*", "f")},
            {"prefix": ("*", "users"), "suffix": ("*", "settings")},
            {"prefix": ("a",), "max_depth": 2},
            {"prefix": ["tenant"], "limit": 1, "offset": 1},
        ):
            assert await store.alist_namespaces(**kwargs) == await reference.alist_namespaces(**kwargs), kwargs
        assert len(await store.asearch(())) == len(await reference.asearch(())) == 5
        assert [i.namespace for i in await store.asearch(["tenant", "a_%"])] == [("tenant", "a_%")]  # a list too
        from langgraph.store.base import ListNamespacesOp, MatchCondition

        # A lone string as a condition's path is one label, as in LangGraph's own stores.
        [listed] = await store.abatch([ListNamespacesOp((MatchCondition("suffix", "f"),))])  # type: ignore[arg-type]
        assert listed == [("a", "b", "f"), ("a", "c", "f")]


async def test_an_async_store_answers_sync_calls_from_other_threads(tmp_path: Path) -> None:
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    async with HelixStore.from_config(embedded(tmp_path)) as store:
        with ThreadPoolExecutor(max_workers=4) as pool:
            puts = [pool.submit(store.put, ("t", str(i % 2)), f"k{i}", {"i": i}) for i in range(20)]
            await asyncio.gather(*(asyncio.wrap_future(f) for f in puts))
            got = await asyncio.wrap_future(pool.submit(store.get, ("t", "1"), "k3"))
            assert got is not None and got.value == {"i": 3}
            assert await asyncio.wrap_future(pool.submit(store.list_namespaces)) == [("t", "0"), ("t", "1")]
        # On the store's own loop a sync call would wait on itself: a clear error instead of a hang.
        with pytest.raises(asyncio.InvalidStateError, match="own event loop"):
            store.get(("t", "1"), "k3")
        assert len(await store.asearch(("t",), limit=100)) == 20
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.to_thread(store.get, ("t", "1"), "k3")


async def test_a_sync_node_uses_the_async_store_in_ainvoke(tmp_path: Path) -> None:
    from langgraph.config import get_store
    from langgraph.graph import END, START, StateGraph
    from typing_extensions import TypedDict

    class State(TypedDict):
        n: int

    def remember(state: State) -> State:  # a sync node: LangGraph runs it in a worker thread
        store = get_store()
        store.put(("nodes",), "seen", {"n": state["n"]})
        item = store.get(("nodes",), "seen")
        assert item is not None
        return {"n": item.value["n"] + 1}

    builder = StateGraph(State)
    builder.add_node("remember", remember)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        graph = builder.compile(store=store)
        assert await graph.ainvoke({"n": 41}) == {"n": 42}
        item = await store.aget(("nodes",), "seen")
        assert item is not None and item.value == {"n": 41}


async def test_a_hybrid_index_fuses_keywords_with_the_vectors(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    cfg["store"]["index"] = {"embed": {"provider": "hash"}, "fields": ["text"], "search": "hybrid"}
    notes = {
        "a": "Caroline moved to Porto last September",
        "b": "The ferry to Porto was late again",
        "c": "Dmitri adopted a husky called Miso",
        "d": "Nothing to see here",
    }
    async with HelixStore.from_config(cfg) as store:
        for key, text in notes.items():
            await store.aput(("notes",), key, {"text": text})
        found = await store.asearch(("notes",), query="Where did Caroline move to?", limit=3)
        assert found[0].key == "a"
        # first in both rankings: the fused score of reciprocal ranks is 1.0 (a cosine of these texts is not)
        assert found[0].score == pytest.approx(1.0)
        scores = [i.score for i in found if i.score is not None]
        assert scores == sorted(scores, reverse=True)
        assert len(await store.asearch(("notes",), query="husky", limit=10)) == 4  # every item, the matches first
        assert (await store.asearch(("notes",), query="husky", limit=1))[0].key == "c"
