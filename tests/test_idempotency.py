"""Idempotent writes (docs/usage.md, "Retries and idempotency keys"): a write retried with the same key shows once.

Every scenario writes a script of adds and clears with idempotency keys, retrying some of them (the
same key again, from this memory, another memory or another process), and compares every view with
a reference namespace that got the same script without the retries: they must be equal. Embedded in
every store, through Kafka with a real projector (also one SIGKILLed and started again), rebuilt
from the log, and audited (which marks the retries as duplicates).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, ToolCall, load_config, open_memory
from helix_es.client.runtime import default_runtime
from helix_es.history.audit import audit
from helix_es.model import names
from helix_es.model.events import REMEMBERED_KEYS, Event, MessageAdded, Position, Record
from helix_es.projection.factory import open_idempotency, open_projection
from helix_es.projection.idempotency import mark_duplicates
from helix_es.stores.ports import SessionKey
from projectors.rebuild import rebuild
from tests.conftest import ROOT, start_projector, unique, wait_for

PARTS: list[dict[str, Any]] = [
    {"type": "conversation"},
    {"type": "sliding-window", "window_size": 4},
    {"type": "token-window", "max_tokens": 120},
    {"type": "summary", "max_messages": 4},
]

# (op, key, message): the write, and whether it is then retried ("retry" repeats the write with that key).
CALL = ToolCall("c1", "lookup", '{"q": "oslo"}')
SCRIPT: list[tuple[str, str | None, Message | None]] = [
    ("add", "k1", Message("system", "You are terse.")),
    ("add", "k2", Message("user", "weather in Oslo?")),
    ("retry", "k2", Message("user", "weather in Oslo?")),
    ("add", "k3", Message("assistant", "", tool_calls=(CALL,))),
    ("add", "k4", Message("tool", "-3 C", tool_call_id="c1")),
    ("retry", "k3", Message("assistant", "", tool_calls=(CALL,))),
    ("retry", "k4", Message("tool", "-3 C", tool_call_id="c1")),
    ("add", None, Message("assistant", "It is -3 C.")),
    ("add", None, Message("user", "and tomorrow?")),
    ("clear", "c1", None),
    ("add", "k5", Message("user", "start over")),
    ("retry", "c1", None),  # a clear retried after a newer add must not clear it
    ("add", "k6", Message("assistant", "Sure.")),
    ("retry", "k1", Message("system", "You are terse.")),  # long after, and after a clear: still a retry
    ("add", "k7", Message("user", "k7 once")),
    ("retry", "k7", Message("user", "k7 once, the text changed")),  # the key decides, not the text
]


def memory(ns: str, store: dict[str, Any], *, parts: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    backends = [{**p, **store} for p in (parts or PARTS)]
    return {"type": "composite", "namespace": ns, "read_timeout": 60, "backends": backends}


async def write(cfg: dict[str, Any], session: str, *, retries: bool = True) -> list[Position]:
    """The script, through one memory; retries (if asked) through a second memory of its own."""
    positions = []
    async with open_memory(cfg, session_id=session) as mem, open_memory(cfg, session_id=session) as other:
        for op, key, message in SCRIPT:
            if op == "retry":
                if not retries:
                    continue
                if message is None:
                    positions.append(await other.clear(idempotency_key=key))
                else:
                    positions.append(await other.add(message, idempotency_key=key))
            elif op == "clear":
                positions.append(await mem.clear(idempotency_key=key))
            else:
                assert message is not None
                positions.append(await mem.add(message, idempotency_key=key))
    return positions


async def views(cfg: dict[str, Any], session: str) -> dict[str, list[Message]]:
    async with open_memory(cfg, session_id=session) as mem:
        return {part.projection.name.split("@")[0]: await part.get() for part in mem.parts}


def store_config(store: str, request: pytest.FixtureRequest) -> dict[str, Any]:
    if store == "redis":
        return {"store": "redis", "redis_url": request.getfixturevalue("redis_url")}
    if store == "postgres":
        return {"store": "postgres", "dsn": request.getfixturevalue("postgres_dsn")}
    return {"store": store}


CONVERSATION = ["start over", "Sure.", "k7 once"]  # what the script leaves: the reference is not the only check


def expected_view_contents(got: dict[str, list[Message]]) -> None:
    assert [m.content for m in got["conversation"]] == CONVERSATION


@pytest.mark.parametrize("store", ["memory", "redis", "postgres"])
async def test_retries_show_once_in_every_view_embedded(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    ns, reference = unique("idem"), unique("idem")
    log = {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": unique("idem")}
    where = store_config(store, request)
    cfg = {"log": log, "memory": memory(ns, where)}
    ref = {"log": log, "memory": memory(reference, where)}
    await write(cfg, "s")
    await write(ref, "s", retries=False)
    got = await views(cfg, "s")
    assert got == await views(ref, "s")
    expected_view_contents(got)

    # The log keeps the retries; audit shows each as a duplicate of the write it repeats.
    report = await audit(cfg, session_id="s", as_of="now")
    dups = {e.idempotency_key: e for e in report.events if e.duplicate_of is not None}
    assert sorted(dups) == ["c1", "k1", "k2", "k3", "k4", "k7"]
    by_offset = {e.position.offset: e for e in report.events}
    for key, e in dups.items():
        assert e.duplicate_of is not None
        first = by_offset[e.duplicate_of]
        assert first.idempotency_key == key and first.duplicate_of is None and first.position < e.position
        assert e.describe().startswith(f"duplicate of @{first.position.offset}")
        assert e.to_json()["duplicate_of"] == first.position.offset
    # And folds as of now the same views.
    assert report.views is not None and {k.split("@")[0]: v for k, v in report.views.items()} == got


async def test_long_term_and_vector_index_a_retry_once(tmp_path: Path, postgres_dsn: str, redis_url: str) -> None:
    log = {"type": "embedded", "path": str(tmp_path / "log")}
    parts = [
        {"type": "long-term", "store": "postgres", "dsn": postgres_dsn},
        {"type": "long-term", "store": "redis", "redis_url": redis_url},
        {"type": "vector", "store": "postgres", "dsn": postgres_dsn},
        {"type": "vector", "store": "memory"},
    ]
    ns = unique("idem")
    cfg = {"log": log, "memory": {"type": "composite", "namespace": ns, "backends": parts}}
    await write(cfg, "s")
    async with open_memory(cfg, session_id="s") as mem:
        for part in mem.parts[:2]:  # long-term: substring search
            assert [m.content for m in await part.search("k7", limit=10)] == ["k7 once"], part.projection.name
            # The retried clear did not clear what was added before it; the first clear did.
            assert [m.content for m in await part.search("start over", limit=10)] == ["start over"]
            assert await part.search("Oslo", limit=10) == []
        for part in mem.parts[2:]:  # vector: the nearest, all of them, each once
            hits = [m.content for m in await part.search("k7 once", limit=10)]
            assert hits[0] == "k7 once" and sorted(hits) == ["Sure.", "k7 once", "start over"], part.projection.name


async def test_a_retry_from_another_process_through_kafka_shows_once(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, postgres_dsn: str, procs: list[subprocess.Popen[str]]
) -> None:
    ns, prefix = unique("idem"), unique("idem")
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix}
    parts = [
        {"type": "sliding-window", "window_size": 5, "store": "redis", "redis_url": redis_url},
        {"type": "conversation", "store": "postgres", "dsn": postgres_dsn},
    ]
    cfg = {"log": log, "memory": {"type": "composite", "namespace": ns, "read_timeout": 60, "backends": parts}}
    procs.append(start_projector(cfg, tmp_path))
    async with open_memory(cfg, session_id="s") as mem:
        first = await mem.add(Message("user", "pay invoice 17"), idempotency_key="req-17")
        # Another process (a web worker whose client re-sent the request) writes the same key, then
        # reads its own write: its duplicate moves the view's guard, so the read does not time out.
        script = (
            "import asyncio, json, sys\n"
            "from helix_es import Message, open_memory\n"
            "async def main():\n"
            "    async with open_memory(json.loads(sys.argv[1]), session_id='s') as mem:\n"
            "        pos = await mem.add(Message('user', 'pay invoice 17'), idempotency_key='req-17')\n"
            "        got = [p.content for p in await mem.get()]\n"
            "        print(json.dumps({'offset': pos.offset, 'got': got}))\n"
            "asyncio.run(main())\n"
        )
        out = subprocess.run(
            [sys.executable, "-c", script, json.dumps(cfg)], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        assert out.returncode == 0, out.stderr
        other = json.loads(out.stdout)
        assert other["offset"] > first.offset and other["got"] == ["pay invoice 17"]
        await mem.add(Message("user", "thanks"))
        for part in mem.parts:
            assert [m.content for m in await part.get()] == ["pay invoice 17", "thanks"]
    report = await audit(cfg, session_id="s")
    assert [(e.idempotency_key, e.duplicate_of) for e in report.events] == [
        ("req-17", None),
        ("req-17", first.offset),
        (None, None),
    ]


async def test_retries_across_a_projector_crash_show_once(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, procs: list[subprocess.Popen[str]]
) -> None:
    """SIGKILL the projector mid-script, write on while it is down, start it again: retries show once.
    Session "ref" gets the script without its retries."""
    ns, prefix = unique("idem"), unique("idem")
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 1, "topic_prefix": prefix}
    cfg = {"log": log, "memory": memory(ns, {"store": "redis", "redis_url": redis_url})}
    proc = start_projector(cfg, tmp_path, batch_size=3)
    procs.append(proc)
    async with open_memory(cfg, session_id="s") as mem:
        for op, key, message in SCRIPT:
            if op == "retry" and proc.poll() is None:
                await mem.get()  # the write it repeats is folded
                proc.kill()  # and the projector dies before the retry: it comes back to it
                proc.wait()
            if op == "clear" or (op == "retry" and message is None):
                await mem.clear(idempotency_key=key)
            else:
                assert message is not None
                await mem.add(message, idempotency_key=key)
    procs.append(start_projector(cfg, tmp_path))
    await write(cfg, "ref", retries=False)

    async def caught_up() -> bool:  # a fresh memory has written nothing, so it reads without waiting
        got = await views(cfg, "s")
        return [m.content for m in got["conversation"]] == CONVERSATION and got == await views(cfg, "ref")

    await wait_for(caught_up, timeout=60, what="the restarted projector folding both sessions")


async def test_a_crash_between_claiming_and_folding_loses_nothing(redis_url: str) -> None:
    """Keys are claimed before the fold, in another step: claiming the same records again finds them
    themselves, so a projector that died in between folds them on its next start."""
    cfg = load_config(
        {"memory": {"type": "sliding-window", "window_size": 3, "store": "redis", "redis_url": redis_url}}
    )
    ns = unique("idem")
    topic = names.topic(ns)
    key = SessionKey(ns, "s")
    records = [
        Record(
            Event(ns, "s", MessageAdded(Message("user", f"m{i}")), idempotency_key=f"k{i % 2}"), Position(topic, 0, i)
        )
        for i in range(3)
    ]
    keys = open_idempotency(cfg.memory)
    try:
        marked = await mark_duplicates(keys, cfg.memory.view.name, records)  # ... and the projector dies here
        assert [r.duplicate_of for r in marked] == [None, None, 0]
    finally:
        await keys.close()
    projection = open_projection(cfg.memory)
    try:
        await projection.apply(records)
        assert [m.content for m in await projection.get(key, Position(topic, 0, 2)) or []] == ["m0", "m1"]
    finally:
        await projection.close()


async def test_rebuilt_views_show_retries_once(tmp_path: Path, redis_url: str) -> None:
    ns = unique("idem")
    log = {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": unique("idem")}
    store = {"store": "redis", "redis_url": redis_url}
    await write({"log": log, "memory": memory(ns, store)}, "s")
    for part in PARTS:
        part_cfg = {"log": log, "memory": {**part, **store, "namespace": ns, "read_timeout": 60}}
        async with open_memory(part_cfg, session_id="s") as mem:
            before = await mem.get()
        report = await rebuild(part_cfg)
        assert report.switched
        async with open_memory(part_cfg, session_id="s") as mem:
            assert mem.projection.name.endswith("@v2")
            assert await mem.get() == before
            if part["type"] == "conversation":
                assert [m.content for m in before] == CONVERSATION


async def test_keys_are_remembered_for_the_sessions_last_10000_keyed_writes(tmp_path: Path) -> None:
    cfg = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "sliding-window", "window_size": 2, "namespace": unique("idem")},
    }
    async with open_memory(cfg, session_id="s") as mem:
        for i in range(REMEMBERED_KEYS + 1):
            await mem.add(Message("user", f"m{i}"), idempotency_key=f"k{i}")
        await mem.add(Message("user", "m1"), idempotency_key="k1")  # 10,000 keys back: a retry
        assert [m.content for m in await mem.get()] == [f"m{REMEMBERED_KEYS - 1}", f"m{REMEMBERED_KEYS}"]
        await mem.add(Message("user", "m0"), idempotency_key="k0")  # 10,001 back: forgotten, a new write
        assert [m.content for m in await mem.get()] == [f"m{REMEMBERED_KEYS}", "m0"]


async def test_retries_through_the_encryption_middleware_show_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each add is sealed afresh (another nonce), so only the key can say it is the same write."""
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))
    cfg = {
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "memory": {"type": "conversation", "namespace": unique("idem")},
        "memory_middleware": ["encryption"],
    }
    try:
        async with open_memory(cfg, session_id="s") as mem:
            await mem.add(Message("user", "secret"), idempotency_key="k")
            await mem.add(Message("user", "secret"), idempotency_key="k")
            assert [m.content for m in await mem.get()] == ["secret"]
        report = await audit(cfg, session_id="s")
        assert [e.duplicate_of for e in report.events] == [None, 0]
        assert report.opened
    finally:
        await default_runtime().aclose()


async def test_keys_of_expiring_sessions_expire_with_them(tmp_path: Path, redis_url: str) -> None:
    ns = unique("idem")
    cfg = {
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "memory": {"type": "sliding-window", "store": "redis", "redis_url": redis_url, "ttl": 60, "namespace": ns},
    }
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "hi"), idempotency_key="k")
        name = names.idempotency_key_name(ns, "s", mem.projection.name)
    keys = open_idempotency(load_config(cfg).memory)
    try:
        assert 0 < await keys.redis.pttl(name) <= 60_000  # type: ignore[attr-defined]
    finally:
        await keys.close()
