"""long-term memory over every store (memory, Redis, PostgreSQL), on the embedded log and through Kafka.

The view is namespace-wide: every session of a namespace reads the same messages, in event-time
order, and a clear from any session empties it. The stores are the real services of conftest.
The store-level suite is `tests.contracts.long_term.LongTermContract`, run here on each store.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from helix_es import ConfigError, Message, ToolCall, open_memory
from helix_es.client.memory import ViewMemory
from helix_es.config import load_config
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.projection.factory import open_projection
from helix_es.projection.idempotency import IdempotentProjection
from helix_es.projection.long_term import LongTermRows
from helix_es.projection.protocol import Projection
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.postgres.rows import PostgresRows, SchemaMismatch
from helix_es.views.long_term import DEFAULT_TABLE, SQL_KEYWORDS, LongTerm, check_table, escape_like
from helix_es.views.long_term_rows import tables
from projectors.runner import Projector
from tests.conftest import RUN, copy_always, unique, wait_for
from tests.contracts.long_term import LongTermContract, contents

STORES = ["memory", "redis", "postgres", "postgres-copy"]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The `memory:` keys that pick one store, with its real service."""
    kind = request.param
    if kind == "redis":
        return {"store": "redis", "redis_url": request.getfixturevalue("redis_url")}
    if kind.startswith("postgres"):
        if kind == "postgres-copy":
            copy_always(request.getfixturevalue("monkeypatch"))
        return {"store": "postgres", "dsn": request.getfixturevalue("postgres_dsn")}
    return {"store": "memory"}


def embedded(tmp_path: Path, store: dict[str, Any], namespace: str, **extra: Any) -> dict[str, Any]:
    memory = {"type": "long-term", **store, "namespace": namespace, "read_timeout": 30, **extra}
    return {"log": {"type": "embedded", "path": str(tmp_path / "log")}, "memory": memory}


def projection_of(mem: object) -> Projection:
    assert isinstance(mem, ViewMemory)
    return unwrapped(mem.projection)


def unwrapped(projection: Projection) -> Projection:
    """The long-term store itself, under the layer that marks retried writes."""
    return projection.inner if isinstance(projection, IdempotentProjection) else projection


async def stored_sessions(projection: Projection, namespace: str) -> list[str]:
    """The session id kept beside each message, read from the store itself, in view order."""
    projection = unwrapped(projection)
    assert isinstance(projection, LongTermRows)
    return [r["session_id"] for r in await projection.rows(namespace)]


# --- the store itself: the contract, on each store ---------------------------------------------


class TestMemoryLongTerm(LongTermContract):
    @pytest.fixture
    async def store(self) -> AsyncIterator[Projection]:
        s = LongTermRows.in_process()
        yield s
        await s.close()

    async def stored_sessions(self, store: Projection, namespace: str) -> list[str]:
        return await stored_sessions(store, namespace)

    async def forget_checkpoint(self, store: Projection, topic: str, partition: int) -> None:
        assert isinstance(store, LongTermRows) and isinstance(store.store, MemoryRows)
        store.store._checkpoints.pop((topic, partition))


# --- through open_memory on the embedded log ---------------------------------------------------


