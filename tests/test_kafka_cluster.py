"""The log on a replicated Kafka: the 3-broker KRaft cluster of `scripts/services kafka-cluster up`.

Topics get `replication_factor: 3` with `min.insync.replicas: 2`, so an acked add is on two brokers
and one broker may go. The fault test SIGKILLs the leader of a partition while 20 sessions add, then
starts it again: every add that returned a Position holds its event in the log, exactly once unless
it was retried; adds that raised are retried with their idempotency key and show once in every view;
the projector goes on, and its views equal a clean fold of the log. The cluster is the shared one of
`scripts/services`, never the single broker the other tests use; its nodes are killed and started
through `scripts/services kafka-cluster kill N` and `up`, which know their pids.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError

from helix_es import Message, open_memory
from helix_es.config import load_config, parse_log
from helix_es.log.codec import Codec
from helix_es.log.kafka import KafkaLog, KafkaUnavailable
from helix_es.model import names
from helix_es.model.errors import ConfigError, HelixError
from helix_es.model.events import Event, MessageAdded, Position, Record
from helix_es.projection.factory import open_store
from helix_es.projection.fold import project
from helix_es.projection.idempotency import mark_duplicates
from helix_es.stores.memory.idempotency import MemoryIdempotency
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.views.base import View
from tests.clean_fold import by_partition
from tests.conftest import ROOT, topic_records, unique, wait_for
from tests.test_faults import PARTITIONS, Projector, caught_up, read_log, running

pytestmark = pytest.mark.timeout(300)
SESSIONS = 20
ADD_TIMEOUT = 2.0  # the caller's bound on one add: an add in the outage raises, and is retried


async def services(*args: str, timeout: float = 120) -> str:
    """`scripts/services ...`, its stdout; fails the test with its stderr if it exits non-zero."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        str(ROOT / "scripts" / "services"),
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode == 0, f"scripts/services {' '.join(args)}: exit {proc.returncode}\n{err.decode()}"
    return out.decode()


async def describe(bootstrap: str, topic: str) -> list[dict[str, Any]]:
    """The topic's partitions, as the brokers know them. A new topic reaches each broker's metadata
    in its own time (KRaft propagates it asynchronously): one that does not know it yet answers
    UNKNOWN_TOPIC_OR_PARTITION (3), so ask again for a few seconds."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            (found,) = await admin.describe_topics([topic])
            if found["error_code"] != 3 or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    assert found["error_code"] == 0, found
    return sorted(found["partitions"], key=lambda p: p["partition"])


async def topic_config(bootstrap: str, topic: str, name: str) -> str:
    """One config value of the topic. Like `describe`, a broker that has not got the new topic yet
    answers with an error and no entries, so ask again for a few seconds."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        deadline = asyncio.get_running_loop().time() + 10
        while True:
            (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
            (resource,) = response.to_object()["resources"]
            values = [e["config_value"] for e in resource["config_entries"] if e["config_names"] == name]
            if values or asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.2)
    finally:
        await admin.close()
    assert values, resource
    return str(values[0])


async def leader_of(bootstrap: str, topic: str, partition: int) -> int:
    """The partition's leader (-1: none), asking until a live broker answers."""
    while True:
        try:
            parts = await describe(bootstrap, topic)
        except KafkaError:  # the admin client picked the node that is down
            await asyncio.sleep(0.2)
            continue
        return int(next(p["leader"] for p in parts if p["partition"] == partition))


async def all_in_sync(bootstrap: str, topic: str) -> bool:
    return all(len(p["isr"]) == 3 for p in await describe(bootstrap, topic))


