"""SessionMemoryManager and MemoryHolder: one memory per session under concurrency, atomic swaps."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from helix_es import (
    ConfigError,
    ConsistencyTimeout,
    InvalidInput,
    Memory,
    MemoryHolder,
    Message,
    SessionMemoryManager,
    open_memory,
)
from helix_es.client.sessions import MissingSessionHeader, NoMemory, SessionsClosed
from helix_es.config import load_config
from tests.conftest import unique

ROOT = Path(__file__).resolve().parent.parent


def embedded(tmp_path: Path, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "memory": {"type": "conversation", "namespace": unique("sess"), **memory},
    }


def contents(messages: list[Message]) -> list[str]:
    return [m.content for m in messages]


async def test_concurrent_first_uses_open_exactly_one_memory_per_session(tmp_path: Path) -> None:
    cfg = load_config(embedded(tmp_path))
    opened: Counter[str] = Counter()
    closed: list[str] = []

    @asynccontextmanager
    async def factory(session_id: str) -> AsyncIterator[Memory]:
        opened[session_id] += 1
        await asyncio.sleep(random.uniform(0, 0.02))  # a slow open: every racer arrives while it is pending
        async with open_memory(cfg, session_id=session_id) as mem:
            yield mem
        closed.append(session_id)

    ids = [f"user-{i % 40}" for i in range(400)]
    random.shuffle(ids)
    async with SessionMemoryManager(factory) as manager:
        got = await asyncio.gather(*(manager.get(sid) for sid in ids))
        assert opened == Counter({f"user-{i}": 1 for i in range(40)})
        by_id: dict[str, set[int]] = {}
        for sid, mem in zip(ids, got, strict=True):
            by_id.setdefault(sid, set()).add(id(mem))
        assert all(len(objs) == 1 for objs in by_id.values())  # every caller of an id got the same memory
        assert len({next(iter(objs)) for objs in by_id.values()}) == 40  # and ids never share one
        assert len(manager) == 40 and "user-7" in manager

        async def converse(sid: str) -> None:
            mem = await manager.get(sid)
            await mem.add(Message("user", f"I am {sid}"))

        await asyncio.gather(*(converse(f"user-{i}") for i in range(40)))
        for i in range(40):
            mem = await manager.get(f"user-{i}")
            assert contents(await mem.get()) == [f"I am user-{i}"]
            assert await mem.search(f"user-{(i + 1) % 40}") == []
    assert sorted(closed) == sorted(opened)
    assert len(manager) == 0
    with pytest.raises(SessionsClosed):
        await manager.get("user-1")


async def test_an_async_factory_is_called_once_per_session_too() -> None:
    calls: Counter[str] = Counter()

    class Closable:
        closed = False

        async def aclose(self) -> None:
            self.closed = True

    async def factory(session_id: str) -> Any:
        calls[session_id] += 1
        await asyncio.sleep(0.01)
        return Closable()

    manager = SessionMemoryManager(factory)
    got = await asyncio.gather(*(manager.get(f"s{i % 7}") for i in range(150)))
    assert calls == Counter({f"s{i}": 1 for i in range(7)})
    assert len({id(m) for m in got}) == 7
    assert await manager.close_session("s0") is True and await manager.close_session("s0") is False
    assert got[0].closed and not got[1].closed  # got[i] is session s{i % 7}
    await manager.close()
    assert all(m.closed for m in got)


async def test_a_closed_memorys_unshown_write_is_waited_for_by_the_sessions_next_memory(
    kafka_bootstrap: str, redis_url: str
) -> None:
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 1, "topic_prefix": unique("sessc")}
    memory = {"type": "conversation", "store": "redis", "redis_url": redis_url, "namespace": unique("sess")}
    # No projector folds this log: the add is never shown, so a read that waits for it times out.
    async with SessionMemoryManager.from_config({"log": log, "memory": {**memory, "read_timeout": 0.5}}) as manager:
        await (await manager.get("s")).add(Message("user", "kept"))
        assert await manager.close_session("s") is True
        with pytest.raises(ConsistencyTimeout):
            await (await manager.get("s")).get()  # not [] from a memory that forgot the write
        # Bounded: past `carry_limit` closed sessions, the oldest one's write is no longer waited for.
        manager.carry_limit = 1
        for sid in ("old", "new"):
            await (await manager.get(sid)).add(Message("user", sid))
            await manager.close_session(sid)
        with pytest.raises(ConsistencyTimeout):
            await (await manager.get("new")).get()
        assert await (await manager.get("old")).get() == []


async def test_a_failed_open_fails_its_waiters_and_is_retried() -> None:
    attempts: Counter[str] = Counter()

    async def flaky(session_id: str) -> Any:
        attempts[session_id] += 1
        await asyncio.sleep(0.01)
        if attempts[session_id] == 1:
            raise ConnectionError("store unreachable")
        return object()

    manager = SessionMemoryManager(flaky)
    results = await asyncio.gather(*(manager.get("s") for _ in range(20)), return_exceptions=True)
    assert all(isinstance(r, ConnectionError) for r in results)
    assert attempts["s"] == 1 and "s" not in manager
    assert await manager.get("s") is await manager.get("s")
    assert attempts["s"] == 2
    await manager.close()


async def test_a_cancelled_caller_does_not_cancel_the_open_for_others() -> None:
    started = asyncio.Event()

    async def slow(session_id: str) -> Any:
        started.set()
        await asyncio.sleep(0.05)
        return object()

    manager = SessionMemoryManager(slow)
    first = asyncio.create_task(manager.get("s"))
    await started.wait()
    second = asyncio.create_task(manager.get("s"))
    first.cancel()
    mem = await second
    assert first.cancelled() and await manager.get("s") is mem
    await manager.close()


async def test_session_ids_are_checked_before_the_factory_runs() -> None:
    called = False

    async def factory(session_id: str) -> Any:
        nonlocal called
        called = True
        return object()

    manager = SessionMemoryManager(factory)
    for bad in ("", "has{brace}", "x" * 600):
        with pytest.raises(InvalidInput, match="session_id"):
            await manager.get(bad)
    assert not called


async def test_for_headers_resolves_the_configured_header(tmp_path: Path) -> None:
    yaml = f"""
