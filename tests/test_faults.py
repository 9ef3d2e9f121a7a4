"""Fault tests: a projector SIGKILLed mid-stream, the broker killed under concurrent adds, Redis
flushed and killed, PostgreSQL restarted, poison records from a plain producer.

Every test runs on private Kafka, Redis and PostgreSQL (`tests.faults`), which it kills and
restarts freely; the shared services the other tests use are never touched. While this module
runs, the HELIX_* variables point at the private services, so the config files, `open_memory`
and the `helix-es project` processes use them. Afterwards, each test compares every view with a
clean fold of the log (`assert_views_match_log`): the same state and guard for every session,
the same checkpoints, nothing lost, nothing applied twice. Two more need no services: an
embedded-log add cut short by a timeout, and a projector started before its services.

Randomness is seeded: the seed is printed, and HELIX_FAULT_SEED replays it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from helix_es import Message, open_memory
from helix_es.config import load_config
from helix_es.log.check import Checker
from helix_es.log.codec import Codec, event_to_record
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.model.errors import HelixError
from helix_es.model.events import Event, MemoryCleared, MessageAdded, Position, Record
from projectors.lag import lag
from tests import faults
from tests.clean_fold import compare_views
from tests.conftest import REQUIRE, ROOT, Deadline, unique, wait_for

PARTITIONS = 4
# Private services boot in the module fixture, counted in its first test; each test waits up to 120 s
# several times over. More than the 300 s default.
pytestmark = pytest.mark.timeout(900)
WORDS = ("alpha", "beta", "gamma", "delta", "Oslo", "weather", "tool", "path/to/file.py")
SEED = int(os.environ.get("HELIX_FAULT_SEED") or random.SystemRandom().randrange(1 << 32))


# --- private services ---


@dataclass
class Private:
    kafka: faults.Kafka
    redis: faults.Redis
    postgres: faults.Postgres


def _unavailable(what: str) -> None:
    message = f"fault tests need {what} to start private services"
    if REQUIRE:
        pytest.fail(message + " [HELIX_REQUIRE_SERVICES=1]", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="module")
def private() -> Iterator[Private]:
    libs, pg_bin = faults.kafka_libs(), faults.pg_bin()
    if libs is None:
        _unavailable("java and the Kafka jars scripts/services caches (run `scripts/services up` once)")
    if pg_bin is None or shutil.which("redis-server") is None:
        _unavailable("redis-server and PostgreSQL's server binaries")
    assert libs is not None and pg_bin is not None
    saved = {k: os.environ.get(k) for k in ("HELIX_KAFKA_BOOTSTRAP", "HELIX_REDIS_URL", "HELIX_POSTGRES_DSN")}
    try:
        with faults.started(libs, pg_bin) as (kafka, redis, postgres):
            os.environ.update(
                HELIX_KAFKA_BOOTSTRAP=kafka.bootstrap, HELIX_REDIS_URL=redis.url, HELIX_POSTGRES_DSN=postgres.dsn
            )
            yield Private(kafka, redis, postgres)
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# --- helpers ---


def agents(p: Private, prefix: str, ns: str, memories: list[dict[str, Any]]) -> dict[str, Any]:
    """A config document: one agent per memory, all on namespace `ns`, read timeouts generous."""
    return {
        "log": {
            "type": "kafka",
            "bootstrap_servers": p.kafka.bootstrap,
            "partitions": PARTITIONS,
            "topic_prefix": prefix,
        },
        "agents": [
            {"id": f"a{i}", "memory": {"namespace": ns, "read_timeout": 120, **m}} for i, m in enumerate(memories)
        ],
    }


def redis_views(p: Private) -> list[dict[str, Any]]:
    """Windows show a session's last turns; conversation and long-term keep everything (since a clear)."""
    return [
        {"type": "sliding-window", "window_size": 4, "tool_pairs": "split", "store": "redis", "redis_url": p.redis.url},
        {"type": "token-window", "max_tokens": 40, "store": "redis", "redis_url": p.redis.url},
        {"type": "conversation", "store": "redis", "redis_url": p.redis.url},
        {"type": "long-term", "store": "redis", "redis_url": p.redis.url},
    ]