async def test_topics_are_created_with_3_replicas_and_min_insync_2(kafka_cluster: str) -> None:
    """From config: replication_factor 3 gives min.insync.replicas 2; 1 stays 1; an explicit value wins."""
    for replication, insync, want in ((3, None, "2"), (1, None, "1"), (3, 3, "3")):
        log_cfg: dict[str, Any] = {
            "type": "kafka",
            "bootstrap_servers": kafka_cluster,
            "replication_factor": replication,
        }
        if insync is not None:
            log_cfg["min_insync_replicas"] = insync
        config = parse_log(log_cfg, "log")
        assert config.replication_factor == replication and config.min_insync_replicas == insync
        prefix, ns = unique("kr"), unique("ns")
        log = KafkaLog(
            kafka_cluster,
            topic_prefix=prefix,
            partitions=2,
            replication_factor=replication,
            min_insync_replicas=config.min_insync_replicas,
        )
        try:
            await log.append(Event(ns, "s", MessageAdded(Message("user", "hi"))))
        finally:
            await log.close()
        topic = names.topic(ns, prefix)
        assert [len(p["replicas"]) for p in await describe(kafka_cluster, topic)] == [replication] * 2
        assert await topic_config(kafka_cluster, topic, "min.insync.replicas") == want


async def assert_views_are_clean_folds(cfg: dict[str, Any], ns: str) -> list[Record]:
    """Every (session) view of `cfg` equals a clean fold of the log, read raw, retries marked as the
    projector marks them (by idempotency key): each session's state and guard, and the checkpoints.
    Returns the log's records."""
    log = load_config(cfg, agent=0).log
    topic = names.topic(ns, log.topic_prefix)
    records, last = await asyncio.wait_for(read_log(log.bootstrap_servers, log.topic_prefix, topic), 120)
    parts = by_partition(records)
    keys = sorted({SessionKey(ns, r.event.session_id) for r in records}, key=lambda k: k.session_id)
    last_of = {SessionKey(ns, r.event.session_id): r.position.offset for r in records}
    for agent in range(len(cfg["agents"])):
        memory = load_config(cfg, agent=agent).memory
        view = memory.view
        assert isinstance(view, View)
        clean, seen = MemoryStore(), MemoryIdempotency()
        for batch in parts.values():
            await project(view, clean, await mark_duplicates(seen, view.name, batch))
        expected = await clean.load(view, keys)
        store = open_store(memory)
        try:
            stored = await store.load(view, keys)
            assert {p: await store.checkpoint(view, topic, p) for p in parts} == last, view.name
        finally:
            await store.close()
        wrong = [k.session_id for k in keys if stored[k] != expected[k]]
        assert not wrong, f"{view.name} ({memory.store}): {wrong} differ from a clean fold"
        assert all(stored[k].applied == last_of[k] for k in keys), view.name
    return records


async def test_an_add_refused_after_a_leaderless_partition_goes_through_a_new_producer(kafka_cluster: str) -> None:
    """A topic with one replica, its broker killed: the partition has no leader, and an add raises
    KafkaUnavailable after request_timeout_ms (nothing written). aiokafka has counted that batch in
    its sequence, so every later batch there would get OutOfOrderSequenceNumber from the broker, for
    good (aiokafka#1017): KafkaLog retires that producer, and the adds after go through a new one.
    The log holds exactly the adds that returned."""
    prefix, ns = unique("kq"), unique("ns")
    topic = names.topic(ns, prefix)
    log = KafkaLog(
        kafka_cluster,
        topic_prefix=prefix,
        partitions=1,
        replication_factor=1,
        producer_config={"request_timeout_ms": 3000},
    )

    def add(content: str) -> Event:
        return Event(ns, "s", MessageAdded(Message("user", content)))

    try:
        first = await log.append(add("before"))
        node = await leader_of(kafka_cluster, topic, 0)
        try:
            await services("kafka-cluster", "kill", str(node))
            await wait_for(lambda: _leaderless(kafka_cluster, topic), 30, f"{topic}[0] to have no leader")
            with pytest.raises(KafkaUnavailable):
                await asyncio.wait_for(log.append(add("while leaderless")), 30)
        finally:
            await services("kafka-cluster", "up")
        await wait_for(lambda: _leaderless(kafka_cluster, topic, False), 60, f"{topic}[0] to have its leader back")
        after = [await asyncio.wait_for(log.append(add(f"after-{i}")), 30) for i in range(3)]
        assert log.replaced == 1
    finally:
        await log.close()
    assert [p.offset for p in [first, *after]] == [0, 1, 2, 3]
    events = [Codec().decode(r.value) for r in await topic_records(kafka_cluster, topic, 4)]
    contents = [e.payload.message.content for e in events if isinstance(e.payload, MessageAdded)]
    assert contents == ["before", "after-0", "after-1", "after-2"]


