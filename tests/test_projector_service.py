"""The projector service: every view of a config, shared partitions, dead letters, and `helix-es lag`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaProducer

from helix_es import Message, open_memory
from helix_es.log.codec import Codec, event_to_record
from helix_es.model import names
from helix_es.model.events import Event, MessageAdded
from projectors.lag import lag
from tests.conftest import members, topic_values, unique, wait_for

ROOT = Path(__file__).resolve().parent.parent


def two_agents(bootstrap: str, redis_url: str, postgres_dsn: str, prefix: str, ns: str) -> dict[str, Any]:
    return {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 4, "topic_prefix": prefix},
        "agents": [
            {
                "id": ns,
                "memory": {
                    "type": "sliding-window",
                    "tool_pairs": "split",  # asserts the seed-cut view by its name
                    "window_size": 3,
                    "store": "redis",
                    "redis_url": redis_url,
                    "read_timeout": 60,
                },
            },
            {
                "id": ns + "-b",
                "memory": {
                    "type": "conversation",
                    "store": "postgres",
                    "dsn": postgres_dsn,
                    "namespace": ns,
                    "read_timeout": 60,
                },
            },
        ],
    }


def project(path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path), "--progress", "0.5"],
        cwd=ROOT,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )


def stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return err


async def test_two_processes_share_partitions_and_lag_drains_to_zero(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, postgres_dsn: str
) -> None:
    ns, prefix = unique("svc"), unique("svc")
    cfg = two_agents(kafka_bootstrap, redis_url, postgres_dsn, prefix, ns)
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    sessions = [f"s{i}" for i in range(12)]
    async with open_memory(cfg, session_id="seed", agent=ns) as first:
        mems = [first.__class__(first.backend, first.projection, ns, s, consistency="eventual") for s in sessions]
        for i in range(5):
            for mem in mems:
                await mem.add(Message("user", f"{mem.session_id}-{i}"))
    before = await lag(str(path))
    assert {p.view for p in before.partitions} == {"sliding-window-3", "conversation"}
    assert before.total("sliding-window-3") == before.total("conversation") == 60

    first_proc, second_proc = project(path), project(path)
    try:
        topic = names.topic(ns, prefix)
        for view, store in (("sliding-window-3", "redis"), ("conversation", "postgres")):
            group = names.consumer_group(view, store, prefix)

            async def shared(group: str = group) -> bool:
                held = await members(kafka_bootstrap, group, topic, 4)
                return len(held) == 2 and all(held.values())

            await wait_for(shared, 60, f"both processes to hold partitions of {view}")

        async def drained() -> bool:
            return (await lag(str(path))).total() == 0

        await wait_for(drained, 90, "both views to catch up")
        async with (
            open_memory(cfg, session_id="s7", agent=0) as window,
            open_memory(cfg, session_id="s7", agent=1) as history,
        ):
            assert [m.content for m in await window.get()] == ["s7-2", "s7-3", "s7-4"]
            assert [m.content for m in await history.get()] == [f"s7-{i}" for i in range(5)]
    finally:
        errors = [stop(first_proc), stop(second_proc)]
    # Each process got some of the 4 partitions of each view's consumer group.
    for err in errors:
        assert "from offset" in err and "stopped cleanly" in err, err
    proc = subprocess.run(
        [sys.executable, "-m", "helix_es.cli", "lag", "--config", str(path), "--json", "--max", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["total"] == 0


async def test_records_a_projector_cannot_use_are_dead_lettered_and_the_rest_flows(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, postgres_dsn: str
) -> None:
    ns, prefix = unique("dlq"), unique("dlq")
    cfg = two_agents(kafka_bootstrap, redis_url, postgres_dsn, prefix, ns)
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    topic = names.topic(ns, prefix)
    codec = Codec()

    def forged(session: str, role: str = "user", namespace: str = ns) -> bytes:
        record = event_to_record(Event(namespace, session, MessageAdded(Message("user", "forged"))))
        record["payload"][1]["message"]["role"] = role  # what a foreign producer might send
        return codec.encode_record(record)

    async with open_memory(cfg, session_id="good", agent=0) as mem:
        await mem.add(Message("user", "before"))
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
        await producer.start()
        try:
            bad = [
                (b"good", b"\x00not avro at all"),  # undecodable
                (b"good", forged("good", role="robot")),  # decodes, fails validation
                (b"good", forged("good", namespace="someone-else")),  # claims another namespace
                (b"mallory", forged("good")),  # key is not the session
            ]
            for key, value in bad:
                await producer.send_and_wait(topic, value, key=key)
        finally:
            await producer.stop()
        await mem.add(Message("user", "after"))
        proc = project(path)
        try:
            assert [m.content for m in await mem.get()] == ["before", "after"]
            parked = await topic_values(kafka_bootstrap, names.dlq_topic(ns, prefix), 2 * len(bad))
        finally:
            err = stop(proc)
    assert len(parked) == 2 * len(bad)  # one copy per view
    assert "cannot be used" in err
    report = await lag(str(path))
    assert report.dead_letters == {ns: 2 * len(bad)}
    assert report.total() == 0
    assert set(parked) == {value for _, value in bad}


async def test_the_demo_runs_against_kafka_and_redis_with_the_projector_service(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    """The compose flow of docs/quickstart.md: services up, `helix-es project`, then `helix-es demo --config`."""
    prefix = unique("demo")
    path = tmp_path / "helix.yaml"
    path.write_text(
        json.dumps(
            {
                "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "topic_prefix": prefix},
                "memory": {
                    "type": "sliding-window",
                    "tool_pairs": "split",
                    "window_size": 4,
                    "store": "redis",
                    "redis_url": redis_url,
                    "namespace": "demo",
                    "read_timeout": 60,
                },
            }
        )
    )
    proc = project(path)
    try:
        demo = subprocess.run(
            [sys.executable, "-m", "helix_es.cli", "demo", "--config", str(path), "--json"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=180,
        )
    finally:
        stop(proc)
    assert demo.returncode == 0, demo.stderr
    lines = [json.loads(line) for line in demo.stdout.splitlines()]
    last = [x for x in lines if x["kind"] == "turn"][-1]
    assert last["get"][0]["role"] == "system" and len(last["get"]) == 5  # the window, served from Redis
    assert sum(1 for x in lines if x["kind"] == "event") == 7
