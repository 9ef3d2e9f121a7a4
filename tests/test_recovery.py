"""Recovery of `helix-es project` on real Kafka and Redis: static group membership (KIP-345).

A projector SIGKILLed and started again at once rejoins under its slot's instance id and serves
read-your-writes within 4 s of its start (without the id, the group waits out the dead member's
session timeout first); under a crash loop the views keep advancing and end equal to a clean fold
of the log; a projector that dies for good has its partitions taken over by the other within the
session timeout. Each test keeps its slot locks in a runtime dir of its own (HELIX_RUNTIME_DIR),
so the slot a restart finds free is the one the killed process held.

Randomness is seeded: the seed is printed, and HELIX_RECOVERY_SEED replays it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from helix_es import Message, open_memory
from helix_es.config import load_config
from helix_es.model import names
from helix_es.model.errors import ConfigError
from projectors import instance
from projectors.lag import lag
from tests.conftest import ROOT, Deadline, members, unique, wait_for
from tests.test_faults import assert_views_match_log, folded

PARTITIONS = 4
SESSION_TIMEOUT = 6.0  # the broker's group.min.session.timeout.ms: the shortest a takeover can wait
SEED = int(os.environ.get("HELIX_RECOVERY_SEED") or random.SystemRandom().randrange(1 << 32))


def doc(kafka: str, redis_url: str, prefix: str, ns: str) -> dict[str, Any]:
    """Two views (two consumer groups, one instance id in each) of one namespace."""
    common = {"namespace": ns, "read_timeout": 30, "store": "redis", "redis_url": redis_url}
    return {
        "log": {"type": "kafka", "bootstrap_servers": kafka, "partitions": PARTITIONS, "topic_prefix": prefix},
        "agents": [
            {"id": "a0", "memory": {"type": "conversation", **common}},
            {"id": "a1", "memory": {"type": "sliding-window", "window_size": 4, **common}},
        ],
    }


def views(cfg: dict[str, Any]) -> list[str]:
    return [load_config(cfg, agent=i).memory.view.name for i in range(len(cfg["agents"]))]


class Projectors:
    """`helix-es project` processes of one config, sharing one runtime dir (their slot locks)."""

    def __init__(self, cfg: dict[str, Any], tmp_path: Path) -> None:
        self.cfg = cfg
        self.path = tmp_path / "helix.yaml"
        self.path.write_text(json.dumps(cfg))  # JSON is YAML
        self.dir = tmp_path
        self.env = {**os.environ, "HELIX_RUNTIME_DIR": str(tmp_path / "run")}
        self.env.pop("HELIX_INSTANCE_ID", None)
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
        log = self.dir / f"projector-{len(self.started)}.log"
        cmd = [sys.executable, "-m", "helix_es.cli", "project", "--config", str(self.path), *extra]
        cmd += ["--batch-size", "200", "--progress", "1", "--session-timeout", str(SESSION_TIMEOUT)]
        with log.open("wb") as err:  # the child keeps its own copy open
            proc = subprocess.Popen(cmd, cwd=ROOT, stderr=err, env=self.env)
        self.started.append((proc, log))
        return proc, log

    def stop_all(self) -> None:
        for proc, _ in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)


def instance_id(log: Path) -> str | None:
    found = re.search(r"group instance id (\S+)", log.read_text(errors="replace"))
    return found.group(1) if found else None


async def checkpoints(redis_url: str, cfg: dict[str, Any], topic: str) -> list[int]:
    """How many records each view's checkpoints cover."""
    client = aioredis.from_url(redis_url)
    try:
        return [await folded(client, view, topic) for view in views(cfg)]
    finally:
        await client.aclose()


@pytest.fixture
def projectors(tmp_path: Path, kafka_bootstrap: str, redis_url: str) -> Any:
    prefix, ns = unique("rec"), unique("rec")
    group = Projectors(doc(kafka_bootstrap, redis_url, prefix, ns), tmp_path)
    yield group
    group.stop_all()


def _ns(p: Projectors) -> str:
    return str(p.cfg["agents"][0]["memory"]["namespace"])