def postgres_views(p: Private) -> list[dict[str, Any]]:
    return [
        {"type": "conversation", "store": "postgres", "dsn": p.postgres.dsn},
        {"type": "long-term", "store": "postgres", "dsn": p.postgres.dsn},
    ]


class Projector:
    """`helix-es project` in its own process; stderr goes to a file (a pipe would fill and block it)."""

    def __init__(self, cfg: dict[str, Any], tmp_path: Path, env: dict[str, str] | None = None) -> None:
        self.config = tmp_path / f"helix-{unique('cfg')}.yaml"
        self.config.write_text(json.dumps(cfg))
        self.log = tmp_path / "projector.log"
        self.env = {**os.environ} if env is None else env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [
            sys.executable,
            "-m",
            "helix_es.cli",
            "project",
            "--config",
            str(self.config),
            "--progress",
            "2",
            "--session-timeout",
            "1",
        ]
        with self.log.open("ab") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=self.env)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(30)

    def stop(self) -> int:
        """SIGTERM; its exit code (killed after 60 s without one)."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 40) -> str:
        return "\n".join(self.output().splitlines()[-lines:])


@contextlib.contextmanager
def running(projector: Projector) -> Iterator[Projector]:
    projector.start()
    try:
        yield projector
    finally:
        if projector.alive():
            with contextlib.suppress(subprocess.TimeoutExpired):
                projector.stop()


async def caught_up(projector: Projector, timeout: float) -> None:
    """Every view's checkpoints at the log's end, or fail with the projector's last words."""

    async def drained() -> bool:
        if not projector.alive():
            raise AssertionError(f"the projector exited:\n{projector.tail()}")
        return (await asyncio.wait_for(lag(str(projector.config)), 60)).total() == 0

    try:
        await wait_for(drained, timeout, "every view to reach the end of the log")
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{projector.tail()}") from None


async def read_log(bootstrap: str, prefix: str, topic: str) -> tuple[list[Record], dict[int, int]]:
    """Every record of `topic` a projector can use, per partition in offset order, read as another
    program would (plain aiokafka): records that do not decode or break the rules are left out.
    And each partition's last offset."""
    codec = Codec()
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
    await consumer.start()
    records: list[Record] = []
    check = Checker(prefix)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        await consumer.seek_to_beginning(*tps)
        done = {tp for tp in tps if ends[tp] == 0}
        deadline = Deadline(120, f"every record of {topic} up to {ends}")
        while len(done) < len(tps):
            deadline.check(f"partitions read to their end: {sorted(tp.partition for tp in done)}")
            batches = await consumer.getmany(timeout_ms=1000, max_records=20_000)
            for tp, messages in batches.items():
                for m in messages:
                    if m.offset >= ends[tp]:
                        break
                    try:
                        event = codec.decode(m.value)
                        check(event, topic, m.key)
                    except Exception:
                        continue
                    records.append(Record(event, Position(topic, tp.partition, m.offset)))
                if await consumer.position(tp) >= ends[tp]:
                    done.add(tp)
    finally:
        await consumer.stop()
    return records, {tp.partition: end - 1 for tp, end in ends.items()}


async def folded(client: aioredis.Redis, view: str, topic: str) -> int:
    """How many records of `topic` a Redis view's checkpoints cover, summed over partitions."""
    found = await client.hgetall(names.checkpoint_key(view))
    return sum(int(v) + 1 for k, v in found.items() if k.decode().startswith(topic + ":"))


async def assert_views_match_log(cfg: dict[str, Any], ns: str, *, what: str = "") -> list[Record]:
    """Every view of `cfg` equals a clean fold of the log (`tests.clean_fold`). Returns the log's records."""
    config = load_config(cfg, agent=0)
    topic = names.topic(ns, config.log.topic_prefix)
    records, last = await asyncio.wait_for(read_log(config.log.bootstrap_servers, config.log.topic_prefix, topic), 120)
    await compare_views(cfg, ns, records, last, topic, what=what)
    return records


