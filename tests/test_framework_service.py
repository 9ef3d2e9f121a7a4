"""The framework adapters' views are views like any other: one `helix-es project` file serves a memory,
a `checkpoints:` and a `store:` mapping; `helix-es lag` reports all three; `helix-es rebuild` builds
the checkpoint and item views into new targets while they serve, open savers and stores move to
them, and the old targets can be dropped. Real Kafka, Redis and PostgreSQL."""

from __future__ import annotations

import json
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from tests.conftest import cli, require_module, start_projector, unique, wait_for

require_module("langgraph", "LangGraph")

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from helix_es import Message, open_memory  # noqa: E402
from helix_es.integrations.langgraph import HelixSaver, HelixStore  # noqa: E402
from helix_es.projection import aliases as aliases_module  # noqa: E402
from tests import langgraph_graph as lg  # noqa: E402
from tests.test_rebuild import redis_keys, stop_projector  # noqa: E402


@pytest.fixture
def fast_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aliases_module, "REFRESH_SECONDS", 0.2)


async def lag_by_view(path: Path) -> dict[str, int]:
    code, out, err = await cli("lag", "--config", str(path), "--json")
    assert code == 0, err
    totals: dict[str, int] = {}
    for p in json.loads(out)["partitions"]:
        totals[p["view"]] = totals.get(p["view"], 0) + p["lag"]
    return totals


async def rebuilt(path: Path, view: str) -> dict[str, Any]:
    code, out, err = await cli("rebuild", "--config", str(path), "--view", view, "--drop-old", "--json")
    assert code == 0, err
    report: dict[str, Any] = json.loads(out)
    assert report["switched"] and report["handed_over"], report
    return report


async def checkpoint_rows(dsn: str, view: str, namespace: str) -> int:
    conn = await asyncpg.connect(dsn)
    try:
        sql = "SELECT count(*) FROM helix_lg_checkpoints WHERE view = $1 AND namespace = $2"
        return int(await conn.fetchval(sql, view, namespace))
    finally:
        await conn.close()


