"""`helix-es rebuild --group` and `--join`: one rebuild's partitions shared by processes through a consumer group.

Real Kafka, Redis and PostgreSQL; the members are processes of their own (`helix-es rebuild --join`),
standing in for other machines. Each shared rebuild is compared with a clean one-process rebuild of
the same log, and the members' reports show that the partitions really were shared.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any

import asyncpg
import pytest

from helix_es import Message, open_memory
from helix_es.config import load_config
from helix_es.model.errors import ConfigError
from helix_es.model.names import consumer_group, rebuild_group
from helix_es.stores.ports import SessionKey
from helix_es.views.base import View
from helix_es.views.long_term import target_table
from projectors.rebuild import drop, join, rebuild
from tests.conftest import cli, unique
from tests.test_long_term_trgm import trigram_indexes
from tests.test_rebuild import embedded, snapshots, write_config

ROOT = Path(__file__).resolve().parent.parent
SESSIONS = 24
PER_SESSION = 60  # 1,440 events over 6 partitions
CLEARS = sum(1 for i in range(SESSIONS) if str(i).endswith("3"))  # s3, s13, s23 clear once


def kafka_config(kafka_bootstrap: str, prefix: str, memory: dict[str, Any]) -> dict[str, Any]:
    return {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 6, "topic_prefix": prefix},
        "memory": {"consistency": "eventual", **memory},
    }


async def write_history(cfg: dict[str, Any], ns: str, per_session: int = PER_SESSION) -> None:
    """Every session's turns, the sessions side by side (so every partition gets some), a clear here and there."""
    async with open_memory(cfg, session_id="s0") as first:
        mems = [
            first.__class__(first.backend, first.source, ns, f"s{i}", consistency="eventual") for i in range(SESSIONS)
        ]

        async def talk(m: Any) -> None:
            for i in range(per_session):
                if i == per_session // 3 and m.session_id.endswith("3"):
                    await m.clear()
                await m.add(Message("user" if i % 2 else "assistant", f"{m.session_id} turn {i}"))

        await asyncio.gather(*(talk(m) for m in mems))


async def start_member(path: Path, target: str, batch: int) -> asyncio.subprocess.Process:
    """`helix-es rebuild --join` in its own process (another machine, as far as the group can tell)."""
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "helix_es.cli",
        "rebuild",
        "--config",
        str(path),
        "--into",
        target,
        "--join",
        "--json",
        "--batch-size",
        str(batch),
        "--progress",
        "0.1",
        cwd=ROOT,
        env={**os.environ},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def finished_member(proc: asyncio.subprocess.Process) -> dict[str, Any]:
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()
    report: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
    return report


async def long_term_rows(dsn: str, table: str, ns: str) -> list[tuple[Any, ...]]:
    conn = await asyncpg.connect(dsn)
    try:
        rows = await conn.fetch(
            f'SELECT session_id, topic, "partition", "offset", role, content FROM {table} '
            'WHERE namespace = $1 ORDER BY topic, "partition", "offset"',
            ns,
        )
        return [tuple(r) for r in rows]
    finally:
        await conn.close()


async def built(cfg: dict[str, Any], target: str, ns: str, dsn: str) -> Any:
    """What `target` holds: every session's snapshot (session views) or every long-term row."""
    part = load_config(cfg).memory
    if isinstance(part.view, View):
        keys = [SessionKey(ns, f"s{i}") for i in range(SESSIONS)]
        return await snapshots(cfg["memory"]["redis_url"], part.view, target, keys)
    return await long_term_rows(dsn, target_table(part.view.table, part.view.name, target), ns)


VIEWS = {
    "sliding-window-redis": {"type": "sliding-window", "window_size": 7, "store": "redis"},
    "conversation-postgres": {"type": "conversation", "store": "postgres"},
    "long-term-postgres": {"type": "long-term", "store": "postgres"},
}


@pytest.mark.parametrize("kind", sorted(VIEWS))
async def test_members_share_a_rebuild_and_build_what_one_process_builds(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, postgres_dsn: str, kind: str
) -> None:
    ns, prefix, tag = unique("grp"), unique("grp"), unique("g").replace("-", "")
    memory = {**VIEWS[kind], "namespace": ns, "redis_url": redis_url, "dsn": postgres_dsn}
    cfg = kafka_config(kafka_bootstrap, prefix, memory)
    path = write_config(tmp_path, cfg)
    await write_history(cfg, ns)
    name = load_config(cfg).memory.view.name
    shared, alone = f"{name}@{tag}s", f"{name}@{tag}a"
    members = [await start_member(path, shared, 10) for _ in range(2)]
    report = await rebuild(path, into=shared, switch=False, group=True, members=3, batch_size=10)
    reports = [await finished_member(m) for m in members]
    single = await rebuild(path, into=alone, switch=False, workers=1, batch_size=10)
    try:
        total = SESSIONS * PER_SESSION + CLEARS  # the turns and the clears
        assert single.read == total
        assert report.members == 3 and report.read == total
        # Shared for real: each member folded some partitions' records, and the lead did not do them all.
        for member in reports:
            assert member["target"] == shared and member["events"] > 0 and member["partitions"], reports
        assert sum(m["events"] for m in reports) + report.events == single.events  # each event folded once
        assert report.events < single.events
        assert set(reports[0]["partitions"]) != set(reports[1]["partitions"])
        assert await built(cfg, shared, ns, postgres_dsn) == await built(cfg, alone, ns, postgres_dsn)
        assert await built(cfg, shared, ns, postgres_dsn)  # not two empty targets
        view = load_config(cfg).memory.view
        if kind == "long-term-postgres":  # the index every member deferred, built before the report
            assert await trigram_indexes(postgres_dsn, target_table(view.table, view.name, shared)) == 1
    finally:
        for target in (shared, alone):
            await drop(path, target)


