"""One suite that every store (memory, Redis, Postgres) under both logs (embedded, Kafka) must pass.

Under Kafka the views are written by real projectors running beside the test, so every
read here also proves read-your-writes through the whole path.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from helix_es import InvalidInput, InvalidMessage, Message, ToolCall, open_memory
from helix_es.config import load_config
from helix_es.projection.factory import open_log, open_store
from helix_es.projection.session import SessionProjection
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow
from projectors.runner import Projector
from tests.conftest import RUN, copy_always, unique

NS_A = f"conf-{RUN}-a"
NS_B = f"conf-{RUN}-b"
VIEWS = {"conversation": {"type": "conversation"}, "window": {"type": "sliding-window", "window_size": 3}}
COMBOS = [
    ("embedded", "memory"),
    ("embedded", "redis"),
    ("embedded", "postgres"),
    ("embedded", "postgres-copy"),  # every append by COPY, as big batches (rebuilds) write them
    ("kafka", "redis"),
    ("kafka", "postgres"),
]


@dataclass
class Harness:
    log: dict[str, Any]
    store: dict[str, Any]
    ns_a: str
    ns_b: str

    def config(self, view: str, namespace: str | None = None, **extra: Any) -> dict[str, Any]:
        ns = namespace or self.ns_a
        memory = {**VIEWS[view], **self.store, "namespace": ns, "read_timeout": 30, **extra}
        return {"log": self.log, "memory": memory}

    async def history(self, namespace: str, session_id: str) -> list[Any]:
        log = open_log(load_config(self.config("conversation", namespace)).log)
        try:
            return [r async for r in log.read(namespace, session_id=session_id)]
        finally:
            await log.close()


class _Projectors:
    """Real projectors for the suite's views, running in the test loop until the session ends."""

    def __init__(self, bootstrap: str, store_cfg: dict[str, Any]) -> None:
        self.stop = asyncio.Event()
        config = load_config({"memory": {"type": "conversation", **store_cfg}})
        self.stores = [open_store(config.memory) for _ in range(2)]
        views = (Conversation(), SlidingWindow(3))
        self.tasks = [
            asyncio.create_task(Projector(SessionProjection(view, store), bootstrap_servers=bootstrap).run(self.stop))
            for view, store in zip(views, self.stores, strict=True)
        ]

    async def close(self) -> None:
        self.stop.set()
        results = await asyncio.gather(*self.tasks, return_exceptions=True)
        for store in self.stores:
            await store.close()
        for result in results:
            if isinstance(result, BaseException):
                raise result


@pytest.fixture(scope="session")
async def kafka_topics(kafka_bootstrap: str) -> str:
    from helix_es.log.kafka import KafkaLog

    log = KafkaLog(kafka_bootstrap, partitions=3)
    for ns in (NS_A, NS_B):  # exist before the projectors subscribe: no rebalance mid-suite
        await log.ensure_topic(ns)
    await log.close()
    return kafka_bootstrap


