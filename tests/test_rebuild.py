"""`helix-es rebuild`: a view built from the log into a new target while the old one serves, then switched.

Real Redis, PostgreSQL and Kafka (tests/conftest.py); every test has its own namespace and topic
prefix, so its aliases (`helix:alias:<view>:<prefix>`), topics and consumer groups are its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest
import redis.asyncio as aioredis

from helix_es import Message, open_memory
from helix_es.config import load_config
from helix_es.model.names import alias_id, next_target, version_of
from helix_es.projection import aliases as aliases_module
from helix_es.projection.aliases import TargetStore
from helix_es.stores.ports import SessionKey
from helix_es.stores.redis.views import RedisStore
from helix_es.views.base import View
from helix_es.views.long_term import target_table
from projectors.rebuild import PARALLEL_MIN_EVENTS, Display, Status, drop, rebuild
from tests.conftest import cli, unique, wait_for
from tests.model_server import ModelServer

ROOT = Path(__file__).resolve().parent.parent


# --- helpers ---


def embedded(tmp_path: Path, prefix: str, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": prefix, "fsync": False},
        "memory": {"read_timeout": 20, **memory},
    }


def write_config(tmp_path: Path, cfg: dict[str, Any], name: str = "helix.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


async def follows(mem: Any, target: str, timeout: float = 10) -> None:
    """An open memory moves to `target` within about a second (a read makes it look)."""

    async def moved() -> bool:
        await mem.get()
        return bool(mem.projection.name == target)

    await wait_for(moved, timeout, f"readers to move to {target}")


async def redis_keys(redis_url: str, pattern: str) -> list[str]:
    client = aioredis.Redis.from_url(redis_url)
    try:
        return sorted([k.decode() async for k in client.scan_iter(match=pattern, count=1000)])
    finally:
        await client.aclose()


async def snapshots(redis_url: str, view: View, target: str, keys: list[SessionKey]) -> dict[SessionKey, Any]:
    store = RedisStore(redis_url)
    try:
        where = store if target == view.name else TargetStore(store, target)
        return await where.load(view, keys)
    finally:
        await store.close()


@pytest.fixture
def fast_aliases(monkeypatch: pytest.MonkeyPatch) -> None:
    """Readers look at the alias every 0.2s instead of every second: the tests wait less."""
    monkeypatch.setattr(aliases_module, "REFRESH_SECONDS", 0.2)


# --- names ---


def test_targets_are_versioned_and_long_term_tables_follow_them() -> None:
    assert version_of("token-window-4000", "token-window-4000") == 1
    assert version_of("token-window-4000", "token-window-4000@v7") == 7
    assert version_of("token-window-4000", "other@v9") == 0
    assert next_target("token-window-4000", ["token-window-4000"]) == "token-window-4000@v2"
    assert next_target("w", ["w@v2", "w@v5", "x@v9", "w-copy"]) == "w@v6"
    assert alias_id("w") == "w" and alias_id("w", "acme") == "w:acme"
    assert target_table("agent_memory", "long-term", "long-term") == "agent_memory"
    assert target_table("agent_memory", "long-term", "long-term@v2") == "agent_memory_v2"
    assert target_table("notes", "long-term-notes", "Fresh.Copy") == "notes_fresh_copy"
    long = target_table("agent_memory", "long-term", "long-term@" + "x" * 80)
    assert len(long) <= 63 and long.startswith("agent_memory_x")


def test_progress_is_a_bar_on_a_terminal_and_lines_elsewhere() -> None:
    import io

    status = Status(
        "token-window-4000",
        "token-window-4000@v2",
        "building",
        read=50_000,
        events=49_990,
        skipped=10,
        lag=50_000,
        started=time.monotonic() - 1.0,
    )
    bar = Display.bar(status)
    assert bar.startswith("token-window-4000@v2 [############............]  50% building")
    assert "50,000 events" in bar and "lag 50,000" in bar and "/s" in bar and "eta" in bar
    out = io.StringIO()
    display = Display(out, tty=False, interval=0)
    display(status)
    assert re.fullmatch(
        r"rebuild token-window-4000 -> token-window-4000@v2: building, 50000 read, 49990 "
        r"folded, 10 skipped, \d+ events/s, lag 50000\n",
        out.getvalue(),
    )
    tty = io.StringIO()
    Display(tty, tty=True)(status)
    assert tty.getvalue().startswith("\rtoken-window-4000@v2 [")


# --- embedded log ---


async def test_embedded_rebuild_switches_open_memories_and_keeps_the_old_target(
    tmp_path: Path, redis_url: str, fast_aliases: None
) -> None:
    ns, prefix = unique("rb"), unique("rb")
    cfg = embedded(
        tmp_path,
        prefix,
        type="sliding-window",
        window_size=3,
        tool_pairs="split",
        store="redis",
        redis_url=redis_url,
        namespace=ns,
    )
    path = write_config(tmp_path, cfg)
    async with open_memory(cfg, session_id="s1") as s1, open_memory(cfg, session_id="s2") as s2:
        for i in range(7):
            await s1.add(Message("user", f"one-{i}"))
            await s2.add(Message("assistant", f"two-{i}"))
        await s2.clear()
        await s2.add(Message("user", "two-after-clear"))
        before = {"s1": await s1.get(), "s2": await s2.get()}
        # The rebuild runs in its own process and reads the log this process keeps appending to.
        code, out, err = await cli("rebuild", "--config", str(path), "--json", "--progress", "0.1")
        assert code == 0, err
        report = json.loads(out)
        assert report["target"] == "sliding-window-3@v2" and report["old_target"] == "sliding-window-3"
        assert report["switched"] and report["read"] == 16 and report["events"] == 16
        assert "rebuild sliding-window-3 -> sliding-window-3@v2: building" in err
        assert "readers switched from sliding-window-3" in err
        for mem in (s1, s2):
            await follows(mem, "sliding-window-3@v2")
        assert {"s1": await s1.get(), "s2": await s2.get()} == before
        await s1.add(Message("user", "one-after-switch"))  # folded inline into the new target
        assert contents(await s1.get()) == ["one-5", "one-6", "one-after-switch"]
    # Without --drop-old the old target is still there, as it was.
    assert await redis_keys(redis_url, f"helix:memory:{ns}:{{s1}}:sliding-window-3") != []
    async with open_memory(cfg, session_id="s1") as again:  # a new process resolves the alias when it opens
        assert again.projection.name == "sliding-window-3@v2"
        assert contents(await again.get()) == ["one-5", "one-6", "one-after-switch"]


async def test_a_new_token_window_size_is_built_from_the_log(tmp_path: Path, redis_url: str) -> None:
    ns, prefix = unique("tw"), unique("tw")
    old = embedded(
        tmp_path,
        prefix,
        type="token-window",
        max_tokens=4000,
        tool_pairs="split",
        store="redis",
        redis_url=redis_url,
        namespace=ns,
    )
    text = "a sentence of about a dozen tokens for the window to count. " * 4
    async with open_memory(old, session_id="s") as mem:
        for i in range(40):
            await mem.add(Message("user", f"{i}: {text}"))
        assert len(await mem.get()) == 40  # all of it fits in 4000 tokens
    new = embedded(
        tmp_path,
        prefix,
        type="token-window",
        max_tokens=300,
        tool_pairs="split",
        store="redis",
        redis_url=redis_url,
        namespace=ns,
    )
    report = await rebuild(new, switch=False)
    assert report.target == "token-window-300-est3@v2" and report.read == 40 and not report.switched
    # What a fresh in-process fold of the same log gives, and readers of the new size once switched:
    reference = {**new, "memory": {**new["memory"], "store": "memory"}}
    async with open_memory(reference, session_id="s") as ref:
        expected = await ref.get()
    assert 1 < len(expected) < 40
    assert (await rebuild(new, into="token-window-300-est3@v2")).switched  # resumes the target built above
    async with open_memory(new, session_id="s") as mem:
        assert mem.projection.name == "token-window-300-est3@v2"
        assert await mem.get() == expected


async def test_flushed_redis_data_is_rebuilt_into_a_fresh_target(
    tmp_path: Path, redis_url: str, fast_aliases: None
) -> None:
    ns, prefix = unique("flush"), unique("flush")
    cfg = embedded(tmp_path, prefix, type="conversation", store="redis", redis_url=redis_url, namespace=ns)
    sessions = ["a", "b", "c"]
    async with open_memory(cfg, session_id="a") as mem:
        mems = [mem] + [mem.__class__(mem.backend, mem.source, ns, s) for s in sessions[1:]]
        for i in range(5):
            for m, s in zip(mems, sessions, strict=True):
                await m.add(Message("user", f"{s}{i}"))
        before = [await m.get() for m in mems]
        # Data loss: the view's keys and its checkpoint are gone from Redis (FLUSHDB, a failover, ...).
        client = aioredis.Redis.from_url(redis_url)
        for key in await redis_keys(redis_url, f"helix:memory:{ns}:*"):
            await client.delete(key)
        await client.hdel("helix:checkpoint:conversation", f"{prefix}.{ns}:0")
        await client.aclose()
        assert [await m.get() for m in mems] == [[], [], []]
        report = await rebuild(cfg)
        assert report.target == "conversation@v2" and report.read == 15
        await follows(mem, "conversation@v2")
        assert [await m.get() for m in mems] == before


async def test_drop_old_removes_old_data_only_when_asked(tmp_path: Path, redis_url: str) -> None:
    ns, prefix = unique("drop"), unique("drop")
    cfg = embedded(
        tmp_path,
        prefix,
        type="sliding-window",
        window_size=2,
        tool_pairs="split",
        store="redis",
        redis_url=redis_url,
        namespace=ns,
    )
    path = write_config(tmp_path, cfg)
    async with open_memory(cfg, session_id="s") as mem:
        for i in range(4):
            await mem.add(Message("user", f"m{i}"))
    data = f"helix:memory:{ns}:{{s}}:"

    async def targets_present() -> set[str]:
        keys = await redis_keys(redis_url, f"{data}*")
        return {k[len(data) :] for k in keys if not k.endswith(":applied")}

    assert await targets_present() == {"sliding-window-2"}
    code, _, err = await cli("rebuild", "--config", str(path))
    assert code == 0, err
    assert await targets_present() == {"sliding-window-2", "sliding-window-2@v2"}  # the old one stays
    code, out, err = await cli("rebuild", "--config", str(path), "--drop-old", "--json")
    assert code == 0, err
    assert json.loads(out)["dropped"] == ["sliding-window-2@v2"]
    assert await targets_present() == {"sliding-window-2", "sliding-window-2@v3"}
    assert await redis_keys(redis_url, f"{data}sliding-window-2@v2*") == []  # data and guard
    client = aioredis.Redis.from_url(redis_url)
    assert not await client.hexists("helix:checkpoint:sliding-window-2@v2", f"{prefix}.{ns}:0")
    assert await client.hexists("helix:checkpoint:sliding-window-2", f"{prefix}.{ns}:0")
    # Readers use @v3: it is never dropped; an unknown name is refused; the first target can go.
    code, _, err = await cli("rebuild", "--config", str(path), "--drop", "sliding-window-2@v3")
    assert code == 1 and "readers of sliding-window-2 use" in err
    code, _, err = await cli("rebuild", "--config", str(path), "--drop", "nothing-like-it")
    assert code == 1 and "not a target" in err
    dropped = await drop(cfg, "sliding-window-2")
    assert dropped.dropped == "sliding-window-2" and dropped.namespaces == 1
    assert await targets_present() == {"sliding-window-2@v3"}
    assert not await client.hexists("helix:checkpoint:sliding-window-2", f"{prefix}.{ns}:0")
    await client.aclose()
    async with open_memory(cfg, session_id="s") as mem:
        assert contents(await mem.get()) == ["m2", "m3"]
    code, _, err = await cli("rebuild", "--config", str(path), "--drop-old", "--no-switch")
    assert code == 2 and "--drop-old" in err


async def test_long_term_history_in_redis_is_rebuilt_into_postgres(
    tmp_path: Path, redis_url: str, postgres_dsn: str
) -> None:
    ns, prefix = unique("lt"), unique("lt")
    in_redis = embedded(tmp_path, prefix, type="long-term", store="redis", redis_url=redis_url, namespace=ns)
    async with open_memory(in_redis, session_id="alice") as alice, open_memory(in_redis, session_id="bob") as bob:
        await alice.add(Message("user", "forgotten by the clear"))
        await bob.clear()
        for i in range(6):
            await (alice if i % 2 else bob).add(Message("user", f"kept {i}"))
        history = await alice.get()
    assert contents(history) == [f"kept {i}" for i in range(6)]
    # The config given to rebuild names the new store: the history only ever went to Redis.
    in_postgres = {**in_redis, "memory": {**in_redis["memory"], "store": "postgres", "dsn": postgres_dsn}}
    path = write_config(tmp_path, in_postgres, "postgres.yaml")
    code, out, err = await cli("rebuild", "--config", str(path), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["store"] == "postgres" and report["target"] == "long-term@v2" and report["switched"]
    async with open_memory(in_postgres, session_id="carol") as carol:
        assert carol.projection.name == "long-term@v2"
        assert await carol.get() == history
        assert contents(await carol.search("KEPT 3", 5)) == ["kept 3"]
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert (
            await conn.fetchval("SELECT target FROM helix_aliases WHERE view = $1", alias_id("long-term", prefix))
            == "long-term@v2"
        )
        assert await conn.fetchval("SELECT count(*) FROM agent_memory_v2 WHERE namespace = $1", ns) == 6
    finally:
        await conn.close()
    code, _, err = await cli("rebuild", "--config", str(path), "--drop", "long-term@v2")
    assert code == 1 and "use" in err  # readers use it


async def test_a_summary_rebuild_replays_recorded_summaries_and_calls_no_model(
    tmp_path: Path, redis_url: str, model_server: ModelServer, fast_aliases: None
) -> None:
    ns, prefix = unique("sum"), unique("sum")
    cfg = embedded(
        tmp_path,
        prefix,
        type="summary",
        tool_pairs="split",  # asserts the seed-cut view by its name
        max_messages=4,
        store="redis",
        redis_url=redis_url,
        namespace=ns,
        summariser={"provider": "openai", "model": "m", "base_url": model_server.base_url},
    )
    async with open_memory(cfg, session_id="s") as mem:
        for i in range(9):
            await mem.add(Message("user" if i % 2 else "assistant", f"fact {i}: the sky is blue, number {i}"))
        before = await mem.get()
        calls = model_server.count("/chat/completions")
        assert calls == 3 and before[0].metadata.get("helix.summary") == "true"
        report = await rebuild(cfg)
        assert report.read == 12  # 9 messages and the 3 summaries recorded on the log
        await follows(mem, "summary-4@v2")
        assert await mem.get() == before
    assert model_server.count("/chat/completions") == calls  # not one call more


async def test_a_vector_rebuild_reuses_recorded_embeddings_and_calls_no_model(
    tmp_path: Path, postgres_dsn: str, model_server: ModelServer
) -> None:
    ns, prefix, model = unique("vec"), unique("vec"), unique("m")
    embed = {"provider": "openai", "model": model, "dims": 8, "base_url": model_server.base_url}
    cfg = embedded(tmp_path, prefix, type="vector", store="postgres", dsn=postgres_dsn, namespace=ns, embed=embed)
    texts = ["the flight to Oslo", "a hotel in Bergen", "green tea or coffee", "the finance meeting"]
    async with open_memory(cfg, session_id="s") as mem:
        for text in texts:
            await mem.add(Message("user", text))
        assert len(await mem.search("tea", 2)) == 2
        name = mem.projection.name
    calls = model_server.count("/embeddings")
    assert calls == len(texts) + 1  # each text once, then the query
    conn = await asyncpg.connect(postgres_dsn)
    try:
        # Only the log may bring the vectors back: the content-hash cache goes too.
        await conn.execute("DELETE FROM helix_embeddings WHERE model = $1", f"openai/{model}")
        report = await rebuild(cfg, switch=False)
        assert model_server.count("/embeddings") == calls
        count = "SELECT count(*) FROM helix_vectors WHERE view = $1 AND namespace = $2"
        assert await conn.fetchval(count, report.target, ns) == await conn.fetchval(count, name, ns) == len(texts)
        same = """SELECT count(*) FROM helix_vectors a
                  JOIN helix_vectors b USING (namespace, topic, partition, "offset")
                  WHERE a.view = $1 AND b.view = $2 AND a.namespace = $3 AND a.vec = b.vec"""
        assert await conn.fetchval(same, name, report.target, ns) == len(texts)
    finally:
        await conn.close()


async def test_a_memory_store_is_rebuilt_in_its_own_process(tmp_path: Path) -> None:
    ns, prefix = unique("mem"), unique("mem")
    cfg = embedded(
        tmp_path, prefix, type="sliding-window", window_size=2, tool_pairs="split", store="memory", namespace=ns
    )
    async with open_memory(cfg, session_id="s") as mem:
        for i in range(5):
            await mem.add(Message("user", f"m{i}"))
        report = await rebuild(cfg, drop_old=True)  # in this process: the memories' own backend
        assert report.switched and report.target == "sliding-window-2@v2" and report.read == 5
        assert report.dropped == ["sliding-window-2"]
        assert contents(await mem.get()) == ["m3", "m4"] and mem.projection.name == "sliding-window-2@v2"
        await mem.add(Message("user", "m5"))
        assert contents(await mem.get()) == ["m4", "m5"]
        store = mem.source.shared_store
        assert not any(view == "sliding-window-2" for view, _ in store._sessions)
    code, _, err = await cli("rebuild", "--config", str(write_config(tmp_path, cfg)))
    assert code == 2 and "lives in the process that serves it" in err


# --- Kafka ---


def start_projector(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path), "--progress", "0.5"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )


def stop_projector(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


async def test_kafka_rebuild_while_a_projector_serves_then_readers_switch(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, fast_aliases: None
) -> None:
    ns, prefix = unique("krb"), unique("krb")
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 3, "topic_prefix": prefix},
        "memory": {
            "type": "sliding-window",
            "tool_pairs": "split",
            "window_size": 5,
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
            "read_timeout": 30,
        },
    }
    path = write_config(tmp_path, cfg)
    sessions = [f"s{i}" for i in range(6)]
    keys = [SessionKey(ns, s) for s in sessions]
    view = load_config(cfg).memory.view
    assert isinstance(view, View)
    proc = start_projector(path)
    try:
        async with open_memory(cfg, session_id="live") as live:
            mems = [live.__class__(live.backend, live.source, ns, s) for s in sessions]
            for i in range(20):
                for m in mems:
                    await m.add(Message("user", f"{m.session_id}-{i}"))
            expected = {m.session_id: [f"{m.session_id}-{i}" for i in range(15, 20)] for m in mems}
            for m in mems:  # read-your-writes through the projector serving the old target
                assert contents(await m.get()) == expected[m.session_id]
            served = {"reads": 0, "writes": 0}
            stop = asyncio.Event()

            async def serve() -> None:
                """Readers and a writer carry on, all through the rebuild and the switch."""
                n = 0
                while not stop.is_set():
                    for m in mems:
                        assert contents(await m.get()) == expected[m.session_id]
                        served["reads"] += 1
                    await live.add(Message("user", f"live-{n}"))
                    assert contents(await live.get())[-1] == f"live-{n}"  # its own write, old or new target
                    n += 1
                    served["writes"] = n
                    await asyncio.sleep(0.02)

            serving = asyncio.create_task(serve())
            await wait_for(lambda: _after(served, 3), 30, "readers and the writer at work")
            reads_before = served["reads"]
            code, out, err = await cli("rebuild", "--config", str(path), "--json", "--progress", "0.2")
            assert code == 0, err
            assert served["reads"] > reads_before and not serving.done()  # served all through the rebuild
            report = json.loads(out)
            assert report["target"] == "sliding-window-5@v2" and report["switched"]
            assert report["handed_over"] is True  # the projector service announced the new target
            await follows(live, "sliding-window-5@v2")
            writes_at_switch = served["writes"]
            await wait_for(lambda: _after(served, writes_at_switch + 10), 30, "writes after the switch")
            stop.set()
            await serving
            for m in mems:
                assert m.projection.name == "sliding-window-5@v2"
                assert contents(await m.get()) == expected[m.session_id]
            n = served["writes"]
            assert contents(await live.get()) == [f"live-{i}" for i in range(n - 5, n)]
        # The rebuilt view equals the one the projector built, session by session, guards included.
        old = await snapshots(redis_url, view, "sliding-window-5", keys)
        new = await snapshots(redis_url, view, "sliding-window-5@v2", keys)
        assert new == old and all(len(s.state) == 5 for s in new.values())
        err = stop_projector(proc)
        assert "the alias moved from sliding-window-5 to sliding-window-5@v2" in err
    finally:
        if proc.poll() is None:
            proc.kill()


async def _after(served: dict[str, int], writes: int) -> bool:
    return served["writes"] >= writes


@pytest.mark.parametrize(("log", "partitions"), [("kafka", 4), ("kafka", 1), ("embedded", 1)])
async def test_worker_processes_share_the_work_and_build_the_same_view(
    tmp_path: Path,
    kafka_bootstrap: str,
    redis_url: str,
    monkeypatch: pytest.MonkeyPatch,
    log: str,
    partitions: int,
) -> None:
    """Whole partitions per worker, or with fewer partitions than workers, slices of their sessions."""
    from projectors.rebuild import workers as rebuild_workers

    monkeypatch.setattr(rebuild_workers, "PARALLEL_MIN_EVENTS", 1)
    assert PARALLEL_MIN_EVENTS > 1  # the default keeps small rebuilds in one process
    ns, prefix = unique("wrk"), unique("wrk")
    memory = {
        "type": "conversation",
        "store": "redis",
        "redis_url": redis_url,
        "namespace": ns,
        "consistency": "eventual",
    }
    if log == "kafka":
        cfg: dict[str, Any] = {
            "log": {
                "type": "kafka",
                "bootstrap_servers": kafka_bootstrap,
                "partitions": partitions,
                "topic_prefix": prefix,
            },
            "memory": memory,
        }
    else:
        cfg = {**embedded(tmp_path, prefix, **memory)}
    path = write_config(tmp_path, cfg)
    sessions = [f"s{i}" for i in range(12)]
    async with open_memory(cfg, session_id=sessions[0]) as first:
        mems = [first.__class__(first.backend, first.source, ns, s, consistency="eventual") for s in sessions]
        for i in range(25):
            for m in mems:
                await m.add(Message("user", f"{m.session_id}-{i}"))
    parallel = await rebuild(path, into="conversation@par", switch=False, workers=2, batch_size=7)
    single = await rebuild(path, into="conversation@one", switch=False, workers=1, batch_size=7)
    assert parallel.workers == 2 and single.workers == 0
    assert single.read == single.events == 300 and parallel.events >= 300
    view = load_config(cfg).memory.view
    assert isinstance(view, View)
    keys = [SessionKey(ns, s) for s in sessions]
    got = await snapshots(redis_url, view, "conversation@par", keys)
    assert got == await snapshots(redis_url, view, "conversation@one", keys)
    assert [m.content for m in got[keys[3]].state] == [f"s3-{i}" for i in range(25)]
    # Slices kept their progress apart; once joined, only the partitions' own checkpoints are left.
    client = aioredis.Redis.from_url(redis_url)
    try:
        fields = {f.decode() for f in await client.hkeys("helix:checkpoint:conversation@par")}
        assert fields == {f.decode() for f in await client.hkeys("helix:checkpoint:conversation@one")}
        assert fields and all(int(f.rpartition(":")[2]) >= 0 for f in fields)
    finally:
        await client.aclose()


async def test_a_long_term_target_is_loaded_without_its_index_and_searched_through_it(
    tmp_path: Path, postgres_dsn: str
) -> None:
    """A target dropped earlier left its table and trigram index: a rebuild into that name again loads
    without it (kept up row by row it cost the load 10x) and builds it before the target is reported
    built; the target's search then looks it up."""
    from helix_es.log.embedded import EmbeddedLog
    from helix_es.model.events import Event, MessageAdded
    from helix_es.projection.long_term import LongTermRows
    from helix_es.stores.postgres.rows import PostgresRows
    from helix_es.stores.postgres.rows_sql import index_name
    from helix_es.views.long_term_rows import tables
    from helix_es.views.rows import Scan

    ns, prefix, table = unique("ltx"), unique("ltx"), unique("lt_rb").replace("-", "_")
    cfg = embedded(tmp_path, prefix, type="long-term", store="postgres", dsn=postgres_dsn, namespace=ns, table=table)
    path = write_config(tmp_path, cfg)
    log = EmbeddedLog(str(tmp_path / "log"), fsync=False, topic_prefix=prefix)
    try:
        for i in range(20_000):  # enough rows that the planner prefers the index
            text = "zebra crossing" if i == 12_345 else f"note {i} about the {['flight', 'hotel', 'train'][i % 3]}"
            await log.append(Event(ns, f"s{i % 40}", MessageAdded(Message("user", text))))
    finally:
        await log.close()
    view = load_config(cfg).memory.view.name
    into = f"{view}@v2"
    first = await rebuild(path, into=into, switch=False)
    await drop(path, into)  # its rows go; its table and index stay
    into_table = target_table(table, view, into)
    conn = await asyncpg.connect(postgres_dsn)
    trgm = (
        "SELECT i.indexrelid::int FROM pg_index i JOIN pg_opclass o ON o.oid = i.indclass[0] "
        "WHERE i.indrelid = $1::regclass AND o.opcname = 'gin_trgm_ops' AND i.indisvalid"
    )
    rows = PostgresRows(postgres_dsn, into, tables(into_table))
    store = LongTermRows(rows, into_table)
    try:
        left = await conn.fetchval(trgm, f'"{into_table}"')
        assert left is not None and await conn.fetchval(f'SELECT count(*) FROM "{into_table}"') == 0
        report = await rebuild(path, into=into, switch=False)
        assert report.read == first.read == 20_000
        built = await conn.fetchval(trgm, f'"{into_table}"')
        assert built is not None and built != left  # dropped before the load, built over its rows after
        await store.rows(ns)  # the statements, made once the server is asked
        scan = Scan(into_table, ns, contains="zebra", limit=10, columns=("message",))
        sql, args = rows._sql[into_table].select(scan, ["message"], None, want=False)
        plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + sql, *args))
        assert "Bitmap Index Scan" in plan and index_name(into_table, "trgm") in plan, plan
        found = await store.search(SessionKey(ns, "s25"), "zebra", 10, None)
        assert [m.content for m in found or []] == ["zebra crossing"]
    finally:
        await store.close()
        for t in (table, into_table):
            await conn.execute(f'DROP TABLE IF EXISTS "{t}", "{t}_retracted"')
        await conn.close()


