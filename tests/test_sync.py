"""`helix_es.sync`: one memory from many plain threads, from inside running loops, on the embedded log
and on Kafka with Redis; exceptions as they were; close, garbage collection and interpreter exit."""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from helix_es import ConfigError, ConsistencyTimeout, InvalidInput, InvalidMessage, Message, Position
from helix_es import open_memory as open_async
from helix_es.config import load_config
from helix_es.sync import MemoryClosed, SyncMemory, open_memory
from helix_es.sync.loop import current_loop
from tests.conftest import ROOT, start_projector, stop, unique

THREADS, ADDS = 16, 50


def embedded(tmp_path: Path, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "conversation", "namespace": unique("sync"), **memory},
    }


def kafka_redis(bootstrap: str, redis_url: str, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 3, "topic_prefix": unique("sync")},
        "memory": {
            "type": "conversation",
            "store": "redis",
            "redis_url": redis_url,
            "namespace": unique("sync"),
            "read_timeout": 60,
            **memory,
        },
    }


def held(cfg: dict[str, Any]) -> bool:
    """The sync memories' runtime holds a backend of `cfg`'s embedded log open."""
    running = current_loop()
    return running is not None and running.runtime.holds(load_config(cfg).log)


def hammer(mem: SyncMemory, threads: int, adds: int) -> dict[int, list[Position]]:
    """`threads` plain threads add `adds` messages each at once (and read now and then)."""
    start = threading.Barrier(threads)
    positions: dict[int, list[Position]] = {}
    errors: list[BaseException] = []

    def run(t: int) -> None:
        try:
            start.wait()
            mine = positions.setdefault(t, [])
            for i in range(adds):
                mine.append(mem.add(Message("user", f"t{t} m{i}")))
                if i % 10 == 9:  # a read in between sees this thread's writes so far (read-your-writes)
                    seen = {m.content for m in mem.get()}
                    assert {f"t{t} m{j}" for j in range(i + 1)} <= seen
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=run, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors, errors[:3]
    return positions


def assert_all_there(got: list[Message], threads: int, adds: int) -> None:
    contents = [m.content for m in got]
    counts = Counter(contents)
    assert [c for c, n in counts.items() if n > 1] == [], "duplicated"
    assert set(contents) == {f"t{t} m{i}" for t in range(threads) for i in range(adds)}, "lost"
    for t in range(threads):  # each thread's adds in the order it made them
        mine = [c for c in contents if c.startswith(f"t{t} ")]
        assert mine == [f"t{t} m{i}" for i in range(adds)]