async def test_a_member_killed_mid_rebuild_hands_its_partitions_to_the_others(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, postgres_dsn: str
) -> None:
    """The killed member's partitions hold far more than `CAUGHT_UP_LAG` unfolded records, so the lead
    cannot end the shared phase before the group has dealt them to the others and they folded them."""
    ns, prefix, tag = unique("grpk"), unique("grpk"), unique("k").replace("-", "")
    memory = {**VIEWS["sliding-window-redis"], "namespace": ns, "redis_url": redis_url}
    cfg = kafka_config(kafka_bootstrap, prefix, memory)
    path = write_config(tmp_path, cfg)
    per_session = 250  # 6,000 events: a member folding 2 at a time is far from done when it is killed
    await write_history(cfg, ns, per_session)
    name = load_config(cfg).memory.view.name
    shared, alone = f"{name}@{tag}s", f"{name}@{tag}a"
    doomed, survivor = [await start_member(path, shared, 2) for _ in range(2)]
    building = asyncio.ensure_future(rebuild(path, into=shared, switch=False, group=True, members=3, batch_size=2))

    async def folded_some() -> int:
        assert doomed.stderr is not None
        async for line in doomed.stderr:
            found = re.search(rb"building, (\d+) read", line)
            if found and int(found.group(1)) > 0:
                return int(found.group(1))
        raise AssertionError("the member to kill never folded anything")

    done_before_kill = await asyncio.wait_for(folded_some(), 90)
    doomed.send_signal(signal.SIGKILL)
    await doomed.wait()
    report = await asyncio.wait_for(building, 180)
    kept = await finished_member(survivor)
    single = await rebuild(path, into=alone, switch=False, workers=1, batch_size=50)
    try:
        total = SESSIONS * per_session + CLEARS
        assert single.read == total and report.read == total and report.members == 3
        assert 0 < done_before_kill < total // 3 - 1000  # killed mid-way through its share of the partitions
        assert kept["events"] > 0 and kept["partitions"]
        keys = [SessionKey(ns, f"s{i}") for i in range(SESSIONS)]
        view = load_config(cfg).memory.view
        assert isinstance(view, View)
        got = await snapshots(redis_url, view, shared, keys)
        assert got == await snapshots(redis_url, view, alone, keys)
        assert all(snap.applied is not None for snap in got.values())
    finally:
        for target in (shared, alone):
            await drop(path, target)


async def test_group_mode_needs_kafka_and_a_running_rebuild(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    prefix = unique("grpe")
    local = embedded(tmp_path, prefix, type="conversation", store="redis", redis_url=redis_url, namespace="n")
    with pytest.raises(ConfigError, match="Kafka log"):
        await rebuild(local, into="conversation@x", group=True)
    with pytest.raises(ConfigError, match="Kafka log"):
        await join(local, into="conversation@x")
    path = write_config(tmp_path, local)
    code, _, err = await cli("rebuild", "--config", str(path), "--join")
    assert code == 2 and "--into" in err
    code, _, err = await cli("rebuild", "--config", str(path), "--into", "conversation@x", "--join", "--drop-old")
    assert code == 2 and "--drop-old" in err
    code, _, err = await cli("rebuild", "--config", str(path), "--members", "2")
    assert code == 2 and "--group" in err
    # Nobody leads the group: a member gives up instead of writing a target nobody is building.
    on_kafka = write_config(
        tmp_path,
        kafka_config(kafka_bootstrap, prefix, {"type": "conversation", "store": "redis", "redis_url": redis_url}),
        "kafka.yaml",
    )
    from projectors.rebuild import RebuildError

    with pytest.raises(RebuildError, match="no rebuild into conversation@x is running"):
        await join(on_kafka, into="conversation@x", wait=0.5)
    group = rebuild_group("conversation@x", "redis", prefix)
    assert group == f"helix.rebuild.redis.conversation@x.{prefix}" and group != consumer_group("x", "redis", prefix)