async def test_every_session_of_the_namespace_reads_every_message_in_order(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    ns = unique("lt")
    cfg = embedded(tmp_path, store, ns)
    sent = [
        Message("user", "What's the weather in Oslo?", name="ada", metadata={"lang": "en"}),
        Message("assistant", "", tool_calls=(ToolCall("call-1", "weather", '{"city": "Oslo"}'),)),
        Message("tool", '{"temp": -3}', tool_call_id="call-1"),
        Message("assistant", "It is -3 °C in Oslo. ☃"),
    ]
    async with open_memory(cfg, session_id="alice") as alice, open_memory(cfg, session_id="bob") as bob:
        await alice.add(sent[0])
        await bob.add(sent[1])
        await alice.add(sent[2])
        await bob.add(sent[3])
        assert await alice.get() == sent
        assert await bob.get() == sent
        assert await stored_sessions(projection_of(alice), ns) == ["alice", "bob", "alice", "bob"]
    async with open_memory(cfg, session_id="carol") as carol:  # a new client: the view rebuilt or reread
        assert await carol.get() == sent


async def test_namespaces_are_isolated(tmp_path: Path, store: dict[str, Any]) -> None:
    ns_a, ns_b = unique("lt-a"), unique("lt-b")
    async with (
        open_memory(embedded(tmp_path, store, ns_a), session_id="s") as in_a,
        open_memory(embedded(tmp_path, store, ns_b), session_id="s") as in_b,
    ):
        await in_a.add(Message("user", "tenant a"))
        await in_b.add(Message("user", "tenant b"))
        assert contents(await in_a.get()) == ["tenant a"]
        assert contents(await in_b.search("tenant")) == ["tenant b"]
        await in_b.clear()
        assert await in_b.get() == []
        assert contents(await in_a.get()) == ["tenant a"]


async def test_search_is_case_insensitive_substring_oldest_first_with_limit(
    tmp_path: Path, store: dict[str, Any]
) -> None:
    cfg = embedded(tmp_path, store, unique("lt"))
    async with open_memory(cfg, session_id="s1") as s1, open_memory(cfg, session_id="s2") as s2:
        for i, text in enumerate(["The Kafka log", "redis view", "KAFKA again", "postgres", "kafkaesque"]):
            await (s1 if i % 2 else s2).add(Message("user", text))
        assert contents(await s1.search("kafka", limit=10)) == ["The Kafka log", "KAFKA again", "kafkaesque"]
        assert contents(await s2.search("kAfKa", limit=2)) == ["The Kafka log", "KAFKA again"]
        assert contents(await s1.search("", limit=2)) == ["The Kafka log", "redis view"]
        assert await s1.search("nothing like it") == []


async def test_search_matches_like_wildcards_literally(tmp_path: Path, store: dict[str, Any]) -> None:
    cfg = embedded(tmp_path, store, unique("lt"))
    texts = ["100% sure", "100 percent", "snake_case", "snakeXcase", "C:\\temp", "C:temp", "50%_off"]
    async with open_memory(cfg, session_id="s") as mem:
        for text in texts:
            await mem.add(Message("user", text))
        assert contents(await mem.search("%")) == ["100% sure", "50%_off"]
        assert contents(await mem.search("_")) == ["snake_case", "50%_off"]
        assert contents(await mem.search("e_c")) == ["snake_case"]
        assert contents(await mem.search("0%")) == ["100% sure", "50%_off"]
        assert contents(await mem.search("%_")) == ["50%_off"]
        assert contents(await mem.search("\\")) == ["C:\\temp"]
        assert contents(await mem.search(":\\T")) == ["C:\\temp"]


def test_escape_like() -> None:
    assert escape_like("a%b_c\\d") == "%a\\%b\\_c\\\\d%"
    assert escape_like("") == "%%"


# PostgreSQL's ILIKE folds case by the database's collation, not Python's casefold (no ß -> ss).
@pytest.mark.parametrize("store", ["memory", "redis"], indirect=True)
async def test_search_casefolds_unicode_in_memory_and_redis(tmp_path: Path, store: dict[str, Any]) -> None:
    cfg = embedded(tmp_path, store, unique("lt"))
    async with open_memory(cfg, session_id="s") as mem:
        for text in ["Straße", "ÉCOLE", "école", "plain ascii", "Kelvin 5 \u212a"]:
            await mem.add(Message("user", text))
        assert contents(await mem.search("STRASSE")) == ["Straße"]
        assert contents(await mem.search("École")) == ["ÉCOLE", "école"]
        assert contents(await mem.search("5 k")) == ["Kelvin 5 \u212a"]  # KELVIN SIGN casefolds to k
        assert contents(await mem.search("ASCII")) == ["plain ascii"]


async def test_a_clear_from_any_session_clears_the_namespace(tmp_path: Path, store: dict[str, Any]) -> None:
    ns = unique("lt")
    cfg = embedded(tmp_path, store, ns)
    async with open_memory(cfg, session_id="alice") as alice, open_memory(cfg, session_id="bob") as bob:
        await alice.add(Message("user", "alice one"))
        await bob.add(Message("user", "bob one"))
        await bob.clear()
        assert await bob.get() == []
        assert await alice.get() == []
        assert await alice.search("one") == []
        await alice.add(Message("user", "alice two"))
        assert contents(await bob.get()) == ["alice two"]
    async with open_memory(cfg, session_id="carol") as carol:  # rebuilt from the log: the same view
        assert contents(await carol.get()) == ["alice two"]


async def test_store_file_keeps_the_namespace_across_restarts(tmp_path: Path) -> None:
    ns = unique("lt")
    path = tmp_path / "agent.json"
    cfg = {"memory": {"type": "long-term", "store": "file", "file_path": str(path), "namespace": ns}}
    async with open_memory(cfg, session_id="s1") as s1, open_memory(cfg, session_id="s2") as s2:
        await s1.add(Message("user", "kept on disk"))
        await s2.add(Message("assistant", "noted"))
        assert contents(await s1.get()) == ["kept on disk", "noted"]
    assert path.exists()
    async with open_memory(cfg, session_id="s3") as s3:  # a new process would rebuild it the same way
        assert contents(await s3.search("DISK")) == ["kept on disk"]


# --- configuration -------------------------------------------------------------------------------


def test_view_names_and_types() -> None:
    cfg = load_config({"memory": {"type": "long-term"}}).memory
    assert cfg.view == LongTerm(store="memory") and cfg.view.name == "long-term" and cfg.store == "memory"
    cfg = load_config({"memory": {"type": "long-term", "store": "redis", "redis_url": "redis://h:1/0"}}).memory
    assert cfg.view.name == "long-term" and cfg.store == "redis"
    pg = {"dsn": "postgresql://u:secret@h/db"}
    cfg = load_config({"memory": {"type": "sql-long-term", **pg}}).memory
    assert cfg.store == "postgres" and cfg.view.name == "long-term"
    assert "secret" not in repr(cfg.view)
    cfg = load_config({"memory": {"type": "sql-long-term", "table": "Agent_Memory_2", **pg}}).memory
    assert isinstance(cfg.view, LongTerm) and cfg.view.table == "agent_memory_2"
    assert cfg.view.name == "long-term-agent_memory_2"
    cfg = load_config({"memory": {"type": "long-term", "store": "postgres", "table": DEFAULT_TABLE, **pg}}).memory
    assert cfg.view.name == "long-term"
    # sql-long-term runs under Kafka: its store is postgres even when `store:` is left out.
    cfg = load_config({"log": {"type": "kafka"}, "memory": {"type": "sql-long-term", **pg}}).memory
    assert cfg.store == "postgres"
    assert check_table("x" * 63) == "x" * 63
    assert check_table("2024_memory") == "2024_memory"  # always quoted in SQL, so a digit may lead


BAD_NAMES = ["bad-name", "a b", "x;DROP TABLE agent_memory", "", "café", "t" * 64, "agent.memory", 5, None]
KEYWORD_NAMES = ["select", "SELECT", "Table", "user", "offset", "name", "partition", "json_table", "analyse"]


@pytest.mark.parametrize("table", BAD_NAMES + KEYWORD_NAMES, ids=repr)
def test_a_bad_table_name_is_refused_naming_the_key(table: object, postgres_dsn: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "sql-long-term", "dsn": postgres_dsn, "table": table}})
    assert err.value.field == "memory.table"
    assert isinstance(err.value, ValueError)
    if isinstance(table, str) and table.lower() in SQL_KEYWORDS:
        assert "keyword" in str(err.value)
    doc = {"agents": [{"id": "chat", "memory": {"type": "long-term", "store": "postgres", "table": table}}]}
    with pytest.raises(ConfigError) as err:
        load_config(doc)
    assert err.value.field == "agents[0].memory.table"


