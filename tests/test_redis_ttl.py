"""`ttl` (the seed's Redis TTL): parsing, and expiry on a real Redis.

A Redis-stored session's data and guard keys expire `ttl` after its last write, refreshed by
every write; an expired session reads as empty. The memory and PostgreSQL stores ignore it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from helix_es import Event, Message, MessageAdded, Position, Record, open_memory
from helix_es.config import load_config, parse_ttl
from helix_es.model import names
from helix_es.model.errors import ConfigError
from helix_es.projection.factory import open_log
from helix_es.projection.fold import project
from helix_es.stores.ports import SessionKey
from helix_es.views.base import View
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow
from helix_es.views.token_window import TokenWindow
from tests.conftest import unique, wait_for
from tests.seed_examples import MULTI_TENANT_REDIS

VIEWS: dict[str, dict[str, Any]] = {
    "conversation": {"type": "conversation"},
    "sliding-window": {"type": "sliding-window", "window_size": 3},
    "token-window": {"type": "token-window", "max_tokens": 200},
}


def test_the_seed_example_parses() -> None:
    view = load_config(MULTI_TENANT_REDIS).memory.view
    assert view == Conversation() and view.ttl == 168 * 3600
    # Not part of the view's identity: the same keys, consumer group and checkpoints.
    assert view.name == "conversation" and view.key_suffix == ""


@pytest.mark.parametrize(
    ("value", "seconds"),
    [("168h", 604800.0), ("30m", 1800.0), ("45s", 45.0), ("1h30m", 5400.0), ("1.5h", 5400.0), ("250ms", 0.25),
     ("2h45m30s", 9930.0), (" 10s ", 10.0), (3600, 3600.0), (0.5, 0.5), (None, None)],
)  # fmt: skip
def test_go_durations_and_seconds(value: Any, seconds: float | None) -> None:
    assert parse_ttl(value, "memory.ttl") == seconds


@pytest.mark.parametrize("value", ["3600", "7d", "1h 30m", "h", "", "-5s", "0s", 0, -1, True, [1], float("nan")])
def test_a_bad_ttl_names_the_key(value: Any) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "conversation", "ttl": value}})
    assert err.value.field == "memory.ttl"
    with pytest.raises(ConfigError) as err:
        load_config({"agents": [{"id": "chat", "memory": {"type": "sliding-window", "ttl": value}}]})
    assert err.value.field == "agents[0].memory.ttl"


@pytest.mark.parametrize("kind", VIEWS)
def test_every_list_view_carries_its_ttl(kind: str) -> None:
    plain = load_config({"memory": VIEWS[kind]}).memory.view
    expiring = load_config({"memory": {**VIEWS[kind], "ttl": "1h"}}).memory.view
    assert isinstance(plain, Conversation | SlidingWindow | TokenWindow)
    assert isinstance(expiring, Conversation | SlidingWindow | TokenWindow)
    assert plain.ttl is None and expiring.ttl == 3600
    assert expiring == plain and expiring.name == plain.name and hash(expiring) == hash(plain)


@pytest.fixture
async def redis_client(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_url)
    yield client
    await client.aclose()


def config(tmp_path: Path, redis_url: str, kind: str, namespace: str, **extra: Any) -> dict[str, Any]:
    memory = {**VIEWS[kind], "store": "redis", "redis_url": redis_url, "namespace": namespace, **extra}
    return {"log": {"type": "embedded", "path": str(tmp_path / "log")}, "memory": memory}


def keys_of(cfg: dict[str, Any], session_id: str) -> tuple[str, str]:
    view = load_config(cfg).memory.view
    assert isinstance(view, View)
    ns = cfg["memory"]["namespace"]
    return names.session_key(ns, session_id, view.key_suffix), names.applied_key(ns, session_id, view.name)


@pytest.mark.parametrize("kind", VIEWS)
async def test_keys_expire_ttl_after_the_last_write(
    kind: str, tmp_path: Path, redis_url: str, redis_client: aioredis.Redis, session_id: str
) -> None:
    cfg = config(tmp_path, redis_url, kind, unique("ttl"), ttl="30s")
    data, guard = keys_of(cfg, session_id)
    async with open_memory(cfg, session_id=session_id) as mem:
        await mem.add(Message("system", "rules"))
        await mem.add(Message("user", "hello"))
        assert len(await mem.get()) == 2
        for key in (data, guard):
            assert 28_000 < await redis_client.pttl(key) <= 30_000, key
        await redis_client.pexpire(data, 5_000)
        await redis_client.pexpire(guard, 5_000)
        await mem.add(Message("user", "again"))  # every write refreshes both
        for key in (data, guard):
            assert 28_000 < await redis_client.pttl(key) <= 30_000, key
        await mem.clear()  # a cleared session has no list, but its guard expires too
        assert await redis_client.exists(data) == 0
        assert 28_000 < await redis_client.pttl(guard) <= 30_000


async def test_an_expired_session_reads_as_empty_and_starts_afresh(
    tmp_path: Path, redis_url: str, redis_client: aioredis.Redis, session_id: str
) -> None:
    cfg = config(tmp_path, redis_url, "conversation", unique("ttl"), ttl="400ms")
    data, guard = keys_of(cfg, session_id)
    async with open_memory(cfg, session_id=session_id) as mem:
        await mem.add(Message("user", "soon forgotten"))
        assert [m.content for m in await mem.get()] == ["soon forgotten"]
        await wait_for(lambda: _gone(redis_client, data, guard), 10, "Redis to expire the session's keys")
        assert await redis_client.exists(data, guard) == 0
        assert await mem.get() == []
        assert await mem.search("forgotten") == []
        async with open_memory(cfg, session_id=session_id) as other:
            assert await other.get() == []
        await mem.add(Message("user", "a new start"))
        assert [m.content for m in await mem.get()] == ["a new start"]
    # Reopening does not bring the expired message back (the checkpoint is past it), but the log has it.
    async with open_memory(cfg, session_id=session_id) as mem:
        assert [m.content for m in await mem.get()] == ["a new start"]
    log = open_log(load_config(cfg).log)
    try:
        history = [r async for r in log.read(cfg["memory"]["namespace"], session_id=session_id)]
    finally:
        await log.close()
    assert [r.event.payload.message.content for r in history] == ["soon forgotten", "a new start"]  # type: ignore[union-attr]


async def test_a_session_that_expired_before_its_writer_read_it_reads_as_empty(
    tmp_path: Path, redis_url: str, redis_client: aioredis.Redis, session_id: str
) -> None:
    """Read-your-writes without a guard to read: the view's checkpoint says the write was applied."""
    cfg = config(tmp_path, redis_url, "conversation", unique("ttl"), ttl="300ms")
    cfg["memory"]["read_timeout"] = 2
    async with open_memory(cfg, session_id=session_id) as mem:
        await mem.add(Message("user", "written, then expired unread"))
        await wait_for(lambda: _gone(redis_client, *keys_of(cfg, session_id)), 10, "Redis to expire the keys")
        assert await redis_client.exists(*keys_of(cfg, session_id)) == 0
        assert await mem.get() == []  # not a ConsistencyTimeout