async def _serve(bootstrap: str, store: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
    running = _Projectors(bootstrap, store)
    yield store
    await running.close()


@pytest.fixture(scope="session")
async def projectors_redis(kafka_topics: str, redis_url: str) -> AsyncIterator[dict[str, Any]]:
    async for store in _serve(kafka_topics, {"store": "redis", "redis_url": redis_url}):
        yield store


@pytest.fixture(scope="session")
async def projectors_postgres(kafka_topics: str, postgres_dsn: str) -> AsyncIterator[dict[str, Any]]:
    async for store in _serve(kafka_topics, {"store": "postgres", "dsn": postgres_dsn}):
        yield store


@pytest.fixture(params=COMBOS, ids=[f"{log}-{store}" for log, store in COMBOS])
def harness(request: pytest.FixtureRequest, tmp_path: Any) -> Harness:
    log_kind, store_kind = request.param
    if log_kind == "kafka":
        store = request.getfixturevalue(f"projectors_{store_kind}")
        log = {"type": "kafka", "bootstrap_servers": request.getfixturevalue("kafka_bootstrap"), "partitions": 3}
        return Harness(log, store, NS_A, NS_B)
    store = {"store": store_kind}
    if store_kind == "redis":
        store["redis_url"] = request.getfixturevalue("redis_url")
    elif store_kind.startswith("postgres"):
        store = {"store": "postgres", "dsn": request.getfixturevalue("postgres_dsn")}
        if store_kind == "postgres-copy":
            copy_always(request.getfixturevalue("monkeypatch"))
    # Each test has a log of its own, so its namespaces must be new to the shared stores too.
    return Harness({"type": "embedded", "path": str(tmp_path / "log")}, store, unique("emb-a"), unique("emb-b"))


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


async def test_add_then_get_returns_every_field(harness: Harness, session_id: str) -> None:
    sent = [
        Message("system", "You are terse."),
        Message("user", "What's the weather in Oslo?", name="ada", metadata={"lang": "en"}),
        Message("assistant", "", tool_calls=(ToolCall("call-1", "weather", '{"city": "Oslo"}'),)),
        Message("tool", '{"temp": -3}', tool_call_id="call-1"),
        Message("assistant", "It is -3 °C in Oslo. ☃"),
    ]
    async with open_memory(harness.config("conversation"), session_id=session_id) as mem:
        positions = [await mem.add(m) for m in sent]
        assert await mem.get() == sent
    assert [p.offset for p in positions] == sorted(p.offset for p in positions)
    assert len({(p.topic, p.partition) for p in positions}) == 1  # one session, one partition


async def test_sliding_window_keeps_first_system_message(harness: Harness, session_id: str) -> None:
    async with open_memory(harness.config("window"), session_id=session_id) as mem:
        await mem.add(Message("system", "rules"))
        for i in range(5):
            await mem.add(Message("user", f"u{i}"))
        assert contents(await mem.get()) == ["rules", "u2", "u3", "u4"]
        await mem.add(Message("system", "a second system message counts"))
        assert contents(await mem.get()) == ["rules", "u3", "u4", "a second system message counts"]


async def test_clear_empties_the_view_and_the_log_keeps_everything(harness: Harness, session_id: str) -> None:
    async with open_memory(harness.config("conversation"), session_id=session_id) as mem:
        await mem.add(Message("user", "one"))
        await mem.add(Message("assistant", "two"))
        await mem.clear()
        assert await mem.get() == []
        await mem.add(Message("user", "three"))
        assert contents(await mem.get()) == ["three"]
    history = await harness.history(harness.ns_a, session_id)
    kinds = [type(r.event.payload).__name__ for r in history]
    assert kinds == ["MessageAdded", "MessageAdded", "MemoryCleared", "MessageAdded"]


async def test_sessions_are_isolated(harness: Harness) -> None:
    a, b = unique("alice"), unique("bob")
    async with (
        open_memory(harness.config("conversation"), session_id=a) as mem_a,
        open_memory(harness.config("conversation"), session_id=b) as mem_b,
    ):
        await mem_a.add(Message("user", "alice's secret"))
        await mem_b.add(Message("user", "bob's note"))
        await mem_a.clear()
        await mem_a.add(Message("user", "alice again"))
        assert contents(await mem_a.get()) == ["alice again"]
        assert contents(await mem_b.get()) == ["bob's note"]
        assert await mem_b.search("secret") == []


async def test_namespaces_are_isolated(harness: Harness, session_id: str) -> None:
    async with (
        open_memory(harness.config("window", harness.ns_a), session_id=session_id) as in_a,
        open_memory(harness.config("window", harness.ns_b), session_id=session_id) as in_b,
    ):
        await in_a.add(Message("user", "tenant a"))
        await in_b.add(Message("user", "tenant b"))
        await in_b.clear()
        assert contents(await in_a.get()) == ["tenant a"]
        assert await in_b.get() == []


async def test_search_is_case_insensitive_substring_with_limit(harness: Harness, session_id: str) -> None:
    async with open_memory(harness.config("conversation"), session_id=session_id) as mem:
        for text in ["The Kafka log", "redis view", "KAFKA again", "postgres", "kafkaesque"]:
            await mem.add(Message("user", text))
        assert contents(await mem.search("kafka", limit=10)) == ["The Kafka log", "KAFKA again", "kafkaesque"]
        assert contents(await mem.search("kAfKa", limit=2)) == ["The Kafka log", "KAFKA again"]
        assert await mem.search("nothing like it") == []
        with pytest.raises(InvalidInput, match="limit"):
            await mem.search("kafka", limit=0)


async def test_bad_input_is_refused_and_nothing_is_written(harness: Harness, session_id: str) -> None:
    async with open_memory(harness.config("conversation"), session_id=session_id) as mem:
        await mem.add(Message("user", "kept"))
        with pytest.raises(InvalidMessage, match="role"):
            await mem.add(Message("robot", "nope"))  # type: ignore[arg-type]
        with pytest.raises(InvalidMessage, match=r"tool_calls\[0\]\.arguments"):
            await mem.add(Message("assistant", "", tool_calls=[{"id": "c", "name": "f", "arguments": "{oops"}]))
        with pytest.raises(InvalidMessage, match="message"):
            await mem.add({"role": "user", "content": "a dict is not a Message"})  # type: ignore[arg-type]
        assert contents(await mem.get()) == ["kept"]
    assert len(await harness.history(harness.ns_a, session_id)) == 1


async def test_a_second_client_sees_its_own_writes_after_the_first(harness: Harness, session_id: str) -> None:
    cfg = harness.config("window")
    async with open_memory(cfg, session_id=session_id) as first:
        await first.add(Message("user", "from first"))
        async with open_memory(cfg, session_id=session_id) as second:
            await second.add(Message("user", "from second"))
            assert contents(await second.get()) == ["from first", "from second"]


async def test_views_are_rebuilt_when_reopened(harness: Harness, session_id: str) -> None:
    cfg = harness.config("window")
    async with open_memory(cfg, session_id=session_id) as mem:
        for i in range(4):
            await mem.add(Message("user", f"m{i}"))
        expected = contents(await mem.get())
    async with open_memory(cfg, session_id=session_id) as mem:
        assert contents(await mem.get()) == expected == ["m1", "m2", "m3"]


async def test_an_embedded_write_survives_a_store_outage(
    tmp_path: Any, redis_url: str, session_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The log append is the write; a view that could not be folded catches up, nothing twice."""
    import redis.exceptions

    monkeypatch.delenv("HELIX_REDIS_URL", raising=False)  # it would override the unreachable address
    ns = unique("outage")
    log = {"type": "embedded", "path": str(tmp_path)}
    down = {
        "log": log,
        "memory": {**VIEWS["window"], "store": "redis", "namespace": ns, "redis_url": "redis://127.0.0.1:1/0"},
    }  # nothing listens on port 1
    async with open_memory(down, session_id=session_id) as mem:
        position = await mem.add(Message("user", "written while Redis was away"))
        assert position.offset == 0
        with pytest.raises(redis.exceptions.ConnectionError):
            await mem.get()
    up = {"log": log, "memory": {**down["memory"], "redis_url": redis_url}}
    async with open_memory(up, session_id=session_id) as mem:
        assert contents(await mem.get()) == ["written while Redis was away"]
        await mem.add(Message("user", "and after"))
        assert contents(await mem.get()) == ["written while Redis was away", "and after"]
    assert len(await Harness(log, {}, ns, ns).history(ns, session_id)) == 2