async def test_a_projector_sigkilled_and_restarted_serves_reads_within_4s(projectors: Projectors) -> None:
    cfg = projectors.cfg
    first, first_log = projectors.start()
    async with open_memory(cfg, session_id="s-before", agent="a0") as mem:
        await mem.add(Message("user", "before the kill"))
        assert [m.content for m in await mem.get()] == ["before the kill"]
    first.kill()  # SIGKILL: no LeaveGroup; the group still counts it as a member
    first.wait(30)
    async with open_memory(cfg, session_id="s-after", agent="a0") as mem:
        await mem.add(Message("user", "after the kill"))
        started = time.monotonic()
        second, second_log = projectors.start()
        got = await mem.get()  # read-your-writes: waits for the restarted projector
        took = time.monotonic() - started
    assert [m.content for m in got] == ["after the kill"]
    print(f"restart to first read-your-writes get: {took:.2f}s")
    assert took < 4.0, f"{took:.2f}s from the restart to the first read\n{second_log.read_text()[-3000:]}"
    assert instance_id(second_log) == instance_id(first_log) is not None  # the same slot, so the same member
    second.terminate()
    assert second.wait(30) == 0
    assert "stopped cleanly" in second_log.read_text()


async def test_views_keep_advancing_under_a_crash_loop(projectors: Projectors, redis_url: str) -> None:
    cfg, ns = projectors.cfg, _ns(projectors)
    rng = random.Random(SEED)
    print(f"HELIX_RECOVERY_SEED={SEED}")
    topic = names.topic(ns, cfg["log"]["topic_prefix"])
    sessions = [f"s{i}" for i in range(8)]
    writing = True

    async def write(sid: str) -> None:
        async with open_memory(cfg, session_id=sid, agent="a0") as mem:
            n = 0
            while writing:
                await mem.add(Message("user", f"{sid}-{n}"))
                n += 1
                await asyncio.sleep(0.01)

    writers = [asyncio.create_task(write(s)) for s in sessions]
    samples: list[list[int]] = []  # every view's checkpoints at each kill
    try:
        started = time.monotonic()
        proc, _ = projectors.start()
        await wait_for(lambda: _positive(redis_url, cfg, topic), 30, "the first projector to fold")
        # A restart needs about a second to import and join here; on a slower machine (its start-up
        # measured, this first one) every life and the loop stretch alike, so the test asks the same.
        scale = min(max(1.0, time.monotonic() - started), 4.0)
        samples.append(await checkpoints(redis_url, cfg, topic))
        lives: list[float] = []
        loop_start = time.monotonic()
        while time.monotonic() - loop_start < 16 * scale:
            lives.append(rng.uniform(0.5, 2.0) * scale)
            await asyncio.sleep(lives[-1])
            proc.kill()
            proc.wait(30)
            samples.append(await checkpoints(redis_url, cfg, topic))
            proc, _ = projectors.start()
        grew = [[b > a for a, b in zip(x, y, strict=True)] for x, y in itertools.pairwise(samples)]
        lived = [round(t, 1) for t in lives]
        print(f"{len(lives)} kills; each life and which views grew in it: {list(zip(lived, grew, strict=True))}")
        # A restart needs about a second to import and join, so the shortest lives fold nothing; but
        # every view advances in each half of the loop (with dynamic membership none ever did).
        half = len(samples) // 2
        for first, last in ((samples[0], samples[half]), (samples[half], samples[-1])):
            assert all(b > a for a, b in zip(first, last, strict=True)), f"a view stalled: {samples}"
    finally:
        writing = False
        await asyncio.gather(*writers)
    # The last one started stays up: it must bring every view to the log's end, equal to a clean fold.
    async with open_memory(cfg, session_id=sessions[0], agent="a1") as mem:
        await mem.add(Message("user", "after the loop"))
        assert (await mem.get())[-1].content == "after the loop"  # read-your-writes, no ConsistencyTimeout

    async def caught_up() -> bool:
        report = await lag(str(projectors.path))
        return bool(report.partitions) and report.total() == 0

    await wait_for(caught_up, 60, "every view's checkpoints to reach the end of the log")
    await assert_views_match_log(cfg, ns, what=" after a crash loop")


async def _positive(redis_url: str, cfg: dict[str, Any], topic: str) -> bool:
    return all(await checkpoints(redis_url, cfg, topic))