async def test_without_ttl_keys_persist_and_dropping_ttl_makes_them_persist(
    tmp_path: Path, redis_url: str, redis_client: aioredis.Redis, session_id: str
) -> None:
    ns = unique("ttl")
    with_ttl = config(tmp_path, redis_url, "sliding-window", ns, ttl=600)
    without = config(tmp_path, redis_url, "sliding-window", ns)
    data, guard = keys_of(without, session_id)
    async with open_memory(with_ttl, session_id=session_id) as mem:
        await mem.add(Message("user", "one"))
        assert await redis_client.pttl(data) > 0 and await redis_client.pttl(guard) > 0
    async with open_memory(without, session_id=session_id) as mem:
        await mem.add(Message("user", "two"))
        assert [m.content for m in await mem.get()] == ["one", "two"]  # same view, same keys
        assert await redis_client.pttl(data) == -1 and await redis_client.pttl(guard) == -1


async def test_the_projectors_fold_sets_the_ttl_and_checkpoints_never_expire(
    redis_url: str, redis_client: aioredis.Redis
) -> None:
    from helix_es.stores.redis.views import RedisStore

    ns = unique("ttl")
    topic = names.topic(ns)
    view = TokenWindow(100, ttl=45.0)
    records = [
        Record(Event(ns, f"s{i % 3}", MessageAdded(Message("user", f"m{i}"))), Position(topic, 1, i)) for i in range(9)
    ]
    store = RedisStore(redis_url)
    try:
        assert await project(view, store, records) == 9
        for s in ("s0", "s1", "s2"):
            data, guard = store.keys(view, SessionKey(ns, s))
            assert 43_000 < await redis_client.pttl(data) <= 45_000
            assert 43_000 < await redis_client.pttl(guard) <= 45_000
        assert await redis_client.pttl(names.checkpoint_key(view.name)) == -1
        assert await store.checkpoint(view, topic, 1) == 8
    finally:
        await store.close()


async def test_memory_store_ignores_ttl(
    tmp_path: Path, redis_url: str, redis_client: aioredis.Redis, session_id: str
) -> None:
    """TTL is a Redis feature, as in the seed: in-process views keep the session. The control: the
    same view and ttl in Redis, written at the same time, does expire; once it has, the in-process
    one is past its ttl too, and still holds the session."""
    ns = unique("ttl")
    cfg = {
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "memory": {"type": "sliding-window", "window_size": 5, "ttl": "50ms", "namespace": ns},
    }
    control = config(tmp_path / "control", redis_url, "sliding-window", ns, ttl="50ms")
    async with open_memory(cfg, session_id=session_id) as mem, open_memory(control, session_id=session_id) as red:
        assert load_config(cfg).memory.view.ttl == load_config(control).memory.view.ttl == 0.05
        await mem.add(Message("user", "kept"))
        await red.add(Message("user", "kept"))
        await wait_for(
            lambda: _gone(redis_client, *keys_of(control, session_id)), 10, "the Redis control to expire (50 ms)"
        )
        assert await red.get() == []  # expired there
        assert [m.content for m in await mem.get()] == ["kept"]  # not here
        await mem.add(Message("user", "still"))
        assert [m.content for m in await mem.get()] == ["kept", "still"]


async def _gone(client: aioredis.Redis, *keys: str) -> bool:
    return await client.exists(*keys) == 0


def test_ttl_is_not_part_of_a_views_identity() -> None:
    assert SlidingWindow(3, ttl=10) == SlidingWindow(3)
    assert {Conversation(ttl=1.0), Conversation()} == {Conversation()}
    assert TokenWindow(10, ttl=5, tool_pairs="split").name == "token-window-10-est3"
    assert TokenWindow(10, ttl=5).name == "token-window-10-est3-pairs"