def events(rng: random.Random, ns: str, sessions: list[str], n: int, tag: str, clears: float = 1e-4) -> list[Event]:
    """`n` events over `sessions`: user and assistant turns (varied lengths), now and then a clear
    (rarely: a long-term view is emptied by a clear from any session, so every clear hides what a
    broken projector would have lost or doubled before it)."""
    out = []
    for i in range(n):
        sid = rng.choice(sessions)
        if rng.random() < clears:
            out.append(Event(ns, sid, MemoryCleared()))
            continue
        role = rng.choice(("user", "assistant"))
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
        out.append(Event(ns, sid, MessageAdded(Message(role, f"{tag}-{i} {words}"))))
    return out


async def produce(
    bootstrap: str,
    prefix: str,
    evts: list[Event],
    *,
    chunk: int = 1000,
    pause: float = 0.0,
    log: KafkaLog | None = None,
) -> None:
    """Append `evts` with the product's Kafka log (`log`, else a new one), `chunk` at a time, concurrently
    within a chunk (the producer batches them). The views are compared with the log as written."""
    own = log is None
    log = log or KafkaLog(bootstrap, topic_prefix=prefix, partitions=PARTITIONS)
    try:
        for i in range(0, len(evts), chunk):
            await asyncio.wait_for(asyncio.gather(*(log.append(e) for e in evts[i : i + chunk])), 120)
            if pause:
                await asyncio.sleep(pause)
    finally:
        if own:
            await log.close()


# --- the tests ---


async def test_projector_sigkilled_at_10_random_points_of_a_50k_event_stream(private: Private, tmp_path: Path) -> None:
    """A 50K-event stream goes on the log in 10 slices. After each slice the projector (four views,
    Redis and PostgreSQL) is started and SIGKILLed at a random point of what it had not folded yet
    (when the sliding window's checkpoints reach a random offset in it). Then it is left to finish,
    and every view equals a clean fold of the log."""
    rng = random.Random(SEED)
    print(f"HELIX_FAULT_SEED={SEED}")
    prefix, ns = unique("fk"), unique("ns")
    redis, postgres = redis_views(private), postgres_views(private)
    cfg = agents(private, prefix, ns, [redis[0], redis[1], *postgres])
    stream = events(rng, ns, [f"s{i}" for i in range(400)], 50_000, "k")
    slices = [stream[i : i + 5000] for i in range(0, len(stream), 5000)]
    started = time.monotonic()
    projector = Projector(cfg, tmp_path)
    client = aioredis.Redis.from_url(private.redis.url)
    log = KafkaLog(private.kafka.bootstrap, topic_prefix=prefix, partitions=PARTITIONS)
    topic = names.topic(ns, prefix)

    async def written() -> int:
        return await folded(client, "sliding-window-4", topic)

    kills: list[tuple[int, int]] = []  # (events on the log, events the sliding window had folded)
    try:
        on_log = 0
        for part in slices:
            await produce(private.kafka.bootstrap, prefix, part, chunk=2500, log=log)
            on_log += len(part)
            target = rng.randrange(await written() + 1, on_log)  # a point in what is not folded yet
            projector.start()

            async def reached(target: int = target) -> bool:
                assert projector.alive(), projector.tail()
                return await written() >= target

            await wait_for(reached, 120, f"the sliding window to fold {target} events")
            projector.kill()
            kills.append((on_log, await written()))
        print(f"killed at (events on the log, folded by the sliding window): {kills}")
        projector.start()
        await caught_up(projector, 240)
        assert projector.stop() == 0, projector.tail()
    finally:
        await log.close()
        await client.aclose()
        if projector.alive():
            projector.kill()
    records = await assert_views_match_log(cfg, ns, what=f" [seed {SEED}]")
    assert len(records) == len(stream)
    print(f"done in {time.monotonic() - started:.0f}s")


