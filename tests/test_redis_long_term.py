"""The Redis long-term view is kept as rows (`RedisRows` under the long-term fold), and a namespace
still in the layout of the adapter it replaced is refused, naming the rebuild that moves it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from redis.crc import key_slot

from helix_es import Message, open_memory
from helix_es.model import names
from helix_es.projection.idempotency import IdempotentProjection
from helix_es.projection.long_term import LongTermRows
from helix_es.stores.ports import RetiredLayout, SessionKey
from helix_es.stores.redis import KIND
from helix_es.stores.redis.pool import connect
from helix_es.stores.redis.rows import RedisRows
from helix_es.views.long_term import DEFAULT_TABLE
from helix_es.views.long_term_rows import tables
from projectors.rebuild import drop, rebuild
from tests.conftest import unique
from tests.contracts.long_term import T0, said


def embedded(tmp_path: Path, redis_url: str, ns: str) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": ns, "fsync": False},
        "memory": {"type": "long-term", "store": "redis", "redis_url": redis_url, "namespace": ns, "read_timeout": 20},
    }


async def keys(url: str, pattern: str) -> list[str]:
    client = await connect(url)
    try:
        return sorted([k.decode() async for k in client.scan_iter(match=pattern, count=1000)])
    finally:
        await client.aclose()


async def old_layout(url: str, ns: str, view: str, *, cluster: bool, cleared_only: bool = False) -> None:
    """What the long-term adapter of 0.6 left: a row, its index, a clear watermark."""
    head = f"helix:memory:{{{ns}}}:{view}:" if cluster else f"helix:memory:{ns}:{view}:"
    member = f"{1:020d},{names.topic(ns)},{0:010d},{0:020d}"
    client = await connect(url)
    try:
        await client.set(head + "cleared", 0)
        if not cleared_only:
            await client.zadd(head + "index", {member: 0})
            row = {"session_id": "s", "at": 1, "position": f"{names.topic(ns)}:0:0", "message": {"role": "user"}}
            await client.set(head + "m:" + member, json.dumps(row))
    finally:
        await client.aclose()


async def test_long_term_in_redis_is_rows_in_one_slot(tmp_path: Path, redis_url: str) -> None:
    ns = unique("rlt")
    async with open_memory(embedded(tmp_path, redis_url, ns), session_id="a") as mem:
        await mem.add(Message("user", "one"))
        await mem.add(Message("assistant", "two"))
        assert [m.content for m in await mem.get()] == ["one", "two"]
        projection = mem.projection  # type: ignore[attr-defined]
        if isinstance(projection, IdempotentProjection):
            projection = projection.inner
        assert isinstance(projection, LongTermRows) and isinstance(projection.store, RedisRows)
    stored = await keys(redis_url, f"helix:rows:{{{ns}}}:*")
    assert stored and all(k.startswith(f"helix:rows:{{{ns}}}:long-term:") for k in stored)
    assert {key_slot(k.encode()) for k in stored} == {key_slot(ns.encode())}
    assert await keys(redis_url, f"helix:memory:{ns}:long-term:*") == []


@pytest.mark.parametrize("where", ["redis_url", "redis_cluster_url"])
@pytest.mark.parametrize("cleared_only", [False, True], ids=["rows", "cleared-whole"])
async def test_a_namespace_in_the_old_layout_is_refused_and_drop_takes_it(
    request: pytest.FixtureRequest, where: str, cleared_only: bool
) -> None:
    url = request.getfixturevalue(where)
    ns, other = unique("rlt"), unique("rlt")
    assert KIND.rows is not None
    store = KIND.rows(url, "long-term", tables(DEFAULT_TABLE))
    view = LongTermRows(store, DEFAULT_TABLE)
    try:
        await old_layout(url, ns, "long-term", cluster=where == "redis_cluster_url", cleared_only=cleared_only)
        for read in (view.get, lambda key, want: view.search(key, "x", 5, want)):
            with pytest.raises(RetiredLayout, match=r"helix-es rebuild --config .* --view long-term") as refused:
                await read(SessionKey(ns, "s"), None)
            assert refused.value.namespace == ns and refused.value.view == "long-term"
        with pytest.raises(RetiredLayout):
            await view.apply([said(ns, names.topic(ns), 0, 5, "new", T0)])
        assert await view.checkpoint(names.topic(ns), 0) is None  # nothing written
        await view.apply([said(other, names.topic(other), 0, 0, "fine", T0)])  # other namespaces go on
        assert [m.content for m in await view.get(SessionKey(other, "s"), None) or []] == ["fine"]
        await view.drop([ns], [names.topic(ns)])  # the old keys go with the namespace
        assert await keys(url, f"helix:memory:*{ns}*") == []
        await view.apply([said(ns, names.topic(ns), 0, 5, "new", T0)])
        assert [m.content for m in await view.get(SessionKey(ns, "s"), None) or []] == ["new"]
    finally:
        await view.drop([ns, other], [names.topic(ns), names.topic(other)])
        await view.close()


async def test_a_rebuild_moves_an_old_layout_namespace_to_rows(tmp_path: Path, redis_url: str) -> None:
    ns = unique("rlt")
    cfg = embedded(tmp_path, redis_url, ns)
    async with open_memory(cfg, session_id="a") as mem:
        await mem.add(Message("user", "kept in the log"))
    await old_layout(redis_url, ns, "long-term", cluster=False)  # as an upgraded deployment finds it
    async with open_memory(cfg, session_id="a") as mem:
        with pytest.raises(RetiredLayout, match="rebuild"):
            await mem.get()
    report = await rebuild(cfg)
    assert report.target == "long-term@v2" and report.switched
    async with open_memory(cfg, session_id="a") as mem:
        assert [m.content for m in await mem.get()] == ["kept in the log"]
    await drop(cfg, "long-term")
    assert await keys(redis_url, f"helix:memory:{ns}:long-term:*") == []