async def test_a_long_term_rebuild_that_crashes_mid_load_leaves_the_live_target_and_a_rerun_completes(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The load dies after two batches (no index on the target yet): readers' target is untouched, and
    the same rebuild run again finishes the load, builds the index and switches."""
    from helix_es.log.embedded import EmbeddedLog
    from helix_es.model.events import Event, MessageAdded
    from helix_es.projection.long_term import LongTermRows
    from helix_es.stores.postgres.rows import PostgresRows
    from helix_es.views.long_term_rows import tables

    ns, prefix, table = unique("ltc"), unique("ltc"), unique("lt_rc").replace("-", "_")
    cfg = embedded(tmp_path, prefix, type="long-term", store="postgres", dsn=postgres_dsn, namespace=ns, table=table)
    path = write_config(tmp_path, cfg)
    log = EmbeddedLog(str(tmp_path / "log"), fsync=False, topic_prefix=prefix)
    try:
        for i in range(1000):
            await log.append(Event(ns, f"s{i % 10}", MessageAdded(Message("user", f"row {i} of the zebra"))))
    finally:
        await log.close()
    view = load_config(cfg).memory.view.name
    live = await rebuild(path, into=f"{view}@v2")
    assert live.switched
    real_apply, calls = LongTermRows.apply, [0]

    async def dies(self: LongTermRows, records: Any, *, live: bool = True) -> Any:
        calls[0] += 1
        if calls[0] > 2:
            raise OSError("killed mid-load")
        return await real_apply(self, records, live=live)

    monkeypatch.setattr(LongTermRows, "apply", dies)
    with pytest.raises(OSError):
        await rebuild(path, into=f"{view}@v3", batch_size=100)
    monkeypatch.setattr(LongTermRows, "apply", real_apply)
    v2, v3 = target_table(table, view, f"{view}@v2"), target_table(table, view, f"{view}@v3")
    valid_trgm = (
        "SELECT count(*) FROM pg_index i JOIN pg_opclass o ON o.oid = i.indclass[0] "
        "WHERE i.indrelid = $1::regclass AND o.opcname = 'gin_trgm_ops' AND i.indisvalid"
    )
    conn = await asyncpg.connect(postgres_dsn)
    try:
        assert await conn.fetchval(f'SELECT count(*) FROM "{v3}"') == 200  # two batches in, then the crash
        assert await conn.fetchval(valid_trgm, f'"{v3}"') == 0
        assert await conn.fetchval(f'SELECT count(*) FROM "{v2}"') == 1000
        assert await conn.fetchval(valid_trgm, f'"{v2}"') == 1
        assert (
            await conn.fetchval("SELECT target FROM helix_aliases WHERE view = $1", alias_id(view, prefix))
            == f"{view}@v2"
        )
        again = await rebuild(path, into=f"{view}@v3", batch_size=100)
        assert again.switched and again.events == 800  # from the target's checkpoint on
        assert await conn.fetchval(f'SELECT count(*) FROM "{v3}"') == 1000
        assert await conn.fetchval(valid_trgm, f'"{v3}"') == 1
        store = LongTermRows(PostgresRows(postgres_dsn, f"{view}@v3", tables(v3)), v3)
        try:
            found = await store.search(SessionKey(ns, "s7"), "row 997 ", 5, None)
            assert [m.content for m in found or []] == ["row 997 of the zebra"]
        finally:
            await store.close()
    finally:
        for t in (table, v2, v3):
            await conn.execute(f'DROP TABLE IF EXISTS "{t}", "{t}_retracted"')
        await conn.close()
