"""The seed's three YAML examples, verbatim: they load unchanged and run, embedded, with no Kafka."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from helix_es import Message, load_config, open_memory
from tests.conftest import unique
from tests.model_server import ModelServer
from tests.seed_examples import COMPOSITE_RECENT_PLUS_VECTOR, MULTI_TENANT_REDIS, SLIDING_WITH_LOGGING


@pytest.fixture(autouse=True)
def embedded_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default embedded log is .helix/log under the working directory


async def test_sliding_window_with_logging(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="helix_es.memory")
    async with open_memory(SLIDING_WITH_LOGGING, session_id=unique("s")) as mem:
        for i in range(35):
            await mem.add(Message("user", f"turn {i}"))
        got = await mem.get()
        assert [m.content for m in got] == [f"turn {i}" for i in range(5, 35)]
    assert any("get -> 30 messages" in r.getMessage() for r in caplog.records)
    assert Path(".helix/log/helix.memory.chat.log").exists()  # the agent id is the namespace


async def test_multi_tenant_redis_conversation(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HELIX_REDIS_URL", redis_url)  # this deployment's Redis, not the seed's `redis` host
    session = unique("tenant")
    async with open_memory(MULTI_TENANT_REDIS, session_id=session) as mem:
        await mem.add(Message("user", "hello"))
        assert [m.content for m in await mem.get()] == ["hello"]
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(redis_url)
    ttl = await client.ttl(f"helix:memory:prod-chat:{{{session}}}")
    await client.aclose()
    assert 168 * 3600 - 60 < ttl <= 168 * 3600


async def test_composite_recent_window_plus_vector_recall(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The openai provider reads the endpoint and key like the official SDK does.
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-local")
    assert load_config(COMPOSITE_RECENT_PLUS_VECTOR).memory.type == "composite"
    async with open_memory(COMPOSITE_RECENT_PLUS_VECTOR, session_id=unique("s")) as mem:
        for i in range(25):
            await mem.add(Message("user", f"note {i}: the code word is {'apple' if i == 3 else 'pear'}"))
        got = await mem.get()
        assert len(got) == 20  # the vector part adds nothing to get
        hits = await mem.search("note 3: the code word is apple", limit=5)
        assert hits and "apple" in hits[0].content  # recalled from beyond the window, by similarity
    assert model_server.count("/embeddings") >= 1