async def test_one_service_serves_memory_checkpoints_and_store_and_each_view_rebuilds(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, postgres_dsn: str, fast_aliases: None
) -> None:
    prefix, ns = unique("fw"), unique("fw")
    graph_ns, items_ns = f"{ns}-graph", f"{ns}-items"
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix}
    cfg = {
        "log": log,
        "memory": {"type": "conversation", "store": "redis", "redis_url": redis_url, "namespace": ns},
        "checkpoints": {"store": "postgres", "dsn": postgres_dsn, "namespace": graph_ns, "read_timeout": 60},
        "store": {"store": "redis", "redis_url": redis_url, "namespace": items_ns, "read_timeout": 60},
    }
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    expected = await lg.ascenario(InMemorySaver(), "t1")
    proc = start_projector(cfg, tmp_path)
    try:
        async with (
            open_memory(cfg, session_id="s1") as memory,
            HelixSaver.from_config(cfg) as saver,
            HelixStore.from_config(cfg) as store,
        ):
            await memory.add(Message("user", "remember the graph"))
            assert await lg.ascenario(saver, "t1") == expected
            await store.aput(("users", "u1"), "prefs", {"tone": "dry"})
            assert [m.content for m in await memory.get()] == ["remember the graph"]
            item = await store.aget(("users", "u1"), "prefs")
            assert item is not None and item.value == {"tone": "dry"}

            async def drained() -> bool:
                lags = await lag_by_view(path)
                return sorted(lags) == ["checkpoints", "conversation", "langgraph-store"] and not any(lags.values())

            await wait_for(drained, 60, "every view of the file to have no lag")

            # The checkpoint view, rebuilt from the log while it serves: the open saver moves to it.
            old_rows = await checkpoint_rows(postgres_dsn, "checkpoints", graph_ns)
            assert old_rows == len(expected["history"])
            report = await rebuilt(path, "checkpoints")
            assert report["target"] == "checkpoints@v2" and report["dropped"] == ["checkpoints"]
            assert await checkpoint_rows(postgres_dsn, "checkpoints@v2", graph_ns) == old_rows
            assert await checkpoint_rows(postgres_dsn, "checkpoints", graph_ns) == 0

            async def saver_moved() -> bool:
                await saver.aget_tuple({"configurable": {"thread_id": "t1"}})
                return bool(saver._log.store.name == "checkpoints@v2")

            await wait_for(saver_moved, 10, "the saver to read the new target")
            history = lg.graph(saver).aget_state_history({"configurable": {"thread_id": "t1"}})
            assert [lg.snapshot(s) async for s in history] == expected["history"]
            assert await lg.ascenario(saver, "t2") == await lg.ascenario(InMemorySaver(), "t2")  # written after

            # The items view the same way: the open store reads the new target, old keys are gone.
            report = await rebuilt(path, "langgraph-store")
            assert report["target"] == "langgraph-store@v2"
            head = f"helix:items:{{{items_ns}}}:langgraph-store"
            assert await redis_keys(redis_url, f"{head}:*") == [] and await redis_keys(redis_url, f"{head}@v2:*")

            async def store_moved() -> bool:
                await store.aget(("users", "u1"), "prefs")
                return bool(store.items.view.name == "langgraph-store@v2")

            await wait_for(store_moved, 10, "the store to read the new target")
            item = await store.aget(("users", "u1"), "prefs")
            assert item is not None and item.value == {"tone": "dry"}
            await store.aput(("users", "u2"), "prefs", {"tone": "warm"})  # folded by the service into @v2
            item = await store.aget(("users", "u2"), "prefs")
            assert item is not None and item.value == {"tone": "warm"}
            assert [m.content for m in await memory.get()] == ["remember the graph"]

        lags = await lag_by_view(path)
        assert sorted(lags) == ["checkpoints@v2", "conversation", "langgraph-store@v2"]
        err = stop_projector(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "from checkpoints to checkpoints@v2" in err and "from langgraph-store to langgraph-store@v2" in err, err


def tenant(cfg: dict[str, Any], namespace: str) -> dict[str, Any]:
    """A client's config: the projector file with one concrete namespace in place of each pattern."""
    return {**cfg, **{k: {**cfg[k], "namespace": namespace} for k in ("memory", "checkpoints", "store")}}


async def test_one_projector_serves_every_mapping_over_a_pattern_and_picks_up_new_namespaces(
    tmp_path: Path, kafka_bootstrap: str, postgres_dsn: str
) -> None:
    prefix, ns = unique("mt"), unique("mt")
    early, late = f"{ns}-a", f"{ns}-b"
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix}
    pg = {"store": "postgres", "dsn": postgres_dsn, "read_timeout": 60}
    cfg = {  # the prefix is this test's own: `*` is every namespace of it
        "log": log,
        "memory": {"type": "conversation", **pg, "namespace": f"{ns}-*"},
        "checkpoints": {**pg, "namespace": "*"},
        "store": {**pg, "namespace": f"{ns}-?"},
    }
    expected = {thread: await lg.ascenario(InMemorySaver(), thread) for thread in ("t1", "t2")}

    async def write(namespace: str, clients: AsyncExitStack) -> Any:
        """A tenant's memory and store writes, by clients that stay open (read-your-writes is theirs)."""
        client = tenant(cfg, namespace)
        memory = await clients.enter_async_context(open_memory(client, session_id="s1"))
        store = await clients.enter_async_context(HelixStore.from_config(client))
        await memory.add(Message("user", f"hello from {namespace}"))
        await store.aput(("users", "u1"), "prefs", {"tenant": namespace})

        async def read_back(thread: str) -> None:
            assert [m.content for m in await memory.get()] == [f"hello from {namespace}"]
            item = await store.aget(("users", "u1"), "prefs")
            assert item is not None and item.value == {"tenant": namespace}
            async with HelixSaver.from_config(client) as saver:  # a graph run reads its checkpoints back
                assert await lg.ascenario(saver, thread) == expected[thread]

        return read_back

    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    async with AsyncExitStack() as clients:
        read_early = await write(early, clients)  # its topic is there before the projector starts
        proc = start_projector(cfg, tmp_path)
        try:
            await read_early("t1")
            read_late = await write(late, clients)  # its topic is new: the running projector finds it
            await read_late("t2")

            async def drained() -> bool:
                lags = await lag_by_view(path)
                return sorted(lags) == ["checkpoints", "conversation", "langgraph-store"] and not any(lags.values())

            await wait_for(drained, 60, "every view of the file to have no lag")
            code, out, err = await cli("lag", "--config", str(path), "--json")
            assert code == 0, err
            topics = {(p["view"], p["topic"]) for p in json.loads(out)["partitions"]}
            assert topics == {
                (view, f"{prefix}.{namespace}")
                for view in ("checkpoints", "conversation", "langgraph-store")
                for namespace in (early, late)
            }
            stop_projector(proc)
        finally:
            if proc.poll() is None:
                proc.kill()


