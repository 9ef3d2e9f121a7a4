"""The Kafka path end to end: the wire as other programs see it, and projectors that crash.

What every log does is `tests.contracts.event_log.EventLogContract`, run here by `TestKafkaLog`.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import fastavro
import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from helix_es import ConsistencyTimeout, InvalidInput, Message, ToolCall, open_memory
from helix_es.log.kafka import KafkaLog
from helix_es.log.port import EventLog
from helix_es.model import names
from helix_es.stores.ports import SessionKey
from helix_es.stores.redis.views import RedisStore
from helix_es.views.conversation import Conversation
from projectors.lag import lag
from tests.conftest import Deadline, unique, wait_for
from tests.contracts.event_log import EventLogContract, NewLog

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
async def kafka_log(kafka_bootstrap: str) -> AsyncIterator[KafkaLog]:
    log = KafkaLog(kafka_bootstrap, partitions=3)
    yield log
    await log.close()


class TestKafkaLog(EventLogContract):
    @pytest.fixture
    async def new_log(self, kafka_bootstrap: str) -> AsyncIterator[NewLog]:
        # A prefix of its own: no projector of another test subscribes to these topics (RUN: deleted after).
        prefix = unique("logtest")
        made: list[KafkaLog] = []

        def new() -> EventLog:
            made.append(KafkaLog(kafka_bootstrap, topic_prefix=prefix, partitions=3))
            return made[-1]

        yield new
        for log in made:
            await log.close()


def config(bootstrap: str, redis_url: str, namespace: str, prefix: str = "helix.memory", **memory: Any) -> dict:
    return {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 3, "topic_prefix": prefix},
        "memory": {"type": "conversation", "store": "redis", "redis_url": redis_url, "namespace": namespace, **memory},
    }


async def test_plain_aiokafka_and_fastavro_decode_every_event(kafka_bootstrap: str, redis_url: str) -> None:
    """Another program, with nothing but the files in schemas/, reads the topic."""
    ns = unique("wire")
    cfg = config(kafka_bootstrap, redis_url, ns, consistency="eventual")
    sent = 0
    for session in ("s1", "s2", "s3"):
        async with open_memory(cfg, session_id=session) as mem:
            await mem.add(Message("user", f"hello from {session}", metadata={"n": "1"}))
            await mem.add(Message("assistant", "", tool_calls=(ToolCall("c1", "f", "{}"),)))
            await mem.add(Message("tool", "done", tool_call_id="c1"))
            await mem.clear()
            sent += 4

    schemas = {}
    for file in sorted((ROOT / "schemas").glob("*.avsc")):
        raw = json.loads(file.read_text())
        canonical = fastavro.schema.to_parsing_canonical_form(raw)
        schemas[bytes.fromhex(fastavro.schema.fingerprint(canonical, "CRC-64-AVRO"))] = fastavro.parse_schema(raw)

    topic = f"helix.memory.{ns}"
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await consumer.start()
    decoded: list[tuple[bytes, dict[str, Any]]] = []
    deadline = Deadline(60, f"{sent} records on {topic}")
    try:
        while len(decoded) < sent:
            deadline.check(f"{len(decoded)} so far")
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), deadline.left() + 1)
            for records in batch.values():
                for r in records:
                    assert r.value[:2] == b"\xc3\x01"
                    body = fastavro.schemaless_reader(io.BytesIO(r.value[10:]), schemas[r.value[2:10]])
                    decoded.append((r.key, body))
    finally:
        await consumer.stop()
    assert len(decoded) == sent
    for key, body in decoded:
        assert key == body["session_id"].encode()
        assert body["namespace"] == ns
    by_session = {s: [b for k, b in decoded if k == s.encode()] for s in ("s1", "s2", "s3")}
    assert [b["payload"].get("message", {}).get("role") for b in by_session["s2"]] == [
        "user",
        "assistant",
        "tool",
        None,
    ]


async def test_topics_keep_everything_and_are_partitioned(kafka_log: KafkaLog, kafka_bootstrap: str) -> None:
    ns = unique("topic")
    topic = await kafka_log.ensure_topic(ns)
    assert topic == f"helix.memory.{ns}"
    assert await kafka_log.partitions_of(topic) == [0, 1, 2]
    admin = await kafka_log._admin_client()
    (described,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    configs = {c[0]: c[1] for c in described.resources[0][4]}
    assert configs["retention.ms"] == "-1"
    assert configs["retention.bytes"] == "-1"
    assert ns in await kafka_log.namespaces()


@pytest.mark.parametrize("bad", ["", "has space", "slash/ns", "ü", "x" * 201])
async def test_bad_namespace_is_refused_before_any_write(kafka_bootstrap: str, redis_url: str, bad: str) -> None:
    with pytest.raises(InvalidInput, match="namespace"):
        async with open_memory(config(kafka_bootstrap, redis_url, bad), session_id="s"):
            pass


async def test_read_your_writes_times_out_clearly_without_a_projector(kafka_bootstrap: str, redis_url: str) -> None:
    # No projector runs for a 7777-message window, so the view never catches up.
    cfg = config(
        kafka_bootstrap, redis_url, unique("nowait"), type="sliding-window", window_size=7777, read_timeout=0.3
    )
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "hi"))
        with pytest.raises(ConsistencyTimeout, match=r"sliding-window-7777.*helix-es project"):
            await mem.get()
    cfg["memory"]["consistency"] = "eventual"
    async with open_memory(cfg, session_id="s") as mem:
        assert await mem.get() == []  # eventual: the view as it is, no wait


def write_config(tmp_path: Path, bootstrap: str, redis_url: str, namespace: str, prefix: str) -> Path:
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(config(bootstrap, redis_url, namespace, prefix)))  # JSON is YAML
    return path


def start_projector(cfg: Path, batch: int = 10, log: Path | None = None) -> subprocess.Popen[str]:
    """`helix-es project`; its stderr (progress lines every 0.5 s) to a pipe, or to `log` to read as it runs."""
    cmd = [
        sys.executable,
        "-m",
        "helix_es.cli",
        "project",
        "--config",
        str(cfg),
        "--batch-size",
        str(batch),
        "--progress",
        "0.5",
    ]
    if log is None:
        return subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ})
    with log.open("w") as err:  # the child keeps its own copy open
        return subprocess.Popen(cmd, cwd=ROOT, stderr=err, text=True, env={**os.environ})


async def caught_up(cfg: Path, timeout: float = 60) -> None:
    """The projector's own checkpoints (what `helix-es lag` reads) are at the log's end on every partition."""

    async def done() -> bool:
        report = await lag(str(cfg))
        return bool(report.partitions) and report.total() == 0

    await wait_for(done, timeout, "the view's checkpoints to reach the end of every partition")


async def test_projector_killed_mid_stream_loses_nothing_and_duplicates_nothing(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    # A topic prefix of its own: its projector's consumer group shares nothing with other tests.
    ns, prefix = unique("crash"), unique("crash")
    cfg_path = write_config(tmp_path, kafka_bootstrap, redis_url, ns, prefix)
    cfg = config(kafka_bootstrap, redis_url, ns, prefix, consistency="eventual")
    sessions = [f"s{i}" for i in range(4)]
    per_session = 150
    store = RedisStore(redis_url)
    view = Conversation()

    async def applied() -> int:
        snaps = await store.load(view, [SessionKey(ns, s) for s in sessions])
        return sum(len(s.state) for s in snaps.values())

    async def produce(rounds: range, pause: float) -> None:
        async with open_memory(cfg, session_id=sessions[0]) as first:
            mems = [first] + [
                first.__class__(first.backend, first.projection, ns, s, consistency="eventual") for s in sessions[1:]
            ]
            for i in rounds:
                for mem, s in zip(mems, sessions, strict=True):
                    await mem.add(Message("user", f"{s}-{i}"))
                await asyncio.sleep(pause)

    total = len(sessions) * per_session
    proc = start_projector(cfg_path)
    producing: asyncio.Task[None] | None = None
    try:
        await produce(range(1), 0)
        await wait_for(lambda: _at_least(applied, len(sessions)), 60, "the projector to start")
        producing = asyncio.create_task(produce(range(1, per_session), 0.005))
        await wait_for(lambda: _more_than(applied, 100), 60, "the projector to apply some events")
        proc.kill()  # SIGKILL: no cleanup, no commit, mid-batch
        proc.wait(30)
        killed_at = await applied()
        assert not producing.done() and killed_at < total, "the kill should land mid-stream"
        await producing
        proc = start_projector(cfg_path)
        await wait_for(lambda: _at_least(applied, total), 90, "the restarted projector")
        # Anything applied twice would be in the view once the checkpoints cover every record.
        await caught_up(cfg_path)
        snaps = await store.load(view, [SessionKey(ns, s) for s in sessions])
        for s in sessions:
            assert [m.content for m in snaps[SessionKey(ns, s)].state] == [f"{s}-{i}" for i in range(per_session)]
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert "stopped cleanly" in err
    finally:
        if producing is not None:
            producing.cancel()
        if proc.poll() is None:
            proc.kill()
        await store.close()


async def test_redelivered_events_change_nothing(tmp_path: Path, kafka_bootstrap: str, redis_url: str) -> None:
    """A lagging partition checkpoint re-delivers events; the session guards make them no-ops."""
    ns, prefix = unique("redeliver"), unique("redeliver")
    cfg_path = write_config(tmp_path, kafka_bootstrap, redis_url, ns, prefix)
    async with open_memory(config(kafka_bootstrap, redis_url, ns, prefix, read_timeout=60), session_id="s") as mem:
        proc = start_projector(cfg_path)
        try:
            for i in range(5):
                await mem.add(Message("user", f"m{i}"))
            before = await mem.get()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
        r = aioredis.Redis.from_url(redis_url)
        fields = [f"{prefix}.{ns}:{p}" for p in range(3)]
        assert await r.hdel(names.checkpoint_key("conversation"), *fields) == 1  # as if it never landed
        await r.aclose()
        await mem.add(Message("user", "after"))
        log = tmp_path / "second-projector.log"
        proc = start_projector(cfg_path, log=log)
        try:
            assert await mem.get() == [*before, Message("user", "after")]
            # It did read the five again from the partition's start: each was at or below the guard.
            await caught_up(cfg_path)
            await wait_for(
                lambda: asyncio.sleep(0, "conversation: 1 events applied, 5 re-deliveries skipped" in log.read_text()),
                30,
                "a progress line counting them",
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.communicate(timeout=30)
        err = log.read_text()
        assert proc.returncode == 0, err
        assert "stopped cleanly after 1 events" in err


async def _more_than(count: Any, n: int) -> bool:
    return await count() > n


async def _at_least(count: Any, n: int) -> bool:
    return await count() >= n


def test_topic_pattern_matches_only_namespace_topics() -> None:
    import re

    pattern = re.compile(names.topic_pattern())
    assert pattern.match("helix.memory.prod-chat")
    assert not pattern.match("helix.memoryX.prod")
    assert not pattern.match("other.helix.memory.x")
    _ = TopicPartition  # aiokafka's type is what the runner assigns
