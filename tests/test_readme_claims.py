"""What the documentation (README.md and docs/) promises by name, checked literally against the running system.

Other programs depend on these names and numbers (operators alert on the consumer groups, read
the dead-letter topics, script around the exit codes), so each is asserted as the docs spell
it, not as the code happens to compute it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from helix_es import ConsistencyTimeout, Message, open_memory
from helix_es.config import load_config
from projectors.lag import lag
from tests.conftest import ROOT, RUN, Deadline, start_projector, unique, wait_for

DOC_PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
README = " ".join(" ".join(page.read_text() for page in DOC_PAGES).split())  # every page; line breaks as spaces
UNDECODABLE = b"\x00not avro at all"


def test_the_docs_say_what_these_tests_check() -> None:
    for claim in (
        "**Producer** `acks=all`, idempotent.",
        "**Consumer groups** `helix.projector.<store>.<view>` (`.<topic_prefix>` appended for a non-default prefix)",
        "`helix.dlq.<namespace>` (`<topic_prefix>-dlq.<namespace>` for a non-default prefix) with headers naming "
        "its source position, the view and the error",
        "headers `helix.source` (`<topic>:<partition>:<offset>`), `helix.view` and `helix.error`",
        "up to `read_timeout` (default 5 s)",
        "leaves the group, and exits 0",
        "the CLI exits 2 with it",
        "Exit 1 if the alias moved under the rebuild, 2 for a bad config or options",
    ):
        assert claim in README, claim
    # One name for the dead-letter topic, the one the code uses (helix_es.model.names.dlq_topic).
    assert "-deadletter" not in README  # the name it once had beside this one
    assert "`<topic_prefix>-dlq.<namespace>`" in README


async def test_the_producer_is_acks_all_and_idempotent(kafka_bootstrap: str, redis_url: str) -> None:
    cfg = {
        "log": {
            "type": "kafka",
            "bootstrap_servers": kafka_bootstrap,
            "partitions": 1,
            "topic_prefix": unique("claims"),
        },
        "memory": {
            "type": "conversation",
            "store": "redis",
            "redis_url": redis_url,
            "namespace": unique("ns"),
            "consistency": "eventual",
        },
    }
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "hello"))  # a real append: the producer is started and has written
        producer = mem.backend.log._producer
        assert isinstance(producer, AIOKafkaProducer)
        assert producer._sender._acks == -1  # acks=all (aiokafka spells it -1)
        manager = producer._txn_manager  # only an idempotent producer has one
        assert manager is not None and manager.transactional_id is None
        assert manager.has_pid() and manager.producer_id >= 0  # the broker gave it a producer id


def test_the_default_read_timeout_is_five_seconds() -> None:
    assert load_config({"memory": {"type": "conversation"}}).memory.read_timeout == 5.0
    assert load_config({"agents": [{"id": "a", "memory": {"type": "sliding-window"}}]}).memory.read_timeout == 5.0


async def test_a_read_your_writes_read_waits_five_seconds_by_default(kafka_bootstrap: str, redis_url: str) -> None:
    # No projector serves a 7778-message window: the read waits out the default and says so.
    cfg = {
        "log": {
            "type": "kafka",
            "bootstrap_servers": kafka_bootstrap,
            "partitions": 1,
            "topic_prefix": unique("claims"),
        },
        "memory": {
            "type": "sliding-window",
            "tool_pairs": "split",  # asserts the seed-cut view by its name
            "window_size": 7778,
            "store": "redis",
            "redis_url": redis_url,
            "namespace": unique("ns"),
        },
    }
    async with open_memory(cfg, session_id="s") as mem:
        await mem.add(Message("user", "hello"))
        started = time.monotonic()
        with pytest.raises(ConsistencyTimeout, match=r"waited 5\.0s\. Is a projector running"):
            await mem.get()
        assert time.monotonic() - started >= 5.0  # a lower bound only: never a speed check


@pytest.mark.parametrize("own_prefix", [False, True], ids=["default-prefix", "own-prefix"])
async def test_projector_group_dead_letters_and_exit_code_are_named_as_the_readme_says(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, own_prefix: bool
) -> None:
    ns = unique("claims")
    prefix = unique("claims") if own_prefix else "helix.memory"
    # A view of this run's own (its window size), so its consumer group and keys are new here.
    window = 10_000 + int(RUN, 16) % 80_000 * 2 + own_prefix
    view = f"sliding-window-{window}"
    topic = f"{prefix}.{ns}"
    if own_prefix:
        group, dlq, other_group = f"helix.projector.redis.{view}.{prefix}", f"{prefix}-dlq.{ns}", None
    else:
        group, dlq, other_group = f"helix.projector.redis.{view}", f"helix.dlq.{ns}", f"helix.projector.redis.{view}."
    cfg: dict[str, Any] = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 2, "topic_prefix": prefix},
        "memory": {
            "type": "sliding-window",
            "tool_pairs": "split",
            "window_size": window,
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
            "read_timeout": 60,
        },
    }
    proc = start_projector(cfg, tmp_path)
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    await admin.start()
    try:
        async with open_memory(cfg, session_id="s") as mem:
            await mem.add(Message("user", "before"))
            assert [m.content for m in await mem.get()] == ["before"]  # the projector serves the view
            groups = {g[0] for g in await admin.list_consumer_groups()}
            assert group in groups, sorted(g for g in groups if view in g)
            if other_group is not None:  # the default prefix appends nothing
                assert not [g for g in groups if g.startswith(other_group)]
            else:
                assert f"helix.projector.redis.{view}" not in groups

            # Idempotent: a retried send (a new topic's leader not elected yet) must not park it twice.
            producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all", enable_idempotence=True)
            await producer.start()
            try:
                sent = await producer.send_and_wait(topic, UNDECODABLE, key=b"s")
            finally:
                await producer.stop()
            # Every projector of the default prefix parks its own copy (header helix.view): find this view's.
            await wait_for(lambda: _parked_by(kafka_bootstrap, dlq, view, 1), 60, f"a dead letter on {dlq}")
            (parked,) = await _parked(kafka_bootstrap, dlq, view)
            assert (parked.topic, parked.key, parked.value) == (dlq, b"s", UNDECODABLE)
            assert list(parked.headers) == [
                ("helix.source", f"{topic}:{sent.partition}:{sent.offset}".encode()),
                ("helix.view", view.encode()),
                ("helix.error", b"UnknownSchema: not Avro single-object encoding (expected C3 01 and a fingerprint)"),
            ]
            await mem.add(Message("user", "after"))  # nothing blocks behind it
            assert [m.content for m in await mem.get()] == ["before", "after"]
            assert len(await _parked(kafka_bootstrap, dlq, view)) == 1  # once, though the view moved on
        path = tmp_path / "lag.yaml"
        path.write_text(json.dumps(cfg))
        counted = (await lag(str(path))).dead_letters.get(ns)
        assert counted == 1 if own_prefix else counted >= 1  # `helix-es lag` counts it
    finally:
        await admin.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, err = proc.communicate()
        if not own_prefix:  # the view's keys live under the shared default prefix: drop them after the test
            client = aioredis.Redis.from_url(redis_url)
            try:
                keys = [k async for k in client.scan_iter(match=f"helix:memory:*:{view}*", count=1000)]
                await client.delete(f"helix:checkpoint:{view}", *keys)
            finally:
                await client.aclose()
    assert proc.returncode == 0, err  # SIGTERM: drained, left the group, exit 0
    assert "stopped cleanly" in err


async def _parked(bootstrap: str, topic: str, view: str) -> list[Any]:
    """The records `view` parked on a dead-letter topic, read to its end as another program would."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    try:
        tp = TopicPartition(topic, 0)
        if topic not in await consumer.topics():  # not created yet
            return []
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        await consumer.seek_to_beginning(tp)
        records: list[Any] = []
        deadline = Deadline(30, f"{end} records of {topic}")
        while await consumer.position(tp) < end:
            deadline.check()
            records += (await consumer.getmany(tp, timeout_ms=500)).get(tp, [])
    finally:
        await consumer.stop()
    return [r for r in records if r.offset < end and dict(r.headers).get("helix.view") == view.encode()]


