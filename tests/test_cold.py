"""The idle partitions' watcher, a child process: it names partitions that woke, and never outlives its parent."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from helix_es.log.live.cold import ColdWatch
from helix_es.log.port import Partition
from projectors.supervise import transient
from tests.conftest import unique


async def _topic(bootstrap: str, partitions: int) -> str:
    topic = unique("cold")
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    return topic


async def _produce(bootstrap: str, tp: Partition, count: int = 1) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        for i in range(count):
            await producer.send_and_wait(tp.topic, f"r{i}".encode(), partition=tp.partition)
    finally:
        await producer.stop()


async def _woken(watch: ColdWatch, within: float) -> set[Partition]:
    deadline = time.monotonic() + within
    woken: set[Partition] = set()
    while time.monotonic() < deadline and not woken:
        await watch.wait(0.2)
        woken = watch.take()
    return woken


async def test_a_record_wakes_its_partition_and_a_paused_one_waits_for_resume(kafka_bootstrap: str) -> None:
    topic = await _topic(kafka_bootstrap, 3)
    a, b, c = (Partition(topic, p) for p in range(3))
    await _produce(kafka_bootstrap, c, 2)  # below the position it is watched from: not a wake-up
    watch = ColdWatch(kafka_bootstrap, 200)
    await watch.start()
    try:
        await watch.assign({a: 0, b: 0, c: 2}, paused=[b])
        assert await _woken(watch, 1.5) == set()
        await _produce(kafka_bootstrap, a)
        assert await _woken(watch, 15) == {a}
        await _produce(kafka_bootstrap, a)  # a is paused now (woken), b is paused by the parent
        await _produce(kafka_bootstrap, b)
        assert await _woken(watch, 1.5) == set()
        await watch.resume({b: 0})
        assert await _woken(watch, 15) == {b}
        await watch.seek(c, 0)  # sought back over records: they wake it
        assert await _woken(watch, 15) == {c}
    finally:
        await watch.stop()
    assert watch._proc is not None and watch._proc.returncode == 0


async def test_added_partitions_are_watched_and_the_others_keep_their_offsets_and_pauses(kafka_bootstrap: str) -> None:
    topic = await _topic(kafka_bootstrap, 3)
    a, b, c = (Partition(topic, p) for p in range(3))
    await _produce(kafka_bootstrap, a, 2)
    watch = ColdWatch(kafka_bootstrap, 200)
    await watch.start()
    try:
        await watch.assign({a: 2, b: 0}, paused=[b])  # a: from past its records
        await _produce(kafka_bootstrap, b)
        assert await _woken(watch, 1.5) == set()
        await watch.add({c: 0})
        assert await _woken(watch, 1.5) == set()  # a still from offset 2, b still paused
        await _produce(kafka_bootstrap, c)
        assert await _woken(watch, 15) == {c}
        await watch.resume({b: 0})
        assert await _woken(watch, 15) == {b}
    finally:
        await watch.stop()


async def test_the_watcher_names_the_matching_topics_at_once_and_again_when_one_appears(kafka_bootstrap: str) -> None:
    first = await _topic(kafka_bootstrap, 3)
    head = first.rsplit("-", 1)[0]
    seen: list[dict[str, int]] = []
    watch = ColdWatch(kafka_bootstrap, 200, pattern=rf"^{first}$|^{head}-x-", interval=0.2)
    watch.on_topics = seen.append
    await watch.start()
    try:
        deadline = time.monotonic() + 15
        while not seen and time.monotonic() < deadline:
            await watch.wait(0.1)
        assert seen == [{first: 3}] and watch.topics == {first: 3}
        second = f"{head}-x-{unique('t')}"
        admin = AIOKafkaAdminClient(bootstrap_servers=kafka_bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(second, 2, 1), NewTopic(unique("other"), 1, 1)])
        finally:
            await admin.close()
        deadline = time.monotonic() + 15
        while len(seen) < 2 and time.monotonic() < deadline:
            await watch.wait(0.1)
        assert seen[1:] == [{first: 3, second: 2}]  # named once more, the unmatched topic left out
        await asyncio.sleep(0.6)
        assert len(seen) == 2  # nothing changed: nothing said
    finally:
        await watch.stop()


async def test_a_watcher_that_died_fails_the_run_transiently(kafka_bootstrap: str) -> None:
    watch = ColdWatch(kafka_bootstrap, 200)
    await watch.start()
    assert watch._proc is not None
    watch._proc.kill()
    with pytest.raises(ChildProcessError, match="watcher exited with code") as raised:
        for _ in range(50):
            await watch.wait(0.1)
    assert transient(raised.value)  # the projector is started again, with a new watcher
    await watch.stop()


PARENT = """
import asyncio, sys, time
from helix_es.log.live.cold import ColdWatch

async def main():
    watch = ColdWatch(sys.argv[1], 200)
    await watch.start()
    print(watch._proc.pid, flush=True)
    time.sleep(600)

asyncio.run(main())
"""


def test_the_watcher_leaves_when_its_parent_is_killed(kafka_bootstrap: str) -> None:
    parent = subprocess.Popen([sys.executable, "-c", PARENT, kafka_bootstrap], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        os.kill(child, 0)  # running
        parent.send_signal(signal.SIGKILL)
        parent.wait(10)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(child, 0)
            except ProcessLookupError:
                return
            time.sleep(0.1)
        os.kill(child, signal.SIGKILL)
        pytest.fail("the watcher outlived its parent")
    finally:
        parent.kill()
        parent.wait()


def test_ctrl_c_is_left_to_the_parent(kafka_bootstrap: str) -> None:
    async def run() -> None:
        watch = ColdWatch(kafka_bootstrap, 200)
        await watch.start()
        assert watch._proc is not None
        watch._proc.send_signal(signal.SIGINT)  # as a terminal's Ctrl-C reaches the process group
        await asyncio.sleep(1)
        assert watch._proc.returncode is None
        await watch.wait(0.1)  # still there: no failure
        await watch.stop()
        assert watch._proc.returncode == 0

    asyncio.run(run())