async def test_no_sql_runs_for_a_bad_table_name(postgres_dsn: str, tmp_path: Path) -> None:
    names_tried = [*KEYWORD_NAMES, "x;DROP TABLE agent_memory", "t" * 64]
    for table in names_tried:
        cfg = embedded(tmp_path, {"store": "postgres", "dsn": postgres_dsn}, unique("lt"), table=table)
        with pytest.raises(ConfigError, match=r"memory\.table"):
            async with open_memory(cfg, session_id="s"):
                pytest.fail("opened")
        # Refused before any connection: an unreachable server makes no difference.
        cfg["memory"]["dsn"] = "postgresql://nobody@127.0.0.1:1/none"
        with pytest.raises(ConfigError, match=r"memory\.table"):
            async with open_memory(cfg, session_id="s"):
                pytest.fail("opened")
    conn = await asyncpg.connect(postgres_dsn)
    try:
        for table in names_tried:
            assert await conn.fetchval("SELECT to_regclass($1)", f'"{table.lower()[:63]}"') is None, table
    finally:
        await conn.close()
    with pytest.raises(ConfigError, match="SQL keyword"):
        tables("select")  # direct use is checked too


def test_other_config_errors_name_their_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HELIX_POSTGRES_DSN", raising=False)
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "sql-long-term"}})
    assert err.value.field == "memory.dsn"
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "sql-long-term", "store": "redis", "dsn": "postgresql://h/db"}})
    assert err.value.field == "memory.store"
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "long-term", "store": "redis", "redis_url": "redis://h/0", "table": "t"}})
    assert err.value.field == "memory.table"
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "long-term", "window_size": 3}})
    assert err.value.field == "memory.window_size"
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"type": "long-term", "store": "cassandra"}})
    assert err.value.field == "memory.store"
    monkeypatch.setenv("HELIX_POSTGRES_DSN", "postgresql://env/db")
    cfg = load_config({"memory": {"type": "sql-long-term"}}).memory
    assert cfg.postgres_dsn == "postgresql://env/db"
    opened = unwrapped(open_projection(cfg))
    assert isinstance(opened, LongTermRows) and isinstance(opened.store, PostgresRows)
    assert opened.store.dsn == "postgresql://env/db"