async def test_broker_killed_and_restarted_during_concurrent_adds(private: Private, tmp_path: Path) -> None:
    """24 sessions add as fast as they can, each add given 1.5 s; the broker is SIGKILLed and
    restarted. Adds that raised (timed out) are retried as they are, the same message again.
    Every returned Position holds its add, every add is on the log once, and in the views."""
    prefix, ns = unique("fb"), unique("ns")
    cfg = agents(
        private,
        prefix,
        ns,
        [
            {"type": "conversation", "store": "postgres", "dsn": private.postgres.dsn},
            {"type": "sliding-window", "window_size": 3, "store": "redis", "redis_url": private.redis.url},
        ],
    )
    sessions = [f"s{i}" for i in range(24)]
    returned: dict[str, list[tuple[str, Position]]] = defaultdict(list)
    raised: Counter[str] = Counter()
    stop_adding = asyncio.Event()

    async def writer(sid: str) -> None:
        async with open_memory(cfg, session_id=sid, agent=0) as mem:
            await mem.add(Message("user", f"{sid}-warmup"))  # the topic exists, the producer is up
            i = 0
            while not stop_adding.is_set():
                message = Message("user", f"{sid}-{i}")
                while True:  # an add that raised is retried as it is: the same message again
                    try:
                        position = await asyncio.wait_for(mem.add(message), 1.5)
                        break
                    except (TimeoutError, HelixError) as exc:
                        raised[type(exc).__name__] += 1
                        await asyncio.sleep(0.2)
                returned[sid].append((message.content, position))
                i += 1

    projector = Projector(cfg, tmp_path)
    with running(projector):
        writers = asyncio.gather(*(writer(s) for s in sessions))
        try:
            await wait_for(
                lambda: asyncio.sleep(0, all(len(returned[s]) >= 5 for s in sessions)),
                60,
                "every writer to add through the broker",
            )
            private.kafka.kill()
            await asyncio.sleep(2)  # the outage: adds time out meanwhile
            private.kafka.launch()  # from this thread: see tests.faults
            await asyncio.to_thread(private.kafka.wait_ready)
            back = {s: len(returned[s]) for s in sessions}
            await wait_for(
                lambda: asyncio.sleep(0, all(len(returned[s]) >= back[s] + 3 for s in sessions)),
                90,
                "every writer to add again after the restart",
            )
        finally:
            stop_adding.set()
            await asyncio.wait_for(writers, 120)
        assert raised, "no add raised while the broker was down: the test did not test anything"
        await caught_up(projector, 120)
        assert projector.alive()
        records = await assert_views_match_log(cfg, ns)
        # Every add that returned a Position is in the log exactly once, at that position.
        at = {r.position: r.event for r in records}
        contents = Counter(r.event.payload.message.content for r in records)  # type: ignore[union-attr]
        for sid, adds in returned.items():
            for content, position in adds:
                event = at[position]
                assert (event.session_id, event.payload.message.content) == (sid, content)  # type: ignore[union-attr]
        assert all(n == 1 for n in contents.values()), [c for c, n in contents.items() if n > 1][:5]
        assert sum(len(a) for a in returned.values()) + len(sessions) == len(records)
        # And in the views: each session's conversation is its adds, in order, once each.
        for sid in sessions[:4]:
            async with open_memory(cfg, session_id=sid, agent=0) as mem:
                got = [m.content for m in await mem.get()]
            assert got == [f"{sid}-warmup"] + [c for c, _ in returned[sid]]
        assert projector.stop() == 0, projector.tail()
    print(f"adds that raised and were retried: {dict(raised)}; adds: {len(records)}")