async def test_rebuild_without_view_rebuilds_every_view_of_the_file(tmp_path: Path, kafka_bootstrap: str) -> None:
    from langgraph.checkpoint.base import empty_checkpoint

    prefix, ns = unique("all"), unique("all")
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix}
    pg = {"store": "postgres", "consistency": "eventual"}  # no projector runs: the rebuild builds the views
    cfg = {
        "log": log,
        "memory": {"type": "conversation", **pg, "namespace": f"{ns}-*"},
        "checkpoints": {**pg, "namespace": f"{ns}-*"},
        "store": {"store": "redis", "consistency": "eventual", "namespace": f"{ns}-*"},
    }
    thread = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    namespaces = (f"{ns}-a", f"{ns}-b")
    for namespace in namespaces:
        client = tenant(cfg, namespace)
        async with (
            open_memory(client, session_id="s1") as memory,
            HelixSaver.from_config(client) as saver,
            HelixStore.from_config(client) as store,
        ):
            await memory.add(Message("user", f"hello from {namespace}"))
            await saver.aput(thread, empty_checkpoint(), {"source": "input", "step": -1}, {})
            await store.aput(("users", "u1"), "prefs", {"tenant": namespace})
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    code, _, err = await cli("rebuild", "--config", str(path), "--into", "x@v9")
    assert code == 2 and "--into" in err and "--view" in err, err

    code, out, err = await cli("rebuild", "--config", str(path), "--json", "--progress", "0.2")
    assert code == 0, err
    reports = [json.loads(line) for line in out.splitlines()]  # one line per view
    assert [(r["view"], r["target"], r["switched"], r["namespaces"]) for r in reports] == [
        ("conversation", "conversation@v2", True, 2),
        ("langgraph-store", "langgraph-store@v2", True, 2),
        ("checkpoints", "checkpoints@v2", True, 2),
    ]
    for i, view in enumerate(("conversation", "langgraph-store", "checkpoints"), 1):
        assert f"view {i} of 3: {view}" in err and f"rebuild {view} -> {view}@v2" in err, err
        assert f"rebuilt {view} into {view}@v2" in err, err
    assert await lag_by_view(path) == {"conversation@v2": 0, "langgraph-store@v2": 0, "checkpoints@v2": 0}
    for namespace in namespaces:  # readers read the new targets
        client = tenant(cfg, namespace)
        async with (
            open_memory(client, session_id="s1") as memory,
            HelixSaver.from_config(client) as saver,
            HelixStore.from_config(client) as store,
        ):
            assert [m.content for m in await memory.get()] == [f"hello from {namespace}"]
            assert await saver.aget_tuple(thread) is not None
            item = await store.aget(("users", "u1"), "prefs")
            assert item is not None and item.value == {"tenant": namespace}