def test_many_threads_add_to_one_memory_and_nothing_is_lost_or_doubled(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    with open_memory(cfg, session_id="s") as mem:
        positions = hammer(mem, THREADS, ADDS)
        all_positions = [p for ps in positions.values() for p in ps]
        assert len(set(all_positions)) == THREADS * ADDS  # one event each
        assert_all_there(mem.get(), THREADS, ADDS)
    with open_memory(cfg, session_id="s") as mem:  # and on the log: a new memory's view catches up to the same
        assert_all_there(mem.get(), THREADS, ADDS)


def test_many_memories_from_many_threads_share_one_loop_thread(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    errors: list[BaseException] = []

    def session(n: int) -> None:
        try:
            with open_memory(cfg, session_id=f"s{n}") as mem:
                for i in range(20):
                    mem.add(Message("user", f"{n}:{i}"))
                assert [m.content for m in mem.get()] == [f"{n}:{i}" for i in range(20)]
                assert mem.search(f"{n}:1", limit=50)  # conversation search: substring
        except BaseException as exc:
            errors.append(exc)

    workers = [threading.Thread(target=session, args=(n,)) for n in range(12)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
    assert not errors, errors[:3]
    assert [t.name for t in threading.enumerate()].count("helix-es-sync") == 1
    with open_memory(cfg, session_id="s3") as mem:  # every session kept to itself
        assert [m.content for m in mem.get()] == [f"3:{i}" for i in range(20)]


async def test_a_call_from_inside_a_running_loop_blocks_and_does_not_deadlock(tmp_path: Path) -> None:
    """A sync library called from `async def`: this test's own loop is running while it calls."""
    asyncio.get_running_loop()  # there is one
    with open_memory(embedded(tmp_path), session_id="s") as mem:
        mem.add(Message("user", "from inside a loop"))
        assert [m.content for m in mem.get()] == ["from inside a loop"]
        # and from a callback that loop runs
        done: asyncio.Future[list[Message]] = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().call_soon(lambda: done.set_result(mem.get()))
        assert len(await asyncio.wait_for(done, 30)) == 1


def test_a_call_from_asyncio_run_in_many_threads(tmp_path: Path) -> None:
    with open_memory(embedded(tmp_path), session_id="s") as mem:

        async def handler(n: int) -> None:
            mem.add(Message("user", f"loop {n}"))  # each thread's own running loop, blocked while it waits

        workers = [threading.Thread(target=asyncio.run, args=(handler(n),)) for n in range(8)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(60)
        assert sorted(m.content for m in mem.get()) == sorted(f"loop {n}" for n in range(8))


def test_a_call_from_helix_es_s_own_loop_raises_instead_of_waiting_on_itself(tmp_path: Path) -> None:
    with open_memory(embedded(tmp_path), session_id="s") as mem:

        async def calls_sync_inside(_: object) -> list[Message]:
            return mem.get()

        with pytest.raises(RuntimeError, match="would wait on itself"):
            mem.run(calls_sync_inside)
        assert mem.get() == []  # still fine afterwards


def test_exceptions_reach_the_caller_with_their_own_type(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        open_memory({"memory": {"type": "no-such-view"}}, session_id="s")
    with pytest.raises(InvalidInput, match="session_id"):
        open_memory(embedded(tmp_path))
    with open_memory(embedded(tmp_path), session_id="s") as mem:
        with pytest.raises(InvalidMessage, match=r"helix_es\.Message"):
            mem.add("not a message")  # type: ignore[arg-type]
        with pytest.raises(InvalidInput, match="limit") as caught:
            mem.search("x", limit=0)
        assert isinstance(caught.value, ValueError)
        with pytest.raises(InvalidInput, match="idempotency"):
            mem.clear(idempotency_key="")
        assert mem.get() == []


def test_a_closed_memory_raises_a_clear_error_and_its_backend_is_released(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    mem = open_memory(cfg, session_id="s")
    mem.add(Message("user", "kept"))
    assert held(cfg)
    mem.close()
    mem.close()  # again: nothing
    assert mem.closed and "closed" in repr(mem)
    assert not held(cfg)
    for call in (mem.get, lambda: mem.add(Message("user", "x")), mem.clear, lambda: mem.search("x")):
        with pytest.raises(MemoryClosed, match="closed; open another"):
            call()
    # released: another process may take the embedded log's one-writer lock now
    script = (
        "import sys, json; from helix_es.sync import open_memory\n"
        "with open_memory(json.loads(sys.argv[1]), session_id='s') as m: print([x.content for x in m.get()])\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['kept']"


def test_close_waits_for_the_calls_in_flight(tmp_path: Path) -> None:
    mem = open_memory(embedded(tmp_path), session_id="s")
    outcomes: list[str] = []
    lock = threading.Lock()

    def writer(t: int) -> None:
        for i in range(200):
            try:
                mem.add(Message("user", f"{t}.{i}"))
                result = "ok"
            except MemoryClosed:
                result = "closed"
            except BaseException as exc:  # anything else is a bug
                result = f"{type(exc).__name__}: {exc}"
            with lock:
                outcomes.append(result)
            if result != "ok":
                return

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(6)]
    for w in workers:
        w.start()
    time.sleep(0.05)
    mem.close()
    for w in workers:
        w.join(60)
    assert set(outcomes) <= {"ok", "closed"}, [o for o in outcomes if o not in ("ok", "closed")][:3]


def test_a_memory_dropped_without_closing_is_released(tmp_path: Path) -> None:
    cfg = embedded(tmp_path)
    mem = open_memory(cfg, session_id="s")
    mem.add(Message("user", "x"))
    del mem
    gc.collect()
    deadline = time.monotonic() + 10
    while held(cfg):
        assert time.monotonic() < deadline, "the dropped memory's backend was not released"
        time.sleep(0.01)


@pytest.mark.parametrize("close", [False, True])
def test_the_interpreter_exits_promptly_with_memories_open_or_closed(tmp_path: Path, close: bool) -> None:
    cfg = embedded(tmp_path)
    script = (
        "import sys, json, threading\n"
        "from helix_es import Message\n"
        "from helix_es.sync import open_memory\n"
        "m = open_memory(json.loads(sys.argv[1]), session_id='s')\n"
        "m.add(Message('user', 'before exit'))\n"
        + ("m.close()\n" if close else "")
        + "assert any(t.daemon for t in threading.enumerate() if t.name == 'helix-es-sync')\n"
    )
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert time.monotonic() - started < 30
    assert "Task was destroyed" not in done.stderr and "never awaited" not in done.stderr, done.stderr
    with open_memory(cfg, session_id="s") as mem:  # the write is on the log, the lock given back at exit
        assert [m.content for m in mem.get()] == ["before exit"]


async def test_the_sync_and_async_memories_of_one_log_agree(tmp_path: Path) -> None:
    """A sync memory and an async one (on this test's loop) over one embedded log, in one process."""
    cfg = embedded(tmp_path)
    with open_memory(cfg, session_id="s") as mem:
        mem.add(Message("user", "sync"))
    async with open_async(cfg, session_id="s") as amem:
        assert [m.content for m in await amem.get()] == ["sync"]


def test_kafka_and_redis_from_many_threads(tmp_path: Path, kafka_bootstrap: str, redis_url: str) -> None:
    cfg = kafka_redis(kafka_bootstrap, redis_url)
    proc = start_projector(cfg, tmp_path)
    try:
        with open_memory(cfg, session_id="s") as mem:
            hammer(mem, 8, 20)
            assert_all_there(mem.get(), 8, 20)
            mem.clear()
            assert mem.get() == []
            mem.add(Message("user", "after the clear"))
            assert [m.content for m in mem.get()] == ["after the clear"]
    finally:
        stop(proc)
    assert proc.returncode == 0, proc.stderr


def test_kafka_without_a_projector_times_out_with_its_own_type(kafka_bootstrap: str, redis_url: str) -> None:
    cfg = kafka_redis(kafka_bootstrap, redis_url, read_timeout=0.5)
    with open_memory(cfg, session_id="s") as mem:
        mem.add(Message("user", "nobody folds this"))
        with pytest.raises(ConsistencyTimeout) as caught:
            mem.get()
        assert isinstance(caught.value, TimeoutError)


def run_script(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", script, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_after_a_fork_the_child_opens_its_own_and_the_parent_s_memory_refuses_there(tmp_path: Path) -> None:
    script = """
import json, os, sys
from helix_es import Message
from helix_es.sync import MemoryClosed, open_memory
parent_cfg, child_cfg = json.loads(sys.argv[1]), json.loads(sys.argv[2])
mem = open_memory(parent_cfg, session_id="s")
mem.add(Message("user", "parent"))
pid = os.fork()
if pid == 0:
    try:
        mem.get()
        os._exit(3)
    except MemoryClosed:
        pass
    with open_memory(child_cfg, session_id="s") as own:
        own.add(Message("user", "child"))
        os._exit(0 if [m.content for m in own.get()] == ["child"] else 4)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status), [m.content for m in mem.get()])
mem.close()
"""
    parent, child = embedded(tmp_path / "parent"), embedded(tmp_path / "child")
    done = run_script(script, json.dumps(parent), json.dumps(child))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 ['parent']"


def test_a_call_after_the_loop_stopped_at_exit_raises_instead_of_hanging(tmp_path: Path) -> None:
    script = """
import atexit, json, sys
def late():  # registered before helix_es.sync: runs after its exit hook stopped the loop
    from helix_es.sync import MemoryClosed
    try:
        mem.get()
        print("answered")
    except MemoryClosed as exc:
        print("MemoryClosed:", "stopped" in str(exc))
atexit.register(late)
from helix_es import Message
from helix_es.sync import open_memory
mem = open_memory(json.loads(sys.argv[1]), session_id="s")
mem.add(Message("user", "x"))
"""
    done = run_script(script, json.dumps(embedded(tmp_path)))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "MemoryClosed: True"