# --- PostgreSQL schema ---------------------------------------------------------------------------


def rows_of(dsn: str, table: str) -> LongTermRows:
    """The long-term view of `table` as the config opens it: rows in PostgreSQL."""
    return LongTermRows(PostgresRows(dsn, f"long-term-{table}", tables(table)), table)


async def _drop(dsn: str, table: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(f'DROP TABLE IF EXISTS "{table}", "{table}_retracted"')
        view = f"long-term-{table}"
        await conn.execute("DELETE FROM helix_checkpoints WHERE view = $1", view)
        await conn.execute("DELETE FROM helix_row_marks WHERE view = $1", view)
    finally:
        await conn.close()


async def test_a_fresh_custom_table_is_made_on_first_use(postgres_dsn: str, tmp_path: Path) -> None:
    table = f"lt_{RUN}_{uuid.uuid4().hex[:8]}"
    projections = [rows_of(postgres_dsn, table) for _ in range(3)]
    try:
        await asyncio.gather(*(p.rows("ns") for p in projections))  # racing creators: one lock
        await projections[0].rows("ns")  # and again: IF NOT EXISTS
        conn = await asyncpg.connect(postgres_dsn)
        try:
            columns = await conn.fetch(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = $1 "
                "ORDER BY ordinal_position",
                table,
            )
            assert [(c["column_name"], c["data_type"]) for c in columns] == [
                ("namespace", "text"),
                ("created_at", "timestamp with time zone"),
                ("topic", "text"),
                ("partition", "bigint"),
                ("offset", "bigint"),
                ("session_id", "text"),
                ("role", "text"),
                ("content", "text"),
                ("message", "jsonb"),
            ]
        finally:
            await conn.close()
        ns = unique("lt")
        cfg = embedded(tmp_path, {"store": "postgres", "dsn": postgres_dsn}, ns, table=table.upper())
        async with open_memory(cfg, session_id="s1") as s1, open_memory(cfg, session_id="s2") as s2:
            await s1.add(Message("user", "in a custom table"))
            await s2.add(Message("assistant", "noted"))
            assert contents(await s1.get()) == ["in a custom table", "noted"]
            mine = projection_of(s1)
            assert isinstance(mine, LongTermRows) and mine.table == table
            assert mine.name == f"long-term-{table}"
            assert await stored_sessions(mine, ns) == ["s1", "s2"]
            assert await mine.checkpoint(names.topic(ns), 0) == 1
    finally:
        for p in projections:
            await p.close()
        await _drop(postgres_dsn, table)


async def test_a_table_of_another_shape_is_refused_and_left_as_it_is(postgres_dsn: str) -> None:
    table = f"lt_{RUN}_{uuid.uuid4().hex[:8]}"
    conn = await asyncpg.connect(postgres_dsn)
    await conn.execute(f'CREATE TABLE "{table}" (id bigserial PRIMARY KEY, agent_id text, content text)')
    projection = rows_of(postgres_dsn, table)
    try:
        for use in (projection.rows("ns"), projection.drop(["ns"], ["t"])):
            with pytest.raises(SchemaMismatch, match="missing: namespace, created_at"):
                await use
        assert [r[0] for r in await conn.fetch(
            "SELECT column_name FROM information_schema.columns WHERE table_name = $1 ORDER BY ordinal_position", table
        )] == ["id", "agent_id", "content"]  # fmt: skip
        assert await conn.fetchval("SELECT to_regclass($1)", f'"{table}_retracted"') is None
    finally:
        await conn.close()
        await projection.close()
        await _drop(postgres_dsn, table)


# --- through Kafka, with a real projector -----------------------------------------------------------


def _session_in_another_partition(taken: int) -> str:
    """A session id the producer's default key hash puts in a partition other than `taken` (of 3)."""
    from aiokafka.partitioner import DefaultPartitioner

    partitioner = DefaultPartitioner()
    for i in range(100):
        sid = f"s{i}-{uuid.uuid4().hex[:6]}"
        if partitioner(sid.encode(), [0, 1, 2], [0, 1, 2]) != taken:
            return sid
    raise AssertionError("no session id hashed to another partition")


@pytest.mark.parametrize("kind", ["redis", "postgres"])
async def test_through_kafka_with_a_real_projector(kind: str, request: pytest.FixtureRequest) -> None:
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    topic_prefix = f"helix.lt-{RUN}-{uuid.uuid4().hex[:6]}"  # a consumer group of our own; RUN: deleted after
    ns = unique("lt")
    if kind == "redis":
        memory = {"type": "long-term", "store": "redis", "redis_url": request.getfixturevalue("redis_url")}
    else:
        memory = {"type": "sql-long-term", "dsn": request.getfixturevalue("postgres_dsn")}
    log = {"type": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": topic_prefix, "partitions": 3}
    cfg = {"log": log, "memory": {**memory, "namespace": ns, "read_timeout": 30}}
    config = load_config(cfg)
    view = config.memory.view
    assert isinstance(view, LongTerm)

    kafka = KafkaLog(bootstrap, topic_prefix=topic_prefix, partitions=3)
    await kafka.ensure_topic(ns)  # before the projector subscribes: no rebalance mid-test
    await kafka.close()

    async def run_projector() -> tuple[asyncio.Event, asyncio.Task[Any], Projection]:
        projection = open_projection(config.memory)
        stop = asyncio.Event()
        projector = Projector(projection, bootstrap_servers=bootstrap, topic_prefix=topic_prefix)
        return stop, asyncio.create_task(projector.run(stop)), projection

    stop, task, projection = await run_projector()
    try:
        async with open_memory(cfg, session_id="alice") as alice:
            first = await alice.add(Message("user", "alpha from alice"))
            other = _session_in_another_partition(first.partition)
            async with open_memory(cfg, session_id=other) as bob:
                second = await bob.add(Message("assistant", "beta from bob"))
                assert second.partition != first.partition
                # Read-your-writes covers the reader's own partition; the other arrives soon after.
                assert "beta from bob" in contents(await bob.get())

                async def both_seen() -> bool:
                    return contents(await alice.get()) == ["alpha from alice", "beta from bob"]

                await wait_for(both_seen, what="both partitions projected")
                assert contents(await bob.search("FROM", limit=1)) == ["alpha from alice"]
                await bob.clear()
                assert await bob.get() == []

                async def alice_sees_the_clear() -> bool:
                    return await alice.get() == []

                await wait_for(alice_sees_the_clear, what="the clear from another partition")
                await alice.add(Message("user", "gamma after the clear"))
                assert contents(await alice.get()) == ["gamma after the clear"]
                assert contents(await alice.search("CLEAR")) == ["gamma after the clear"]
                assert await stored_sessions(projection, ns) == ["alice"]
        stop.set()
        progress = await task
        assert progress.events >= 4
        # Written while no projector runs; a new one resumes from the checkpoints, applying only that.
        async with open_memory(cfg, session_id="alice") as alice:
            await alice.add(Message("user", "delta while stopped"))
            await projection.close()
            stop, task, projection = await run_projector()
            assert contents(await alice.get()) == ["gamma after the clear", "delta while stopped"]
        stop.set()
        progress = await task
        assert progress.events == 1 and progress.skipped == 0
    finally:
        stop.set()
        await asyncio.gather(task, return_exceptions=True)
        await projection.close()