async def _parked_by(bootstrap: str, topic: str, view: str, count: int) -> bool:
    return len(await _parked(bootstrap, topic, view)) >= count


def _cli(*args: str, code: str | None = None, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`helix-es ...` in its own process (or `code` run first in it, then the CLI's main)."""
    head = (
        [sys.executable, "-c", code + "\nfrom helix_es.cli import main\nsys.exit(main(sys.argv[1:]))"]
        if code
        else [sys.executable, "-m", "helix_es.cli"]
    )
    return subprocess.run([*head, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env={**os.environ})


def test_project_exits_2_on_a_bad_config(tmp_path: Path, kafka_bootstrap: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        json.dumps(
            {
                "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap},
                "memory": {"type": "sliding-window", "window_size": 0, "store": "redis"},
            }
        )
    )
    out = _cli("project", "--config", str(path))
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().endswith("helix-es: memory.window_size: must be >= 1, got 0")
    path.write_text("memory: {type: conversation, windw: 3}\n")
    out = _cli("project", "--config", str(path))
    assert out.returncode == 2 and "helix-es: memory.windw: unknown key" in out.stderr


# Run in the rebuild's process: once the new target is built, and before readers are switched to it,
# someone else moves the alias (as a second rebuild finishing first would).
MOVE_THE_ALIAS = """
import sys
import redis
import projectors.rebuild as rebuild

URL, ALIAS, TARGETS, ELSEWHERE = sys.argv[1:5]
del sys.argv[1:5]


class Moving(rebuild.Display):
    moved = False

    def __call__(self, status, *, force=False):
        if status.phase == "built" and not Moving.moved:
            Moving.moved = True
            client = redis.Redis.from_url(URL)
            client.set(ALIAS, ELSEWHERE)
            client.sadd(TARGETS, ELSEWHERE)
            client.close()
        super().__call__(status, force=force)


rebuild.Display = Moving
"""


async def test_rebuild_exits_1_when_the_alias_moves_under_it(tmp_path: Path, redis_url: str) -> None:
    prefix, ns = unique("claims"), unique("ns")
    cfg = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "topic_prefix": prefix, "fsync": False},
        "memory": {
            "type": "sliding-window",
            "tool_pairs": "split",
            "window_size": 3,
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
        },
    }
    async with open_memory(cfg, session_id="s") as mem:
        for i in range(5):
            await mem.add(Message("user", f"m{i}"))
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    alias = f"sliding-window-3:{prefix}"  # the view's alias, with the non-default prefix appended
    keys = (f"helix:alias:{alias}", f"helix:targets:{alias}")
    out = _cli(redis_url, *keys, "sliding-window-3@v9", "rebuild", "--config", str(path), code=MOVE_THE_ALIAS)
    assert out.returncode == 1, out.stderr
    assert (
        "helix-es: the alias of sliding-window-3 moved to sliding-window-3@v9 while this rebuild ran: "
        "sliding-window-3@v2 is built but readers were not switched to it"
    ) in out.stderr
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await client.get(keys[0]) == b"sliding-window-3@v9"  # the rebuild did not switch it back
    finally:
        await client.delete(*keys)
        await client.aclose()
    # Without the move the same rebuild switches and exits 0: the exit 1 above was the move.
    out = _cli("rebuild", "--config", str(path))
    assert out.returncode == 0, out.stderr
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert await client.get(keys[0]) == b"sliding-window-3@v2"
    finally:
        await client.delete(*keys)
        await client.aclose()
