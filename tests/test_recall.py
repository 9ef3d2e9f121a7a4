"""`Memory.recall` through open_memory: its arguments checked, its hits on each view and store, composites,
the sync memory, encryption's refusal, and `search:` on the vector view."""

from __future__ import annotations

import asyncio
import base64
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from helix_es import InvalidInput, Message, RecallHit, open_memory
from helix_es.model.errors import ConfigError
from helix_es.sync import open_memory as open_sync
from tests.conftest import start_projector, stop, unique
from tests.test_long_term import embedded as long_term_config
from tests.test_long_term import store  # noqa: F401  # the long-term stores fixture

T0, T1 = datetime(2025, 1, 1, tzinfo=UTC), datetime(2025, 1, 2, tzinfo=UTC)
TURNS = [
    ("alice", "Caroline", "I moved to Porto last September"),
    ("alice", "Dmitri", "My dog is a husky called Miso"),
    ("bob", "Caroline", "Porto has the best custard tarts"),
    ("bob", "Dmitri", "I am learning the ukulele"),
]


def vector(tmp_path: Path, namespace: str, **memory: Any) -> dict[str, Any]:
    mem = {"type": "vector", "search": "hybrid", "namespace": namespace, "read_timeout": 30, **memory}
    return {"log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False}, "memory": mem}


async def fill(cfg: dict[str, Any]) -> None:
    for session in ("alice", "bob"):
        async with open_memory(cfg, session_id=session) as mem:
            for s, who, text in TURNS:
                if s == session:
                    await mem.add(Message("user", text, name=who, metadata={"speaker": who}))


def texts(hits: list[RecallHit]) -> list[str]:
    return [h.message.content for h in hits]


@pytest.mark.parametrize(
    ("call", "field"),
    [
        ({"query": ""}, "query"),
        ({"query": "   "}, "query"),
        ({"query": 3}, "query"),
        ({"query": "x", "limit": 0}, "limit"),
        ({"query": "x", "limit": True}, "limit"),
        ({"query": "x", "limit": 10_000}, "limit"),
        ({"query": "x", "sessions": "alice"}, "sessions"),
        ({"query": "x", "sessions": [""]}, "sessions[]"),
        ({"query": "x", "where": ["speaker"]}, "where"),
        ({"query": "x", "where": {"speaker": 3}}, "where['speaker']"),
        ({"query": "x", "after": datetime(2024, 1, 1)}, "after"),  # naive
        ({"query": "x", "before": "2024-01-01"}, "before"),
        (
            {"query": "x", "after": datetime(2025, 1, 1, tzinfo=UTC), "before": datetime(2024, 1, 1, tzinfo=UTC)},
            "after",
        ),
        ({"query": "x", "explain": "yes"}, "explain"),
        ({"query": "x", "mode": "psychic"}, "mode"),
    ],
)
async def test_bad_arguments_are_refused_naming_them(tmp_path: Path, call: dict[str, Any], field: str) -> None:
    async with open_memory(vector(tmp_path, unique("rc")), session_id="alice") as mem:
        with pytest.raises(InvalidInput) as caught:
            await mem.recall(**call)
        assert caught.value.field == field


async def test_the_vector_view_recalls_across_sessions_and_search_follows_its_mode(tmp_path: Path) -> None:
    cfg = vector(tmp_path, unique("rc"), top_k=2)
    await fill(cfg)
    async with open_memory(cfg, session_id="carol") as mem:
        hits = await mem.recall("Which instrument is Dmitri learning, the ukulele?")
        assert len(hits) == 2  # top_k is the default limit
        assert texts(hits)[0] == TURNS[3][2] and hits[0].session_id == "bob"
        assert len(await mem.recall("Porto", limit=4)) == 4  # the limit is what the caller gets
        # search: set, so search is recall's messages, and its limit is honoured past top_k
        assert len(await mem.search("Porto", limit=3)) == 3
        assert [m.content for m in await mem.search("ukulele instrument", limit=1)] == [TURNS[3][2]]
        assert texts(await mem.recall("Porto", mode="substring")) == [TURNS[0][2], TURNS[2][2]]


async def test_a_vector_view_without_search_keeps_the_seeds_search(tmp_path: Path) -> None:
    cfg = vector(tmp_path, unique("rc"), top_k=2)
    del cfg["memory"]["search"]
    await fill(cfg)
    async with open_memory(cfg, session_id="alice") as mem:
        assert len(await mem.search("Porto", limit=10)) == 2  # the seed: min(limit, top_k)
        assert len(await mem.recall("Porto", limit=3)) == 3  # recall by vector alone
        with pytest.raises(InvalidInput, match="search: hybrid"):
            await mem.recall("Porto", mode="keyword")


def test_a_bad_search_mode_is_a_config_error(tmp_path: Path) -> None:
    from helix_es import load_config

    with pytest.raises(ConfigError, match=r"memory\.search"):
        load_config(vector(tmp_path, "x", search="fuzzy"))


async def test_the_long_term_view_recalls_by_substring_with_filters(
    tmp_path: Path,
    store: dict[str, Any],  # noqa: F811
) -> None:
    cfg = long_term_config(tmp_path, store, unique("rc"))
    await fill(cfg)
    async with open_memory(cfg, session_id="alice") as mem:
        hits = await mem.recall("porto", explain=True)
        assert texts(hits) == [TURNS[0][2], TURNS[2][2]]  # oldest first
        assert [h.session_id for h in hits] == ["alice", "bob"]
        assert hits[0].explain == {"mode": "substring", "substring": {"score": 1.0, "rank": 1.0}}
        assert hits[0].occurred_at <= hits[1].occurred_at
        assert texts(await mem.recall("porto", sessions=["bob"])) == [TURNS[2][2]]
        assert texts(await mem.recall("porto", sessions=["bob", "alice"], limit=1)) == [TURNS[0][2]]
        assert texts(await mem.recall("e", where={"speaker": "Dmitri"})) == [TURNS[1][2], TURNS[3][2]]
        assert await mem.recall("porto", after=datetime.now(UTC) + timedelta(minutes=1)) == []
        with pytest.raises(InvalidInput, match="substring"):
            await mem.recall("porto", mode="hybrid")


async def test_windows_cannot_recall_and_a_composite_asks_the_part_that_can(tmp_path: Path) -> None:
    ns = unique("rc")
    log = {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False}
    window = {"log": log, "memory": {"type": "sliding-window", "window_size": 3, "namespace": ns}}
    async with open_memory(window, session_id="alice") as mem:
        with pytest.raises(InvalidInput, match="vector and long-term") as caught:
            await mem.recall("Porto")
        assert caught.value.field == "memory"
    parts = [{"type": "sliding-window", "window_size": 3}, {"type": "vector", "search": "hybrid"}]
    composite = {"log": log, "memory": {"type": "composite", "namespace": ns, "backends": parts}}
    async with open_memory(composite, session_id="alice") as mem:
        await mem.add(Message("user", "I moved to Porto last September"))
        assert texts(await mem.recall("Where did I move?", limit=1)) == ["I moved to Porto last September"]


def test_the_sync_memory_recalls(tmp_path: Path) -> None:
    cfg = vector(tmp_path, unique("rc"))
    with open_sync(cfg, session_id="alice") as mem:
        mem.add(Message("user", "I moved to Porto last September"))
        hits = mem.recall("Porto", limit=1, explain=True)
        assert texts(hits) == ["I moved to Porto last September"] and hits[0].explain is not None


async def test_an_encrypted_memory_refuses_recall_and_says_what_to_use(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    cfg = {**vector(tmp_path, unique("rc")), "memory_middleware": ["encryption"]}
    async with open_memory(cfg, session_id="alice") as mem:
        with pytest.raises(InvalidInput, match="encrypted memory cannot recall"):
            await mem.recall("Porto")


async def test_occurred_at_is_what_recall_filters_and_shows(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    for where in ({"store": "memory"}, {"store": "postgres", "dsn": request.getfixturevalue("postgres_dsn")}):
        cfg = vector(tmp_path / where["store"], unique("rc"), **where)
        said = [datetime(2023, month, 1, 12, tzinfo=UTC) for month in (2, 5, 9)]
        texts_ = ["We adopted a husky in February", "The husky learned to sit in May", "The husky is huge now"]
        async with open_memory(cfg, session_id="alice") as mem:
            await mem.add_many([Message("user", t, occurred_at=at) for t, at in zip(texts_, said, strict=True)])
            spring = await mem.recall("husky", after=said[0], before=said[2], explain=True)
            assert texts(spring) == [texts_[1]], where
            assert spring[0].occurred_at == said[1]
            assert texts(await mem.recall("husky", before=said[1], mode="substring")) == [texts_[0]]
            # a question about the present lifts the newest of equally good hits
            now = await mem.recall("How big is the husky now?", limit=1, mode="hybrid")
            assert texts(now) == [texts_[2]], where


def test_a_long_term_index_needs_a_store_that_keeps_one_and_embed_needs_an_index() -> None:
    from helix_es import load_config

    plain = load_config({"memory": {"type": "long-term", "search": "substring"}}).memory
    assert plain.parts == (plain,) and plain.index is None
    indexed = load_config({"memory": {"type": "long-term", "search": "keyword", "store": "memory"}}).memory
    assert [(p.type, p.view.name) for p in indexed.parts] == [("long-term", "long-term"), ("vector", "vector-hash-384")]
    redis = {"store": "redis", "redis_url": "redis://127.0.0.1:1/0"}
    with pytest.raises(ConfigError, match=r"memory\.search.*lives in memory or postgres.*store: redis"):
        load_config({"memory": {"type": "long-term", "search": "hybrid", **redis}})
    with pytest.raises(ConfigError, match=r"memory\.embed.*not substring"):
        load_config({"memory": {"type": "long-term", "embed": {"provider": "hash"}}})
    with pytest.raises(ConfigError, match=r"memory\.search.*must be one of"):
        load_config({"memory": {"type": "long-term", "search": "fuzzy"}})
    composite = {"type": "composite", "backends": [{"type": "conversation"}, {"type": "long-term", "search": "hybrid"}]}
    parts = load_config({"memory": composite}).memory.parts
    assert [p.type for p in parts] == ["conversation", "long-term", "vector"]


@pytest.mark.parametrize("where", ["memory", "postgres"])
async def test_a_long_term_view_with_search_set_recalls_through_its_index(
    tmp_path: Path, where: str, request: pytest.FixtureRequest
) -> None:
    where_ = {"store": "postgres", "dsn": request.getfixturevalue("postgres_dsn")} if where == "postgres" else {}
    cfg = long_term_config(tmp_path, where_, unique("rc"), search="hybrid")
    await fill(cfg)
    async with open_memory(cfg, session_id="alice") as mem:
        await mem.add(Message("user", "I am learning the ukulele"))  # said twice: get keeps both
        assert [m.content for m in await mem.get()] == [t for _, _, t in TURNS] + ["I am learning the ukulele"]
        hits = await mem.recall("Who is learning the ukulele?", limit=2, explain=True)
        assert texts(hits) == ["I am learning the ukulele"] * 2
        assert {h.session_id for h in hits} == {"alice", "bob"} and hits[0].explain is not None
        assert hits[0].explain["mode"] == "hybrid" and set(hits[0].explain) >= {"vector", "keyword"}
        assert texts(await mem.recall("porto", mode="substring")) == [TURNS[0][2], TURNS[2][2]]
        assert texts(await mem.recall("husky", mode="keyword", where={"speaker": "Dmitri"})) == [TURNS[1][2]]
        assert [m.content for m in await mem.search("custard tarts", 1)] == [TURNS[2][2]]  # search is recall's
        await mem.clear()
        assert await mem.get() == [] and await mem.recall("ukulele") == []
    async with open_memory(cfg, session_id="carol") as mem:  # reopened: both views fold the log again
        await mem.add(Message("user", "Porto again"))
        assert texts(await mem.recall("porto", mode="keyword")) == ["Porto again"]


@pytest.mark.parametrize("kind", ["vector", "long-term"])
async def test_recall_on_kafka_with_a_projector_into_postgres(
    tmp_path: Path, kafka_bootstrap: str, postgres_dsn: str, kind: str
) -> None:
    prefix = f"helix.rc-{unique('p')}."
    memory = {"type": kind, "search": "hybrid", "store": "postgres", "dsn": postgres_dsn, "read_timeout": 60}
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "topic_prefix": prefix, "partitions": 2},
        "memory": {**memory, "namespace": unique("rc")},
    }
    projector = start_projector(cfg, tmp_path)
    try:
        await fill(cfg)  # two sessions, so both partitions may hold turns
        async with open_memory(cfg, session_id="bob") as mem:
            # bob's writes share a partition: this read waits for all of them (another session's, not)
            await mem.add(Message("user", "Carol bought a ukulele too", name="Carol"))
            hits = await mem.recall("Who is learning the ukulele?", limit=2, explain=True)
            assert {h.message.content for h in hits} == {TURNS[3][2], "Carol bought a ukulele too"}
            assert all(h.explain is not None and h.explain["keyword"]["rank"] <= 2 for h in hits)
            only = await mem.recall("Porto", sessions=["bob"], mode="keyword")
            assert [(h.session_id, h.message.content) for h in only] == [("bob", TURNS[2][2])]
            if kind == "long-term":  # the rows too: every message (alice's partition may still be folding)
                for _ in range(150):
                    if len(await mem.get()) == len(TURNS) + 1:
                        break
                    await asyncio.sleep(0.2)
                assert len(await mem.get()) == len(TURNS) + 1
    finally:
        stop(projector)