async def test_a_projector_dead_for_good_has_its_partitions_taken_over(
    projectors: Projectors, kafka_bootstrap: str
) -> None:
    cfg = projectors.cfg
    group = names.consumer_group(views(cfg)[0], "redis", cfg["log"]["topic_prefix"])
    topic = names.topic(_ns(projectors), cfg["log"]["topic_prefix"])
    explicit = unique("pod")  # as a Kubernetes pod name would be given
    kept, kept_log = projectors.start("--instance-id", explicit)
    doomed, doomed_log = projectors.start()  # the host's first free slot

    async def both_hold_partitions() -> bool:
        held = await members(kafka_bootstrap, group, topic, PARTITIONS)
        return len(held) == 2 and all(held.values())

    # The topic exists once a first add made it; the group forms around it.
    async with open_memory(cfg, session_id="warm", agent="a0") as mem:
        await mem.add(Message("user", "warm up"))
    await wait_for(both_hold_partitions, 30, "both projectors to hold partitions")
    doomed_id = instance_id(doomed_log)
    assert instance_id(kept_log) == explicit and doomed_id is not None and doomed_id.endswith("-0")
    held = await members(kafka_bootstrap, group, topic, PARTITIONS)
    [lost] = [parts for member, parts in held.items() if member.startswith(f"{doomed_id}-")]
    doomed.kill()  # for good: nothing takes its slot
    doomed.wait(30)
    killed = time.monotonic()
    reads: list[float] = []
    deadline = Deadline(60, "reads of sessions on the dead projector's partitions")
    sessions_on_lost = 0
    for i in range(16):
        async with open_memory(cfg, session_id=f"t{i}", agent="a0") as mem:
            pos = await mem.add(Message("user", f"t{i}"))
            if pos.partition in lost:
                sessions_on_lost += 1
            assert [m.content for m in await mem.get()] == [f"t{i}"]
            reads.append(time.monotonic() - killed)
        deadline.check()
    assert sessions_on_lost, "no session landed on the dead projector's partitions"
    took = max(reads)
    print(f"takeover: the last read returned {took:.2f}s after the kill (session timeout {SESSION_TIMEOUT}s)")
    # Expiry comes at most a session timeout after its last heartbeat; the survivor hears of the
    # rebalance at its next heartbeat (a third of it), then joins, seeks and folds.
    assert took < SESSION_TIMEOUT * 4 / 3 + 4.0, kept_log.read_text()[-3000:]
    assert kept.poll() is None


async def test_a_projector_stopped_by_sigterm_hands_its_partitions_over_at_once(
    projectors: Projectors, kafka_bootstrap: str
) -> None:
    """A static member's client sends no LeaveGroup by itself; the projector leaves explicitly on a clean stop."""
    cfg = projectors.cfg
    group = names.consumer_group(views(cfg)[0], "redis", cfg["log"]["topic_prefix"])
    topic = names.topic(_ns(projectors), cfg["log"]["topic_prefix"])
    kept, _ = projectors.start()
    leaving, leaving_log = projectors.start()
    async with open_memory(cfg, session_id="warm", agent="a0") as mem:
        await mem.add(Message("user", "warm up"))

    async def held() -> dict[str, set[int]]:
        return await members(kafka_bootstrap, group, topic, PARTITIONS)

    await wait_for(lambda: _count(held, lambda h: len(h) == 2 and all(h.values())), 30, "both to hold partitions")
    asked = time.monotonic()
    leaving.terminate()
    assert leaving.wait(30) == 0, leaving_log.read_text()[-3000:]
    await wait_for(
        lambda: _count(held, lambda h: len(h) == 1 and len(next(iter(h.values()))) == PARTITIONS),
        30,
        "the other projector to hold every partition",
    )
    took = time.monotonic() - asked
    print(f"handover after SIGTERM: {took:.2f}s (session timeout {SESSION_TIMEOUT}s)")
    # Without the explicit leave, the group would keep the partitions for the whole session timeout.
    assert took < SESSION_TIMEOUT, took
    assert kept.poll() is None


async def _count(get: Any, ok: Any) -> bool:
    return bool(ok(await get()))


def test_instance_slots_are_stable_and_never_shared(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(instance.ENV_ID, raising=False)
    first, second = instance.claim(directory=tmp_path), instance.claim(directory=tmp_path)
    assert first.id.endswith("-0") and second.id.endswith("-1") and first.id[:-2] == second.id[:-2]
    first.release()  # as the kernel does for a process that died, SIGKILL included
    again = instance.claim(directory=tmp_path)
    assert again.id == first.id
    again.release()
    second.release()
    assert instance.claim("pod-7", directory=tmp_path).id == "pod-7"  # the flag wins
    monkeypatch.setenv(instance.ENV_ID, "pod-8")
    assert instance.claim(directory=tmp_path).id == "pod-8"  # then the environment
    assert instance.claim("pod-9", directory=tmp_path).id == "pod-9"
    with pytest.raises(ConfigError, match="instance-id"):
        instance.claim("no spaces")