async def test_redis_flushall_and_restart_while_projectors_run(private: Private, tmp_path: Path) -> None:
    """Four Redis views lose everything three times: FLUSHALL while events flow, FLUSHALL while idle,
    and Redis SIGKILLed and started again empty while events arrive. Each time the projector (still
    the same process) notices its checkpoints are gone, refolds, and the views come back identical."""
    rng = random.Random(SEED + 1)
    prefix, ns = unique("fr"), unique("ns")
    cfg = agents(private, prefix, ns, redis_views(private))
    topic = names.topic(ns, prefix)
    sessions = [f"s{i}" for i in range(60)]
    projector = Projector(cfg, tmp_path)
    flush = aioredis.Redis.from_url(private.redis.url)
    try:
        with running(projector):
            # 1. FLUSHALL mid-stream: the next write of each partition is refused, and it is refolded.
            producing = asyncio.create_task(
                produce(private.kafka.bootstrap, prefix, events(rng, ns, sessions, 6000, "a"), pause=0.3)
            )

            async def some() -> bool:
                return await folded(flush, "sliding-window-4", topic) >= 3000

            await wait_for(some, 60, "the projector to fold 3000 events")
            await flush.flushall()
            await producing
            await produce(private.kafka.bootstrap, prefix, events(rng, ns, sessions, 6000, "a2"), pause=0.3)
            await caught_up(projector, 120)
            await assert_views_match_log(cfg, ns, what=" after a FLUSHALL mid-stream")
            # 2. FLUSHALL with nothing new to write: the periodic check finds the checkpoints gone.
            await flush.flushall()
            await caught_up(projector, 60)
            await assert_views_match_log(cfg, ns, what=" after a FLUSHALL while idle")
            # 3. Redis killed, restarted empty: the projector waits for it, then refolds.
            private.redis.kill()
            more = asyncio.create_task(
                produce(private.kafka.bootstrap, prefix, events(rng, ns, sessions, 2000, "b"), pause=0.5)
            )
            await asyncio.sleep(2)
            assert projector.alive(), projector.tail()
            private.redis.start()
            await more
            await caught_up(projector, 120)
            await assert_views_match_log(cfg, ns, what=" after a Redis restart")
            assert projector.alive() and projector.stop() == 0, projector.tail()
    finally:
        await flush.aclose()
    out = projector.output()
    assert "refolding" in out and "retry" in out, projector.tail()


async def test_postgres_restarted_while_projectors_run(private: Private, tmp_path: Path) -> None:
    """PostgreSQL crashes (immediate shutdown) twice while events keep coming: the projector retries
    its writes until the server is back (it recovers from its WAL), and carries on."""
    rng = random.Random(SEED + 2)
    prefix, ns = unique("fp"), unique("ns")
    cfg = agents(private, prefix, ns, postgres_views(private))
    sessions = [f"s{i}" for i in range(60)]
    projector = Projector(cfg, tmp_path)
    with running(projector):
        await produce(private.kafka.bootstrap, prefix, events(rng, ns, sessions, 4000, "p0"))
        await caught_up(projector, 120)  # connected, and idle
        for i in range(2):
            private.postgres.crash()
            # Events arrive while it is down: the projector's writes fail, and are retried.
            await produce(private.kafka.bootstrap, prefix, events(rng, ns, sessions, 4000, f"p{i + 1}"))
            await asyncio.sleep(1)
            private.postgres.launch()  # from this thread: see tests.faults
            await asyncio.to_thread(private.postgres.wait_ready)
        await caught_up(projector, 120)
        assert projector.alive(), projector.tail()
        await assert_views_match_log(cfg, ns, what=" after PostgreSQL restarts")
        assert projector.stop() == 0, projector.tail()
    assert "retry" in projector.output(), projector.tail()


async def test_poison_records_from_a_plain_producer_are_dead_lettered_and_the_rest_flows(
    private: Private, tmp_path: Path
) -> None:
    rng = random.Random(SEED + 3)
    prefix, ns = unique("fd"), unique("ns")
    cfg = agents(
        private,
        prefix,
        ns,
        [
            {"type": "conversation", "store": "postgres", "dsn": private.postgres.dsn},
            {"type": "sliding-window", "window_size": 3, "store": "redis", "redis_url": private.redis.url},
        ],
    )
    topic = names.topic(ns, prefix)
    codec = Codec()
    sessions = [f"s{i}" for i in range(20)]

    def forged(sid: str, **changes: Any) -> bytes:
        record = event_to_record(Event(changes.pop("namespace", ns), sid, MessageAdded(Message("user", "forged"))))
        record["payload"][1]["message"].update(changes)
        return codec.encode_record(record)

    poison = [
        (b"s1", b"\x00not avro at all"),  # undecodable
        (b"s2", b"\xc3\x01" + b"\x00" * 8 + b"unknown schema"),  # single-object header, unknown fingerprint
        (b"s3", None),  # a tombstone
        (b"s4", forged("s4", role="robot")),  # decodes, fails validation
        (b"s5", forged("s5", namespace="someone-else")),  # claims another namespace
        (b"mallory", forged("s6")),  # the key is not the session
    ]
    projector = Projector(cfg, tmp_path)
    with running(projector):
        await produce(private.kafka.bootstrap, prefix, events(rng, ns, sessions, 500, "d0"))
        producer = AIOKafkaProducer(bootstrap_servers=private.kafka.bootstrap, acks="all")
        await producer.start()
        try:
            for i, (key, value) in enumerate(poison):  # between good events, while the projector runs
                await producer.send_and_wait(topic, value, key=key)
                await produce(private.kafka.bootstrap, prefix, events(rng, ns, sessions, 300, f"d{i + 1}"))
            for p in range(PARTITIONS):  # and last on every partition: the checkpoint moves past it too
                await producer.send_and_wait(topic, b"\x00last", key=b"s0", partition=p)
        finally:
            await producer.stop()
        await caught_up(projector, 120)
        records = await assert_views_match_log(cfg, ns, what=" with poison records in the log")
        assert len(records) == 500 + 300 * len(poison)
        report = await lag(str(projector.config))
        parked = len(poison) + PARTITIONS
        assert report.dead_letters == {ns: 2 * parked}  # one copy per view
        assert projector.stop() == 0, projector.tail()
    assert projector.output().count("cannot be used") == 2 * parked


