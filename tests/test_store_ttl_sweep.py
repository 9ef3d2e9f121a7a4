"""LangGraph store TTL sweeps forget expired items by the same mechanism as memories' forgetting policies:
`MemoryForgotten` (policy `ttl`) on the log, folded by the items view in every store."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from helix_es.integrations.langgraph_store import HelixStore
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Event, ItemPut, MemoryForgotten
from helix_es.views.items import item_id, session_of
from tests.conftest import start_projector, wait_for
from tests.test_langgraph_store import INDEX, embedded, events_on, items_at, on_kafka

__all__ = ["items_at"]  # the fixture, used here too

SHORT = 0.002  # minutes: 120 ms


async def test_a_sweep_records_the_forgetting_of_expired_items_and_a_reopen_forgets_the_same(
    tmp_path: Path,
) -> None:
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        await store.aput(("users", "a"), "old", {"v": 1}, ttl=SHORT)
        await store.aput(("users", "b"), "old", {"v": 2}, ttl=SHORT)
        await store.aput(("users", "a"), "kept", {"v": 3}, ttl=60)
        await store.aput(("users", "a"), "forever", {"v": 4})
        await asyncio.sleep(SHORT * 60 * 1.5)
        assert await store.asweep_ttl() == 2
        assert await store.asweep_ttl() == 0  # folded: nothing left to sweep
        assert sorted(i.key for i in await store.asearch(("users",))) == ["forever", "kept"]
    forgotten = [p for p in await events_on(tmp_path) if isinstance(p, MemoryForgotten)]
    assert sorted(p.ids for p in forgotten) == [(item_id(("users", "a"), "old"),), (item_id(("users", "b"), "old"),)]
    assert {(p.policy, p.views) for p in forgotten} == {("ttl", ("langgraph-store",))}
    async with HelixStore.from_config(embedded(tmp_path)) as store:  # folded again from the log
        assert sorted(i.key for i in await store.asearch(("users",))) == ["forever", "kept"]
        assert await store.asweep_ttl() == 0


async def test_a_put_after_the_sweep_looked_keeps_its_item(tmp_path: Path) -> None:
    """The sweep's forgetting lands after a put that renewed the item: the fold keeps the live item."""
    async with HelixStore.from_config(embedded(tmp_path)) as store:
        await store.aput(("p",), "k", {"v": 1}, ttl=SHORT)
        await asyncio.sleep(SHORT * 60 * 1.5)
        await store.aput(("p",), "k", {"v": 2}, ttl=60)  # renewed before the sweep's event lands
        stale = MemoryForgotten(("langgraph-store",), "ttl", "expired", ids=(item_id(("p",), "k"),))
        await store.items.backend.append(Event("lg", session_of(("p",)), stale))
        item = await store.aget(("p",), "k")
        assert item is not None and item.value == {"v": 2}
    assert [type(p) for p in await events_on(tmp_path)] == [ItemPut, ItemPut, MemoryForgotten]


async def test_the_sweeper_runs_at_the_ttl_configs_interval(tmp_path: Path) -> None:
    ttl = {"sweep_interval_minutes": 0.005}  # 300 ms
    async with HelixStore.from_config(embedded(tmp_path), ttl=ttl) as store:  # type: ignore[arg-type]
        await store.aput(("s",), "k", {"v": 1}, ttl=SHORT)

        async def swept() -> bool:
            return any(isinstance(p, MemoryForgotten) for p in await events_on(tmp_path))

        await wait_for(swept, 10, "the sweeper")
        assert await store.stop_ttl_sweeper() is True
        assert await store.stop_ttl_sweeper() is False
    with pytest.raises(InvalidInput) as caught:
        HelixStore.from_config(embedded(tmp_path), ttl={"sweep_interval_minutes": -1})  # type: ignore[typeddict-item]
    assert caught.value.field == "ttl.sweep_interval_minutes"


async def test_a_sweep_on_kafka_keeps_vectors_of_live_items(
    tmp_path: Path, kafka_bootstrap: str, items_at: dict[str, Any], procs: list[Any]
) -> None:
    """The projector folds the sweep into PostgreSQL, Redis and a Redis Cluster; a live item named by a
    stale sweep keeps its vectors (a search still ranks it)."""
    cfg = on_kafka(kafka_bootstrap, items_at)
    cfg["store"]["index"] = INDEX
    procs.append(start_projector(cfg, tmp_path))
    async with HelixStore.from_config({**cfg, "store": {**cfg["store"], "read_timeout": 60}}) as store:
        await store.aput(("w",), "gone", {"text": "desert sand"}, ttl=SHORT)
        await store.aput(("w",), "warm", {"text": "ocean river"}, ttl=60)
        await asyncio.sleep(SHORT * 60 * 1.5)
        assert await store.asweep_ttl() == 1
        stale = MemoryForgotten(("langgraph-store",), "ttl", "expired", ids=(item_id(("w",), "warm"),))
        store.items.written.wrote(
            await store.items.backend.append(Event(store.items.namespace, session_of(("w",)), stale))
        )
        hits = await store.asearch(("w",), query="ocean river")
        assert [(h.key, round(h.score or 0, 3)) for h in hits] == [("warm", 1.0)]
        assert await store.asweep_ttl() == 0