memory:
  type: conversation
  namespace: {unique("hdr")}
  session_id_header: X-Session-ID
log: {{type: embedded, path: {tmp_path / "log"}}}
"""
    async with SessionMemoryManager.from_config(yaml) as manager:
        assert manager.session_id_header == "X-Session-ID"
        alice = await manager.for_headers({"x-session-id": "alice", "Accept": "*/*"})
        assert await manager.for_headers({"X-SESSION-ID": " alice "}) is alice
        asgi = [(b"host", b"example"), (b"x-session-id", b"bob")]  # ASGI scope headers
        bob = await manager.for_headers(asgi)
        assert bob is not alice and sorted(manager.session_ids()) == ["alice", "bob"]
        await alice.add(Message("user", "alice only"))
        assert await bob.get() == []

        with pytest.raises(MissingSessionHeader, match="X-Session-ID: missing") as caught:
            await manager.for_headers({"X-Request-ID": "r1"})
        assert caught.value.field == "X-Session-ID" and isinstance(caught.value, ValueError)
        with pytest.raises(InvalidInput, match="X-Session-ID: appears 2 times"):
            await manager.for_headers([("X-Session-ID", "alice"), ("x-session-id", "mallory")])
        with pytest.raises(InvalidInput, match="X-Session-ID: must be printable text without braces"):
            await manager.for_headers({"X-Session-ID": "a{b}"})
        with pytest.raises(InvalidInput, match="X-Session-ID: must be a non-empty string"):
            await manager.for_headers({"X-Session-ID": "  "})

    no_header = SessionMemoryManager.from_config(embedded(tmp_path))
    with pytest.raises(ConfigError, match="session_id_header"):
        await no_header.for_headers({"X-Session-ID": "s"})
    explicit = SessionMemoryManager.from_config(embedded(tmp_path), session_id_header="X-User")
    assert explicit.session_id_from_headers({"x-user": "u1"}) == "u1"
    await no_header.close()
    await explicit.close()


def start_projector(config: dict[str, Any], tmp_path: Path) -> subprocess.Popen[str]:
    path = tmp_path / "projector.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    cmd = [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path), "--batch-size", "100"]
    return subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ})


async def test_sessions_are_isolated_through_kafka_and_redis(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    ns, prefix = unique("sess"), unique("sess")  # its own prefix: its projector's group is its own
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 3, "topic_prefix": prefix},
        "memory": {
            "type": "sliding-window",
            "window_size": 3,
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
            "read_timeout": 60,
            "session_id_header": "X-Session-ID",
        },
    }
    proc = start_projector(cfg, tmp_path)
    users = [f"u{i}" for i in range(24)]
    try:
        async with SessionMemoryManager.from_config(cfg) as manager:

            async def request(user: str, turn: int) -> list[str]:
                header = "x-session-id" if turn % 2 else "X-Session-Id"
                mem = await manager.for_headers({header: user})
                await mem.add(Message("user", f"{user} turn {turn}"))
                return contents(await mem.get())

            for turn in range(4):
                seen = await asyncio.gather(*(request(u, turn) for u in users))
                for user, got in zip(users, seen, strict=True):
                    assert got == [f"{user} turn {t}" for t in range(max(0, turn - 2), turn + 1)]
            assert len(manager) == len(users)

            victim = await manager.get("u0")
            await victim.clear()
            assert await victim.get() == []
            other = await manager.get("u1")
            assert contents(await other.get()) == ["u1 turn 1", "u1 turn 2", "u1 turn 3"]
            assert contents(await other.search("u0")) == []
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=30)
            assert proc.returncode == 0, err


async def test_holder_swaps_never_tear_a_request(tmp_path: Path) -> None:
    """300 requests each take the current memory from the holder (as an agent does, once per request)
    while another task keeps swapping it; swaps land mid-request. Each request's two writes and two
    reads all reach the one memory it took: never split across the two, whatever the holder says meanwhile."""
    cfg = load_config(embedded(tmp_path))
    async with open_memory(cfg, session_id="blue") as blue, open_memory(cfg, session_id="green") as green:
        holder = MemoryHolder(blue)
        stop = asyncio.Event()
        took: dict[int, Memory] = {}
        seen: dict[int, list[list[str]]] = {}
        swapped_mid_request = 0

        async def swapper() -> int:
            swaps = 0
            while not stop.is_set():
                old = holder.set(green if holder.peek() is blue else blue)
                assert old in (blue, green)
                swaps += 1
                await asyncio.sleep(0)
            return swaps

        async def request(n: int) -> None:
            nonlocal swapped_mid_request
            for _ in range(n % 11):  # requests arrive spread over the swaps, not all in one tick
                await asyncio.sleep(0)
            mem = holder.get()  # once per request: a swap mid-request cannot split it across memories
            took[n] = mem
            await mem.add(Message("user", f"req-{n}-a"))
            await asyncio.sleep(0)
            first = contents(await mem.get())
            await asyncio.sleep(0)
            if holder.peek() is not mem:
                swapped_mid_request += 1
            await mem.add(Message("user", f"req-{n}-b"))
            await asyncio.sleep(0)
            second = contents(await mem.get())
            seen[n] = [first, second]
            assert f"req-{n}-a" in first
            assert second.index(f"req-{n}-a") < second.index(f"req-{n}-b")

        swapping = asyncio.create_task(swapper())
        await asyncio.gather(*(request(n) for n in range(300)))
        stop.set()
        assert await swapping > 10
        stored = contents(await blue.get()) + contents(await green.get())
        assert sorted(stored) == sorted(f"req-{n}-{x}" for n in range(300) for x in "ab")  # each once
        # The requests read the holder while it moved: both memories served some, and swaps came mid-request.
        assert {m.session_id for m in took.values()} == {"blue", "green"}
        assert swapped_mid_request > 0, "no swap landed mid-request: the test tested nothing"
        final = {"blue": set(contents(await blue.get())), "green": set(contents(await green.get()))}
        for n, mem in took.items():
            mine, other = final[mem.session_id], final["green" if mem is blue else "blue"]
            assert {f"req-{n}-a", f"req-{n}-b"} <= mine, n  # both writes in the memory it took
            for read in seen[n]:  # and every read showed that memory, nothing of the other
                assert set(read) <= mine and not set(read) & other, n


def test_holder_swap_is_atomic_across_threads() -> None:
    initial = object()
    holder = MemoryHolder(initial)  # type: ignore[arg-type]
    per_thread, threads = 2000, 8
    news = [[object() for _ in range(per_thread)] for _ in range(threads)]
    olds: list[list[object]] = [[] for _ in range(threads)]
    barrier = threading.Barrier(threads)

    def run(i: int) -> None:
        barrier.wait()
        for obj in news[i]:
            olds[i].append(holder.set(obj))  # type: ignore[arg-type]
            holder.get()

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    # Every value set is returned as "old" exactly once (or is the last one): no swap was lost or doubled.
    returned = [id(o) for lst in olds for o in lst] + [id(holder.peek())]
    expected = [id(initial)] + [id(o) for lst in news for o in lst]
    assert sorted(returned) == sorted(expected)


def test_holder_compare_and_set_and_empty() -> None:
    holder = MemoryHolder()
    with pytest.raises(NoMemory, match="set"):
        holder.get()
    assert holder.peek() is None
    a, b = object(), object()
    assert holder.compare_and_set(None, a)  # type: ignore[arg-type]
    assert not holder.compare_and_set(None, b)  # type: ignore[arg-type]
    assert holder.get() is a
    assert holder.set(b) is a  # type: ignore[arg-type]