async def test_an_add_cancelled_by_a_timeout_lands_once_on_the_embedded_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No services: an fsync'd write of the embedded log goes on in its thread after the caller's
    timeout. The same add again gets that write's position; one never retried still reaches the view."""
    from helix_es.log import embedded

    write = embedded.LogFile.append

    def slow(self: embedded.LogFile, data: bytes) -> int:
        time.sleep(0.3)
        return write(self, data)

    monkeypatch.setattr(embedded.LogFile, "append", slow)
    cfg = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": True},
        "memory": {"type": "conversation", "namespace": "ns"},
    }
    async with open_memory(cfg, session_id="s") as mem:
        first = Message("user", "first")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(mem.add(first), 0.05)
        retried = await mem.add(first)  # the retry: waits for the write under way
        file = tmp_path / "log" / f"{names.topic('ns')}.log"
        one = file.stat().st_size  # the first event
        lost = Message("user", "given up on")
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(mem.add(lost), 0.05)
        # It lands meanwhile, in its thread; nobody asks again.
        await wait_for(lambda: asyncio.sleep(0, file.stat().st_size > one), 10, "the abandoned write to land")
        last = await mem.add(Message("user", "last"))
        assert (retried.offset, last.offset) == (0, 2)
        assert [m.content for m in await mem.get()] == ["first", "given up on", "last"]
    log = embedded.EmbeddedLog(tmp_path / "log")
    try:
        assert [r.event.payload.message.content async for r in log.read("ns")] == [  # type: ignore[union-attr]
            "first",
            "given up on",
            "last",
        ]
    finally:
        await log.close()


async def test_a_projector_started_before_its_services_waits_for_them(tmp_path: Path) -> None:
    """No services: nothing answers on the configured ports. `helix-es project` stays up, saying
    it will try again, and SIGTERM still stops it cleanly."""
    dead = [faults.free_port() for _ in range(3)]
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": f"127.0.0.1:{dead[0]}"},
        "agents": [
            {
                "id": "a",
                "memory": {
                    "type": "sliding-window",
                    "window_size": 3,
                    "store": "redis",
                    "redis_url": f"redis://127.0.0.1:{dead[1]}/0",
                },
            },
            {
                "id": "b",
                "memory": {
                    "type": "conversation",
                    "store": "postgres",
                    "dsn": f"postgresql://helix@127.0.0.1:{dead[2]}/helix",
                },
            },
        ],
    }
    env = {k: v for k, v in os.environ.items() if not k.startswith("HELIX_")}  # the file's addresses, not ours
    projector = Projector(cfg, tmp_path, env)
    with running(projector):
        await wait_for(
            lambda: asyncio.sleep(0, projector.output().count("starting again") >= 4),
            60,
            "the projector to say it tries again, twice per view",
        )
        assert projector.alive(), projector.tail()
        assert projector.stop() == 0, projector.tail()
