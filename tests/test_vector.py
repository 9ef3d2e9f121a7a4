"""The vector memory over the memory and Postgres stores, the embedded log and Kafka.

Postgres and Kafka are the real services of tests/conftest.py; the paid model is a local
OpenAI-compatible HTTP server (tests/test_embed.py) that counts what it is asked to embed.
The store-level suite is `tests.contracts.vector_store.VectorStoreContract`, run here on each store.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, cast

import asyncpg
import pytest

from helix_es import Message, ToolCall, ViewMemory, load_config, open_memory
from helix_es.log.embedded import EmbeddedLog
from helix_es.log.kafka import KafkaLog
from helix_es.projection.factory import open_projection
from helix_es.projection.vector import VectorProjection
from helix_es.providers.embed import HashEmbedder, OpenAIEmbedder
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.stores.ports.vector import VectorStore
from helix_es.stores.postgres.vector import PostgresVectorStore
from helix_es.views.vector import Vector
from projectors.runner import Projector
from tests.conftest import unique, wait_for
from tests.contracts.vector_recall import VectorRecallContract
from tests.contracts.vector_store import TRAVEL, NewStore, VectorStoreContract, contents, record, said, search
from tests.test_embed import EmbeddingServer

STORES = ["memory", "postgres"]


@pytest.fixture
def embedding_server() -> Any:
    with EmbeddingServer() as server:
        yield server


@pytest.fixture(params=STORES)
def store_kind(request: pytest.FixtureRequest) -> str:
    return cast(str, request.param)


def memory_config(
    request: pytest.FixtureRequest, tmp_path: Path, store: str, namespace: str, **memory: Any
) -> dict[str, Any]:
    mem: dict[str, Any] = {"type": "vector", "store": store, "namespace": namespace, "read_timeout": 30, **memory}
    if store == "postgres":
        mem["dsn"] = request.getfixturevalue("postgres_dsn")
    return {"log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False}, "memory": mem}


def projection_of(mem: Any) -> VectorProjection:
    return cast(VectorProjection, cast(ViewMemory, mem).projection)


# --- through open_memory on the embedded log ---------------------------------------------------


async def test_the_message_sharing_words_with_the_query_ranks_first(
    request: pytest.FixtureRequest, tmp_path: Path, store_kind: str, session_id: str
) -> None:
    cfg = memory_config(request, tmp_path, store_kind, unique("vec"), top_k=5)
    async with open_memory(cfg, session_id=session_id) as mem:
        for text in TRAVEL:
            await mem.add(Message("user", text))
        assert contents(await mem.search("when does the flight to Oslo leave?", limit=3))[0] == TRAVEL[0]
        assert contents(await mem.search("hotel in Bergen", limit=1)) == [TRAVEL[1]]
        assert contents(await mem.search("what is my cat called", limit=2))[0] == TRAVEL[2]
        assert contents(await mem.search("tea or coffee?", limit=1)) == [TRAVEL[3]]
        assert await mem.get() == []  # search-only, as in the seed


async def test_top_k_caps_the_limit(
    request: pytest.FixtureRequest, tmp_path: Path, store_kind: str, session_id: str
) -> None:
    cfg = memory_config(request, tmp_path, store_kind, unique("vec"), top_k=2)
    async with open_memory(cfg, session_id=session_id) as mem:
        for text in TRAVEL:
            await mem.add(Message("user", text))
        assert len(await mem.search("the", limit=10)) == 2
        assert len(await mem.search("the", limit=1)) == 1
        assert await mem.search("   ", limit=5) == []  # nothing to embed


async def test_namespaces_are_isolated_and_a_clear_empties_only_its_own(
    request: pytest.FixtureRequest, tmp_path: Path, store_kind: str
) -> None:
    ns_a, ns_b = unique("vec-a"), unique("vec-b")
    async with (
        open_memory(memory_config(request, tmp_path, store_kind, ns_a), session_id="alice") as in_a,
        open_memory(memory_config(request, tmp_path, store_kind, ns_a), session_id="bob") as also_a,
        open_memory(memory_config(request, tmp_path, store_kind, ns_b), session_id="alice") as in_b,
    ):
        await in_a.add(Message("user", "the secret code is swordfish"))
        await also_a.add(Message("user", "bob's swordfish recipe"))
        await in_b.add(Message("user", "tenant b talks about swordfish too"))
        assert sorted(contents(await in_a.search("swordfish"))) == [
            "bob's swordfish recipe",
            "the secret code is swordfish",
        ]
        assert contents(await in_b.search("swordfish")) == ["tenant b talks about swordfish too"]
        # The store is per agent (namespace), as in the seed: one session's clear empties it.
        await in_a.clear()
        assert await in_a.search("swordfish") == []
        assert await also_a.search("swordfish") == []
        assert contents(await in_b.search("swordfish")) == ["tenant b talks about swordfish too"]
        await also_a.add(Message("user", "swordfish after the clear"))
        assert contents(await in_a.search("swordfish")) == ["swordfish after the clear"]


async def test_messages_without_text_are_not_indexed(
    request: pytest.FixtureRequest, tmp_path: Path, store_kind: str, session_id: str
) -> None:
    ns = unique("vec")
    async with open_memory(memory_config(request, tmp_path, store_kind, ns), session_id=session_id) as mem:
        await mem.add(Message("user", "weather in Oslo?"))
        await mem.add(Message("assistant", "", tool_calls=(ToolCall("c1", "weather", '{"city": "Oslo"}'),)))
        await mem.add(Message("tool", '{"temp": -3, "city": "Oslo"}', tool_call_id="c1"))
        assert contents(await mem.search("oslo")) == ["weather in Oslo?", '{"temp": -3, "city": "Oslo"}']
        p = projection_of(mem)
        assert await p.store.count(p.name, ns) == 2


async def test_the_view_is_rebuilt_from_the_log(
    request: pytest.FixtureRequest, tmp_path: Path, store_kind: str, session_id: str
) -> None:
    cfg = memory_config(request, tmp_path, store_kind, unique("vec"))
    async with open_memory(cfg, session_id=session_id) as mem:
        for text in TRAVEL:
            await mem.add(Message("user", text))
        await mem.clear()
        await mem.add(Message("user", TRAVEL[0]))
        before = contents(await mem.search("flight hotel cat tea meeting"))
    async with open_memory(cfg, session_id=session_id) as mem:
        assert contents(await mem.search("flight hotel cat tea meeting")) == before == [TRAVEL[0]]


# --- the fold, batch by batch: the contract, on each store ---------------------------------------


class TestMemoryVectorStore(VectorStoreContract, VectorRecallContract):
    @pytest.fixture
    def new_store(self) -> Iterator[NewStore]:
        made: list[VectorStore] = []

        def new() -> VectorStore:
            made.append(MemoryVectorStore())
            return made[-1]

        yield new

    async def forget_embeddings(self, model: str) -> None:
        pass  # it keeps none: the log does

    async def lose_checkpoints(self, view: str) -> bool:
        return False  # in the process: checkpoints and entries go together


class TestPostgresVectorStore(VectorStoreContract, VectorRecallContract):
    caches_embeddings = True

    @pytest.fixture
    async def new_store(self, postgres_dsn: str) -> AsyncIterator[NewStore]:
        self.dsn = postgres_dsn
        made: list[VectorStore] = []

        def new() -> VectorStore:
            made.append(PostgresVectorStore(postgres_dsn))
            return made[-1]

        yield new
        for store in made:
            await store.close()

    async def _execute(self, sql: str, *args: str) -> None:
        conn = await asyncpg.connect(self.dsn)
        try:
            await conn.execute(sql, *args)
        finally:
            await conn.close()

    async def forget_embeddings(self, model: str) -> None:
        await self._execute("DELETE FROM helix_embeddings WHERE model = $1", model)

    async def lose_checkpoints(self, view: str) -> bool:
        await self._execute("DELETE FROM helix_checkpoints WHERE view = $1", view)
        return True


async def test_the_memory_store_evicts_the_oldest_entries_at_its_cap(caplog: pytest.LogCaptureFixture) -> None:
    store = MemoryVectorStore(cap=5)
    p = VectorProjection("vector-test", HashEmbedder(64), store, top_k=100)
    ns_a, ns_b = unique("vec-a"), unique("vec-b")
    with caplog.at_level(logging.WARNING, logger="helix_es.stores.memory.vector"):
        await p.apply([record(ns_a, 0, i, i, said(f"note a{i}")) for i in range(4)])
        await p.apply([record(ns_b, 0, i, 10 + i, said(f"note b{i}")) for i in range(3)])
        await p.apply([record(ns_a, 0, 4, 20, said("note a4"))])
    assert sorted(contents(await search(p, ns_a, "note", 100))) == ["note a3", "note a4"]
    assert sorted(contents(await search(p, ns_b, "note", 100))) == ["note b0", "note b1", "note b2"]
    assert store.evicted == 3
    assert [r.message for r in caplog.records].count(
        "in-memory vector store reached its cap of 5 entries: evicting the oldest; "
        "use store: postgres to keep every message searchable"
    ) == 1
    # Far past the cap, still the newest `cap`, in one namespace or several.
    await p.apply([record(ns_b, 0, 3 + i, 30 + i, said(f"note b{3 + i}")) for i in range(50)])
    assert sorted(contents(await search(p, ns_b, "note", 100))) == [f"note b{i}" for i in range(48, 53)]
    assert await search(p, ns_a, "note", 100) == []


# --- paid embeddings: recorded on the log, never paid twice -----------------------------------


async def test_a_new_postgres_view_reuses_stored_embeddings(
    postgres_dsn: str, embedding_server: EmbeddingServer
) -> None:
    model = unique("m")
    ns = unique("vec")
    batch = [record(ns, 0, i, i, said(text)) for i, text in enumerate(TRAVEL)]
    first = VectorProjection(
        unique("vector-test"),
        OpenAIEmbedder(model, 384, base_url=embedding_server.base_url),
        PostgresVectorStore(postgres_dsn),
    )
    try:
        assert len((await first.apply(batch)).derived) == len(TRAVEL)
    finally:
        await first.close()
    assert embedding_server.texts == TRAVEL
    # Another view of the same model, in a "new process": helix_embeddings has every vector.
    second = VectorProjection(
        unique("vector-test"),
        OpenAIEmbedder(model, 384, base_url=embedding_server.base_url),
        PostgresVectorStore(postgres_dsn),
    )
    try:
        applied = await second.apply(batch, live=True)
        assert applied.derived == () and embedding_server.texts == TRAVEL
        assert contents(await search(second, ns, "cat", 1)) == [TRAVEL[2]]  # one call: the query
        assert embedding_server.texts == [*TRAVEL, "cat"]
    finally:
        await second.close()


async def test_a_rebuild_from_the_log_does_not_call_a_paid_model_again(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    store_kind: str,
    embedding_server: EmbeddingServer,
    session_id: str,
) -> None:
    model = unique("m")
    ns = unique("vec")
    embed = {"provider": "openai", "model": model, "dims": 384, "base_url": embedding_server.base_url}
    cfg = memory_config(request, tmp_path, store_kind, ns, embed=embed)
    async with open_memory(cfg, session_id=session_id) as mem:
        for text in [*TRAVEL, TRAVEL[0]]:
            await mem.add(Message("user", text))
        assert contents(await mem.search("green tea", 1)) == [TRAVEL[3]]
        name = projection_of(mem).name
    assert embedding_server.texts == [*TRAVEL, "green tea"]  # each text once, then the query
    log = EmbeddedLog(cfg["log"]["path"])
    kinds = [type(r.event.payload).__name__ async for r in log.read(ns)]
    await log.close()
    assert kinds.count("EmbeddingRecorded") == len(TRAVEL)

    if store_kind == "postgres":
        # Throw the view away, and the embedding cache too: only the log can bring the vectors back.
        conn = await asyncpg.connect(cfg["memory"]["dsn"])
        for sql, arg in [
            ("DELETE FROM helix_vectors WHERE view = $1", name),
            ("DELETE FROM helix_vector_namespaces WHERE view = $1", name),
            ("DELETE FROM helix_checkpoints WHERE view = $1", name),
            ("DELETE FROM helix_embeddings WHERE model = $1", f"openai/{model}"),
        ]:
            await conn.execute(sql, arg)
        await conn.close()
    async with open_memory(cfg, session_id=session_id) as mem:  # a fresh view, caught up from the log
        assert embedding_server.texts == [*TRAVEL, "green tea"]
        assert contents(await mem.search("the flight to Oslo", 2)) == [TRAVEL[0], TRAVEL[0]]
        assert projection_of(mem).embedded == 0


# --- end to end through Kafka -----------------------------------------------------------------


class _Running:
    def __init__(self, projection: VectorProjection, bootstrap: str, prefix: str) -> None:
        self.projection = projection
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(
            Projector(projection, bootstrap_servers=bootstrap, topic_prefix=prefix).run(self.stop)
        )

    async def close(self) -> None:
        self.stop.set()
        try:
            await self.task
        finally:
            await self.projection.close()


async def test_through_kafka_with_a_real_projector(
    kafka_bootstrap: str, postgres_dsn: str, embedding_server: EmbeddingServer
) -> None:
    ns = unique("vec")
    prefix = unique("vectest")  # topics, consumer groups and checkpoints of this test only
    embed = {"provider": "openai", "model": unique("m"), "dims": 384, "base_url": embedding_server.base_url}
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "topic_prefix": prefix, "partitions": 2},
        "memory": {
            "type": "vector",
            "store": "postgres",
            "dsn": postgres_dsn,
            "namespace": ns,
            "embed": embed,
            "top_k": 3,
            "read_timeout": 30,
        },
    }
    config = load_config(cfg)
    log = KafkaLog(kafka_bootstrap, topic_prefix=prefix, partitions=2)
    topic = await log.ensure_topic(ns)  # before the projector subscribes: no rebalance mid-test
    view = cast(Vector, config.memory.view)
    projector = _Running(cast(VectorProjection, open_projection(config.memory)), kafka_bootstrap, prefix)
    try:
        async with open_memory(cfg, session_id="alice") as alice, open_memory(cfg, session_id="bob") as bob:
            for i, text in enumerate(TRAVEL):
                await (alice if i % 2 else bob).add(Message("user", text))
            # Read-your-writes through the projector: each client sees its own last write.
            assert contents(await alice.search("tea or coffee", 1)) == [TRAVEL[3]]
            assert contents(await bob.search("the finance meeting", 1)) == [TRAVEL[4]]
            assert contents(await bob.search("hotel Bergen", 1)) == [TRAVEL[1]]  # alice's, applied before
            # Bob's clear empties the namespace by event time; his next read has seen it (same partition).
            await bob.clear()
            await bob.add(Message("user", "a new flight to Tromsø"))
            assert contents(await bob.search("flight", 5)) == ["a new flight to Tromsø"]

        async def all_recorded() -> bool:
            kinds = [type(r.event.payload).__name__ async for r in log.read(ns)]
            return kinds.count("EmbeddingRecorded") == len(TRAVEL) + 1

        await wait_for(all_recorded, what="EmbeddingRecorded events on the topic")
    finally:
        await projector.close()
    docs = [t for t in embedding_server.texts if t in {*TRAVEL, "a new flight to Tromsø"}]
    assert sorted(docs) == sorted([*TRAVEL, "a new flight to Tromsø"])  # each paid for once

    # Rebuild in another view (a memory store, its own consumer group) from the topic alone.
    asked = len(embedding_server.texts)
    ends: dict[int, int] = {}
    async for r in log.read(ns):
        ends[r.position.partition] = r.position.offset
    rebuilt = VectorProjection(projector.projection.name, view.embed.build(), MemoryVectorStore())
    replay = _Running(rebuilt, kafka_bootstrap, prefix)
    try:

        async def caught_up() -> bool:
            done = {p: await rebuilt.checkpoint(topic, p) for p in ends}
            return done == ends and rebuilt.pending == 0

        await wait_for(caught_up, what="the rebuilt view")
        assert len(embedding_server.texts) == asked and rebuilt.embedded == 0
        assert contents(await search(rebuilt, ns, "flight", 5)) == ["a new flight to Tromsø"]
    finally:
        await replay.close()
        await log.close()