async def _leaderless(bootstrap: str, topic: str, want: bool = True) -> bool:
    return (await leader_of(bootstrap, topic, 0) == -1) == want


@pytest.mark.parametrize("bad", [0, 4, -1, True, "2"])
def test_min_insync_replicas_must_be_1_to_the_replication_factor(bad: Any) -> None:
    with pytest.raises(ConfigError) as err:
        parse_log({"type": "kafka", "replication_factor": 3, "min_insync_replicas": bad}, "log")
    assert err.value.field == "log.min_insync_replicas"


@dataclass
class Add:
    content: str
    position: Position
    tries: int  # how many attempts raised before it returned


async def test_partition_leader_killed_under_concurrent_adds(
    kafka_cluster: str, redis_url: str, postgres_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # HELIX_KAFKA_BOOTSTRAP wins over the config's bootstrap_servers: point it at the cluster, for
    # this process (open_memory, the checks) and the projector's.
    monkeypatch.setenv("HELIX_KAFKA_BOOTSTRAP", kafka_cluster)
    prefix, ns = unique("kc"), unique("ns")
    memories = [
        {"type": "conversation", "store": "redis", "redis_url": redis_url},
        {"type": "sliding-window", "window_size": 3, "store": "postgres", "dsn": postgres_dsn},
    ]
    cfg: dict[str, Any] = {
        "log": {
            "type": "kafka",
            "bootstrap_servers": kafka_cluster,
            "replication_factor": 3,
            "partitions": PARTITIONS,
            "topic_prefix": prefix,
        },
        "agents": [
            {"id": f"a{i}", "memory": {"namespace": ns, "read_timeout": 60, **m}} for i, m in enumerate(memories)
        ],
    }
    topic = names.topic(ns, prefix)
    sessions = [f"s{i}" for i in range(SESSIONS)]
    returned: dict[str, list[Add]] = defaultdict(list)
    raised: Counter[str] = Counter()
    latencies: list[float] = []
    stop_adding = asyncio.Event()
    read_waits: list[float] = []

    async def writer(n: int, sid: str) -> None:
        async with open_memory(cfg, session_id=sid, agent=0) as mem:
            await mem.add(Message("user", f"{sid}-warmup"), idempotency_key=f"{sid}-warmup")
            i, reads = 0, []
            while not stop_adding.is_set():
                message, key, tries = Message("user", f"{sid}-{i}"), f"{sid}-{i}", 0
                started = time.monotonic()
                while True:
                    try:
                        if tries and n % 2:
                            # Every other session retries as another process would: a fresh memory, a
                            # new event id, the same key. The others retry on the same memory, which
                            # re-sends the same event (same id).
                            async with open_memory(cfg, session_id=sid, agent=0) as other:
                                position = await asyncio.wait_for(other.add(message, idempotency_key=key), ADD_TIMEOUT)
                        else:
                            position = await asyncio.wait_for(mem.add(message, idempotency_key=key), ADD_TIMEOUT)
                        break
                    except (TimeoutError, HelixError) as exc:
                        tries += 1
                        raised[type(exc).__name__] += 1
                        await asyncio.sleep(0.2)
                latencies.append(time.monotonic() - started)
                returned[sid].append(Add(message.content, position, tries))
                # Beside the adds, not in their way: a read waits for the projector. (Not after an add
                # another memory made: this one does not know its position.)
                if i % 10 == 9 and not (tries and n % 2):
                    reads.append(asyncio.create_task(read_back(mem, message.content)))
                i += 1
            read_waits.extend(await asyncio.gather(*reads))  # before the memory closes

    async def read_back(mem: Any, content: str) -> float:
        """Read-your-writes: the view shows this add, within the read timeout; how long that took."""
        started = time.monotonic()
        assert content in [m.content for m in await mem.get()], content
        return time.monotonic() - started

    def added() -> dict[str, int]:
        return {s: len(returned[s]) for s in sessions}

    async def each_adds(more: int, since: dict[str, int], timeout: float, what: str) -> None:
        await wait_for(
            lambda: asyncio.sleep(0, all(len(returned[s]) >= since[s] + more for s in sessions)), timeout, what
        )

    projector = Projector(cfg, tmp_path)
    with running(projector):
        writers = asyncio.gather(*(writer(n, s) for n, s in enumerate(sessions)))
        try:
            await each_adds(5, dict.fromkeys(sessions, 0), 60, "every writer to add through the cluster")
            (leader,) = [p["leader"] for p in await describe(kafka_cluster, topic) if p["partition"] == 0]
            killed = time.monotonic()
            await services("kafka-cluster", "kill", str(leader))
            # With one broker of three gone, every session keeps adding (min.insync.replicas 2).
            down = added()
            await each_adds(5, down, 60, f"every writer to add while node {leader} is down")
            moved = time.monotonic() - killed
            partitions = await describe(kafka_cluster, topic)
            assert all(p["leader"] != leader and len(p["isr"]) == 2 for p in partitions), partitions
            assert projector.alive(), projector.tail()
            await services("kafka-cluster", "up")
            back = added()
            await each_adds(5, back, 60, f"every writer to add after node {leader} came back")
            await wait_for(lambda: all_in_sync(kafka_cluster, topic), 60, f"node {leader} back in every ISR")
        finally:
            stop_adding.set()
            await services("kafka-cluster", "up")  # the node back, whatever failed (a no-op if it is)
            await asyncio.wait_for(writers, 120)
        assert raised, "no add raised while the leader was away: the retry path went untested"
        await caught_up(projector, 120)
        assert projector.alive(), projector.tail()
        records = await assert_views_are_clean_folds(cfg, ns)

        # Raw, as another program reads it: every returned Position holds its add.
        at = {r.position: r.event for r in records}
        for sid, adds in returned.items():
            for add in adds:
                event = at[add.position]
                assert isinstance(event.payload, MessageAdded), event
                assert (event.session_id, event.payload.message.content) == (sid, add.content)
        copies = Counter(r.event.idempotency_key for r in records)
        ids = Counter(r.event.event_id for r in records)
        once = [a for adds in returned.values() for a in adds if not a.tries]
        retried = [a for adds in returned.values() for a in adds if a.tries]
        # An add that returned at its first try is on the log exactly once; one that raised first may
        # be there twice (a send that failed after it landed, or a fresh memory's retry), never more
        # than once per attempt.
        assert all(copies[a.content] == 1 for a in once), [a for a in once if copies[a.content] != 1][:5]
        assert all(1 <= copies[a.content] <= a.tries + 1 for a in retried)
        assert (
            len(records) == sum(copies.values()) == len(sessions) + len(once) + sum(copies[a.content] for a in retried)
        )
        same_id_twice = sum(n - 1 for n in ids.values())
        # And in the views, each add once, in order.
        for sid in sessions:
            async with open_memory(cfg, session_id=sid, agent=0) as mem:
                got = [m.content for m in await mem.get()]
            assert got == [f"{sid}-warmup"] + [a.content for a in returned[sid]], sid
        assert projector.stop() == 0, projector.tail()
    _, ends = await read_log(kafka_cluster, prefix, topic)
    print(
        f"\nnode {leader} (leader of {topic}[0]) SIGKILLed; every session added again {moved:.1f} s later; "
        f"adds {len(once) + len(retried)} ({len(retried)} retried after {dict(raised)}), log records {len(records)} "
        f"({len(records) - len(sessions) - len(once) - len(retried)} extra copies of retried adds, {same_id_twice} "
        f"of them the same event id), slowest add {max(latencies):.1f} s, {len(read_waits)} reads (slowest "
        f"{max(read_waits):.1f} s), partition ends {ends}"
    )
