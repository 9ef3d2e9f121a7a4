"""Every benchmark in one run, each figure next to its anchor measured in the same run.

    python bench/all.py [--quick] [--only SECTION,...] [--out DIR] [--keep]

Needs HELIX_KAFKA_BOOTSTRAP, HELIX_REDIS_URL and HELIX_POSTGRES_DSN (eval "$(scripts/services up)")
and the `bench` extra (matplotlib). Writes `results.md` (the table, the machine, the command) and
`latency.png` (p50/p90/p99 of every latency figure) into `--out` (default `bench/`; `bench/quick/`
with `--quick`, so a smoke run never overwrites the real figures). Progress goes to stderr.
A target the table shows missed is a `MISSED:` line on stderr and exit status 1, as a failed
section is (the scripts it runs exit 3 on a missed target, after their figures).

- spine: a `helix-es project` process folds a sliding window of 30 into Redis. Add through Kafka
  next to a raw aiokafka `send_and_wait` with the same settings (acks=all, idempotent); window
  `get` of sessions with 30, 1,000 and 100,000 messages of history next to a raw redis-py
  `LRANGE` of the same key; add-to-visible (add, then a read-your-writes get) next to a raw
  aiokafka produce-to-consume. Histories are seeded with pre-encoded events in big batches.
- throughput: adds/s from one process, many sessions at once (`asyncio.gather`, each session
  adding in turn), next to raw aiokafka `send_and_wait` from as many tasks; no projector reads it.
- long-term: `search` over 100,000 rows in Postgres (COPY-seeded), next to the same SQL on asyncpg.
- vector: `bench/vector.py` (top-5 over 100,000 x 384), memory and Postgres stores.
- rebuild: `bench/rebuild.py --views window,token-window,conversation-pg,long-term,long-term-pg --log kafka
  --batch-size 20000` (500,000 events), next to raw fastavro.

The scale sections run a standalone script each, in its own process, and read its `--json`:

- service: `bench/service.py` (1, then 200 sessions x 10 turns x 3 rounds): a real `helix-es serve`
  over HTTP (Kafka log, sliding window in Redis, a projector folding it), each turn an add then a
  read-your-writes get, add and get p50/p99 and turns/s next to the in-process
  SessionMemoryManager doing the same turns on the same log and store (targets: HTTP p50 <= 2x
  the in-process p50, no errors; at 1 and at 200 sessions, the HTTP add less a bare round trip
  <= 1.2x the in-process add).
- redis-cluster: `bench/redis_cluster.py` (a projector's fold into Redis, events/s, and the guarded
  session read of `get`, p50/p99): a 3-master Redis Cluster next to one Redis server, rounds
  interleaved. Needs HELIX_REDIS_CLUSTER_URL (`scripts/services redis-cluster up`); no target.
- tenants: `bench/tenants.py` (1,000 namespaces x 6 partitions, one projector, one new namespace
  a second for 60 s): a new namespace's first add visible (p50 <= 1.5 s) next to a raw aiokafka
  topic creation and first produce; existing namespaces' add-to-visible while they appear (p99
  <= 50 ms) next to raw produce-to-consume; the projector's idle CPU and memory.
- trgm: `bench/long_term.py` at 100,000 and 1,000,000 rows: `search` through the pg_trgm GIN
  index (p50 <= 5 ms at 1M) next to the same SELECT as a plain ILIKE scan.
- pgvector: `bench/vector.py --postgres --no-memory` at 100,000 and 1,000,000 x 384: HNSW top-5
  (p50 <= 10 ms with recall@10 >= 0.95 at 1M) next to exact numpy search, build time and index size.
  At 1M the graph is about 2 GB: its p50 depends on Postgres' shared_buffers (noted in the results;
  HELIX_POSTGRES_SHARED_BUFFERS for a server `scripts/services up` starts).

Duration, on 2 cores: the first five sections about 3 minutes; service about 2; redis-cluster about a minute;
tenants about 5; trgm about 10 (at 1M: the COPY and index build 3-4 min, then 120 plain scans of
about a second or more each); pgvector 20-40 (at 1M: fill, then an HNSW build of 15-35 min). The
whole default run: about an hour. `--quick`: a few minutes.

Everything it creates (topics, keys, rows, tables, databases) is deleted at the end, except with
`--keep`: the pgvector databases and pg_trgm tables stay, and a later run reuses them (no fill, no
index build). One that already exists when a run starts (an earlier `--keep`, or the script run
alone with `--keep`) is reused and left in place.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import random
import re
import shlex
import statistics
import subprocess
import sys
import time
import traceback
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import spine  # noqa: E402
import vector  # noqa: E402
from cli import MISSED_EXIT, missed  # noqa: E402

from helix_es import Message, load_config, open_memory  # noqa: E402
from helix_es.log.codec import Codec  # noqa: E402
from helix_es.model import names  # noqa: E402
from helix_es.model.events import Event, MessageAdded  # noqa: E402

SECTIONS = (
    "spine",
    "throughput",
    "long-term",
    "vector",
    "rebuild",
    "service",
    "redis-cluster",
    "tenants",
    "trgm",
    "pgvector",
)
WINDOW = spine.WINDOW


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Size:
    samples: int  # per latency figure
    histories: tuple[int, ...]
    sessions: int  # concurrent sessions for adds/s
    adds_per_session: int
    rounds: int  # adds/s rounds (anchor and helix-es alternate)
    long_term_rows: int
    queries: int
    vectors: int
    rebuild_events: int
    cluster_events: int  # per round and target
    cluster_rounds: int
    trgm_rows: tuple[int, ...]
    trgm_queries: int  # rare-term queries per size (the plain scan is the slow part)
    pgvector_rows: tuple[int, ...]
    tenants: tuple[int, int, float, int]  # namespaces, partitions each, seconds of churn, sessions
    service: tuple[int, int, int]  # sessions, turns, rounds


FULL = Size(
    2000,
    (30, 1_000, 100_000),
    200,
    250,
    3,
    100_000,
    300,
    100_000,
    500_000,
    cluster_events=20_000,
    cluster_rounds=3,
    trgm_rows=(100_000, 1_000_000),
    trgm_queries=100,
    pgvector_rows=(100_000, 1_000_000),
    tenants=(1_000, 6, 60.0, 20),
    service=(200, 10, 3),
)
QUICK = Size(
    300,
    (30, 1_000, 10_000),
    100,
    100,
    2,
    10_000,
    60,
    10_000,
    20_000,
    cluster_events=2_000,
    cluster_rounds=2,
    trgm_rows=(10_000, 20_000),
    trgm_queries=30,
    pgvector_rows=(5_000, 10_000),
    tenants=(50, 2, 10.0, 5),
    service=(50, 5, 2),
)


@dataclass
class Row:
    figure: str
    value: float | None
    unit: str
    anchor: str = ""
    anchor_value: float | None = None
    target: str = ""
    met: bool | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.value is None or not self.anchor_value:
            return None
        return self.value / self.anchor_value


@dataclass
class Run:
    size: Size
    bootstrap: str
    redis_url: str
    dsn: str
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:8])
    rows: list[Row] = field(default_factory=list)
    series: dict[str, list[float]] = field(default_factory=dict)  # latency samples, seconds
    quantiles: dict[str, dict[str, float]] = field(default_factory=dict)  # ms, for figures without samples
    details: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)  # Postgres tables to drop at the end
    keep: bool = False  # the scale sections' pgvector databases and pg_trgm tables stay for a later run

    @property
    def prefix(self) -> str:
        """Every topic of the run: its own projector consumer groups, never another engineer's."""
        return f"bench-{self.run_id}"


def pct(samples: list[float], q: float) -> float:
    return spine.pct(samples, q)


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "ms":
        if value >= 1000:
            return f"{value:,.0f} ms"
        return f"{value:.3f} ms" if value < 1 else f"{value:.2f} ms"
    if unit == "/s":
        return f"{value:,.0f}/s"
    if unit == "x":
        return f"{value:.2f}x"
    if unit == "s":
        return f"{value:,.1f} s"
    if unit == "MB":
        return f"{value:,.1f} MB" if value < 10 else f"{value:,.0f} MB"
    if unit == "% of a core":
        return f"{value:.1f}% of a core"
    if unit == "recall":
        return f"{value:.3f}"
    return f"{value:g} {unit}".strip()


async def interleaved(
    ops: list[tuple[str, Callable[[int], Awaitable[Any]]]], n: int, warmup: int = 20
) -> dict[str, list[float]]:
    """Time each op `n` times, one call of each in turn (order reversed every other turn), so the
    machine's drift and other processes' bursts hit value and anchor alike. Ops get 0 .. warmup + n - 1."""
    out: dict[str, list[float]] = {name: [] for name, _ in ops}
    for i in range(warmup + n):
        for name, op in ops if i % 2 else ops[::-1]:
            t = time.perf_counter()
            await op(i)
            took = time.perf_counter() - t
            if i >= warmup:
                out[name].append(took)
    return out


# --- spine: add, window get at several history lengths, add-to-visible ---


async def seed_history(run: Run, topic: str, sessions: dict[str, int]) -> float:
    """Append `count` events per session with one batching producer; returns events/s."""
    from aiokafka import AIOKafkaProducer

    codec = Codec()
    producer = AIOKafkaProducer(
        bootstrap_servers=run.bootstrap, acks="all", enable_idempotence=True, linger_ms=20, max_batch_size=1 << 19
    )
    await producer.start()
    total = sum(sessions.values())
    started = time.perf_counter()
    try:
        pending = []
        for sid, count in sessions.items():
            key = sid.encode()
            ns = names.namespace_of(topic, run.prefix)
            for i in range(count):
                data = codec.encode(Event(ns, sid, MessageAdded(spine.message(i))))
                pending.append(await producer.send(topic, data, key=key))
                if len(pending) >= 20_000:
                    await asyncio.gather(*pending)
                    pending = []
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return total / (time.perf_counter() - started)


async def anchor_visible(run: Run, topic: str, n: int) -> list[float]:
    """Raw aiokafka: produce (acks=all) until a consumer configured as the projector's has the record."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    producer = AIOKafkaProducer(bootstrap_servers=run.bootstrap, acks="all", enable_idempotence=True, linger_ms=0)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=run.bootstrap,
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    await producer.start()
    await consumer.start()
    tp = TopicPartition(topic, 0)
    consumer.assign([tp])
    await consumer.seek_to_end(tp)
    arrived: dict[bytes, float] = {}
    waiting: dict[bytes, asyncio.Future[None]] = {}

    async def consume() -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=200)
            now = time.perf_counter()
            for msgs in batches.values():
                for m in msgs:
                    arrived[m.value] = now
                    fut = waiting.pop(m.value, None)
                    if fut is not None and not fut.done():
                        fut.set_result(None)

    task = asyncio.create_task(consume())
    await asyncio.sleep(0.5)  # the consumer's first fetch is in flight

    async def one(i: int) -> None:
        payload = f"visible-{i}-{uuid.uuid4().hex}".encode().ljust(200, b".")
        fut = asyncio.get_running_loop().create_future()
        waiting[payload] = fut
        await producer.send_and_wait(topic, payload, key=b"raw-anchor", partition=0)
        await asyncio.wait_for(fut, 30)

    try:
        return await spine.timed(n, one, warmup=20)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await consumer.stop()
        await producer.stop()


async def run_spine(run: Run) -> None:
    import redis.asyncio as aioredis
    from aiokafka import AIOKafkaProducer

    from helix_es.log.kafka import KafkaLog

    size = run.size
    ns = f"spine-{run.run_id}"
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": run.bootstrap, "partitions": 6, "topic_prefix": run.prefix},
        "memory": {
            "type": "sliding-window",
            "window_size": WINDOW,
            "store": "redis",
            "redis_url": run.redis_url,
            "namespace": ns,
            "read_timeout": 300,
        },
    }
    log = KafkaLog(run.bootstrap, partitions=6, topic_prefix=run.prefix)
    topic = await log.ensure_topic(ns)  # exists before the projector subscribes
    anchor_log = KafkaLog(run.bootstrap, partitions=1, topic_prefix=run.prefix + "-anchor")
    anchor_topic = await anchor_log.ensure_topic(ns)
    await anchor_log.close()
    await log.close()
    say(f"spine: projector for {topic} (sliding window of {WINDOW} in Redis)")
    projector = spine.start_projector(cfg)
    client = aioredis.Redis.from_url(run.redis_url)
    try:
        histories = {f"h{n}": n for n in size.histories}
        say(f"spine: seeding histories {', '.join(f'{n:,}' for n in size.histories)} with a batching producer")
        rate = await seed_history(run, topic, {sid: n - 1 for sid, n in histories.items()})
        run.details.append(
            f"History seeded at {rate:,.0f} events/s (pre-encoded, one batching producer); the last "
            "message of each history went through `add`, and `get` waited until it was visible."
        )
        async with AsyncExitStack() as stack:
            mems = {sid: await stack.enter_async_context(open_memory(cfg, session_id=sid)) for sid in histories}
            t = time.perf_counter()
            for sid, n in histories.items():
                mem = mems[sid]
                await mem.add(spine.message(n - 1))
                got = await mem.get()  # read-your-writes: waits until the projector folded the whole history
                assert len(got) == min(n, WINDOW) and got[-1].content == spine.message(n - 1).content
            say(
                f"spine: projector caught up with {sum(histories.values()):,} events "
                f"({time.perf_counter() - t:.1f}s after seeding)"
            )
            view = load_config(cfg).memory.view.name  # the default keeps tool exchanges whole: ...-pairs
            keys = {sid: names.session_key(ns, sid, view) for sid in histories}
            for sid, key in keys.items():
                assert await client.llen(key) == min(histories[sid], WINDOW), f"{key} is not the view's list"

            mem = await stack.enter_async_context(open_memory(cfg, session_id="bench"))
            for i in range(WINDOW * 2):
                await mem.add(spine.message(i))
            assert len(await mem.get()) == WINDOW

            say(f"spine: add vs raw produce, {size.samples} each")
            raw = AIOKafkaProducer(bootstrap_servers=run.bootstrap, acks="all", enable_idempotence=True, linger_ms=0)
            await raw.start()
            payload = os.urandom(len(Codec().encode(Event(ns, "bench", MessageAdded(spine.message(0))))))
            try:
                got = await interleaved(
                    [
                        ("raw produce", lambda i: raw.send_and_wait(anchor_topic, payload, key=b"raw-anchor")),
                        ("add", lambda i: mem.add(spine.message(i))),
                    ],
                    size.samples,
                )
            finally:
                await raw.stop()
            run.series.update(got)
            await mem.get()  # caught up: from here `get` is one round trip
            row_add(run, got["add"], got["raw produce"])

            say(f"spine: window get at {len(histories)} history lengths vs raw LRANGE, {size.samples} each")
            ops: list[tuple[str, Callable[[int], Awaitable[Any]]]] = []
            for sid, n in histories.items():
                ops.append((f"raw LRANGE {n:,}", lambda i, key=keys[sid]: client.lrange(key, 0, -1)))
                ops.append((f"get {n:,}", lambda i, m=mems[sid]: m.get()))
            got = await interleaved(ops, size.samples)
            run.series.update(got)
            row_get(run, histories, got)

            visible_n = max(100, size.samples // 4)
            say(f"spine: add-to-visible, {visible_n} samples, and raw produce-to-consume")

            async def add_then_get(i: int) -> None:
                msg = spine.message(i)
                await mem.add(msg)
                seen = await mem.get()
                assert seen[-1].content == msg.content

            async def keyed_add_then_get(i: int) -> None:
                msg = spine.message(i)
                await mem.add(msg, idempotency_key=f"req-{run.run_id}-{i}")
                seen = await mem.get()
                assert seen[-1].content == msg.content

            # Plain and keyed in turn: a key costs the projector one claim (a round trip) per batch.
            both = await interleaved([("plain", add_then_get), ("keyed", keyed_add_then_get)], visible_n)
            visible = both["plain"]
            raw_visible = await anchor_visible(run, anchor_topic, visible_n)
            run.series["add-to-visible"], run.series["raw produce-to-consume"] = visible, raw_visible
            for q, label, target in ((0.5, "p50", 10.0), (0.99, "p99", 50.0)):
                run.rows.append(
                    Row(
                        f"Add-to-visible {label} (add, then read-your-writes get; projector in its own process)",
                        pct(visible, q),
                        "ms",
                        f"raw aiokafka produce-to-consume {label}",
                        pct(raw_visible, q),
                        f"<= {target:g} ms",
                        pct(visible, q) <= target,
                    )
                )
            run.series["add-to-visible, idempotency key"] = both["keyed"]
            run.rows.append(
                Row(
                    "Add-to-visible p50 with an idempotency key (interleaved with the plain adds above)",
                    pct(both["keyed"], 0.5),
                    "ms",
                    "the same without a key, p50",
                    pct(visible, 0.5),
                    "",
                    None,
                )
            )
    finally:
        await client.aclose()
        spine.stop_projector(projector)


def row_add(run: Run, add: list[float], raw: list[float]) -> None:
    run.rows.append(
        Row(
            "Add through Kafka p50",
            pct(add, 0.5),
            "ms",
            "raw aiokafka send_and_wait p50 (acks=all, idempotent)",
            pct(raw, 0.5),
            "<= 2 ms",
            pct(add, 0.5) <= 2,
        )
    )
    run.rows.append(
        Row("Add through Kafka p99", pct(add, 0.99), "ms", "raw aiokafka send_and_wait p99", pct(raw, 0.99))
    )


def row_get(run: Run, histories: dict[str, int], got: dict[str, list[float]]) -> None:
    for n in histories.values():
        get, lrange = pct(got[f"get {n:,}"], 0.5), pct(got[f"raw LRANGE {n:,}"], 0.5)
        run.rows.append(
            Row(
                f"Window get p50, history of {n:,} messages (window {WINDOW})",
                get,
                "ms",
                f"raw redis-py LRANGE of the same {min(n, WINDOW)} entries",
                lrange,
                "<= 1.2x anchor",
                get <= 1.2 * lrange,
            )
        )
    first, last = min(histories.values()), max(histories.values())
    flat = pct(got[f"get {last:,}"], 0.5) / pct(got[f"get {first:,}"], 0.5)
    run.rows.append(
        Row(
            f"Window get p50 at {last:,} / at {first:,} messages of history",
            flat,
            "x",
            target="flat: <= 1.2x",
            met=flat <= 1.2,
        )
    )


# --- throughput: adds/s from one process ---


async def run_throughput(run: Run) -> None:
    from aiokafka import AIOKafkaProducer

    from helix_es.log.kafka import KafkaLog

    size = run.size
    ns = f"adds-{run.run_id}"
    prefix = run.prefix + "-adds"  # no projector subscribes to it: the write path alone
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": run.bootstrap, "partitions": 6, "topic_prefix": prefix},
        "memory": {
            "type": "sliding-window",
            "window_size": WINDOW,
            "store": "redis",
            "redis_url": run.redis_url,
            "namespace": ns,
        },
    }
    log = KafkaLog(run.bootstrap, partitions=6, topic_prefix=prefix)
    await log.ensure_topic(ns)
    await log.close()
    anchor_log = KafkaLog(run.bootstrap, partitions=6, topic_prefix=prefix + "-anchor")
    anchor_topic = await anchor_log.ensure_topic(ns)
    await anchor_log.close()
    await asyncio.sleep(1)  # leaders elected before the first timed send
    msg = spine.message(7)
    payload = os.urandom(len(Codec().encode(Event(ns, "s0", MessageAdded(msg)))))
    total = size.sessions * size.adds_per_session
    say(
        f"throughput: {size.rounds} rounds of {size.sessions} sessions x {size.adds_per_session} adds, "
        f"and raw aiokafka from {size.sessions} tasks"
    )
    # The anchor uses what KafkaLog gives its producer, so it differs from add only by helix-es.
    raw = AIOKafkaProducer(
        bootstrap_servers=run.bootstrap, acks="all", enable_idempotence=True, linger_ms=0, max_batch_size=256 * 1024
    )
    await raw.start()
    helix_rates, raw_rates, cpu, raw_cpu = [], [], [], []
    try:
        async with AsyncExitStack() as stack:
            mems = [await stack.enter_async_context(open_memory(cfg, session_id=f"s{i}")) for i in range(size.sessions)]
            await asyncio.gather(*(m.add(msg) for m in mems))  # warm: producer started, metadata known
            await asyncio.gather(
                *(raw.send_and_wait(anchor_topic, payload, key=f"s{i}".encode()) for i in range(size.sessions))
            )

            async def session(m: Any) -> None:
                for _ in range(size.adds_per_session):
                    await m.add(msg)

            async def raw_task(key: bytes) -> None:
                for _ in range(size.adds_per_session):
                    await raw.send_and_wait(anchor_topic, payload, key=key)

            for r in range(size.rounds):
                t, c = time.perf_counter(), time.process_time()
                await asyncio.gather(*(raw_task(f"s{i}".encode()) for i in range(size.sessions)))
                raw_rates.append(total / (time.perf_counter() - t))
                raw_cpu.append((time.process_time() - c) / total * 1e6)
                t, c = time.perf_counter(), time.process_time()
                await asyncio.gather(*(session(m) for m in mems))
                helix_rates.append(total / (time.perf_counter() - t))
                cpu.append((time.process_time() - c) / total * 1e6)
                say(
                    f"throughput: round {r + 1}: add {helix_rates[-1]:,.0f}/s ({cpu[-1]:.1f} us CPU per add), "
                    f"raw {raw_rates[-1]:,.0f}/s ({raw_cpu[-1]:.1f} us)"
                )
    finally:
        await raw.stop()
    value, anchor = statistics.median(helix_rates), statistics.median(raw_rates)
    run.rows.append(
        Row(
            f"Adds/s, one process, {size.sessions} concurrent sessions (median of {size.rounds} rounds)",
            value,
            "/s",
            f"raw aiokafka send_and_wait from {size.sessions} tasks, same producer settings",
            anchor,
            ">= 20,000/s",
            value >= 20_000,
        )
    )
    run.details.append(
        f"Adds/s: {size.sessions} sessions x {size.adds_per_session} sequential adds each, all at once, on a topic of "
        f"6 partitions no projector reads; rounds {', '.join(f'{r:,.0f}' for r in helix_rates)} adds/s "
        f"(raw {', '.join(f'{r:,.0f}' for r in raw_rates)}); this process spent {statistics.median(cpu):.1f} us of CPU "
        f"per add, {statistics.median(raw_cpu):.1f} us per raw send (medians; the broker shares the cores)."
    )


# --- long-term search over rows in Postgres ---


async def run_long_term(run: Run) -> None:
    import asyncpg

    from helix_es.projection.long_term import LongTermRows
    from helix_es.stores.postgres.rows import PostgresRows
    from helix_es.views.long_term_rows import tables

    size = run.size
    ns = f"lt-{run.run_id}"
    table = f"bench_long_term_{run.run_id}"
    store = LongTermRows(PostgresRows(run.dsn, f"long-term-{table}", tables(table)), table)
    await store.rows(ns)  # its tables and indexes, as the view makes them
    await store.close()
    run.tables += [table, f"{table}_retracted"]
    topic = names.topic(ns, run.prefix)
    rng = random.Random(5)
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    words = ["flight", "hotel", "invoice", "meeting", "passport", "train", "budget", "dentist", "weather", "visa"]

    def row(i: int) -> tuple[Any, ...]:
        role = "user" if i % 2 else "assistant"
        m = Message(
            role,
            f"turn {i}: about the {words[i % len(words)]}, " + "words of a typical chat message " * 2 + f"ref-{i:06d}",
        )
        return (ns, t0 + timedelta(microseconds=i), topic, i % 6, i // 6, f"s{i % 500}", role, m.content, m.to_json())

    say(f"long-term: COPY {size.long_term_rows:,} rows into {table}")
    conn = await asyncpg.connect(run.dsn)
    try:
        t = time.perf_counter()
        await conn.copy_records_to_table(
            table,
            records=[row(i) for i in range(size.long_term_rows)],
            columns=[
                "namespace",
                "created_at",
                "topic",
                "partition",
                "offset",
                "session_id",
                "role",
                "content",
                "message",
            ],
        )
        await conn.execute(f'ANALYZE "{table}"')
        seeded = time.perf_counter() - t
        cfg = {
            "log": {"type": "kafka", "bootstrap_servers": run.bootstrap, "topic_prefix": run.prefix},
            "memory": {"type": "long-term", "store": "postgres", "dsn": run.dsn, "table": table, "namespace": ns},
        }
        raw_sql = (
            f"SELECT message::text FROM \"{table}\" WHERE namespace = $1 AND content ILIKE $2 ESCAPE E'\\\\' "
            'ORDER BY created_at, topic, partition, "offset" LIMIT 5'
        )
        # A term in one row at a random place: the scan in time order reads half the namespace on average.
        terms = [f"ref-{rng.randrange(size.long_term_rows):06d}" for _ in range(size.queries * 3 + 100)]
        async with open_memory(cfg, session_id="reader") as mem:
            assert [m.content[-10:] for m in await mem.search(terms[0], 5)] == [terms[0]]
            say(f"long-term: search vs raw SQL, {size.queries} queries each")
            got = await interleaved(
                [
                    ("raw SQL long-term", lambda i: conn.fetch(raw_sql, ns, f"%{terms[i]}%")),
                    ("long-term search", lambda i: mem.search(terms[i], 5)),
                ],
                size.queries,
            )
    finally:
        await conn.close()
    run.series.update(got)
    for q, label in ((0.5, "p50"), (0.99, "p99")):
        run.rows.append(
            Row(
                f"Long-term search {label}, {size.long_term_rows:,} rows in Postgres (1 match at a random place)",
                pct(got["long-term search"], q),
                "ms",
                f"the same SELECT ... ILIKE on asyncpg, {label}",
                pct(got["raw SQL long-term"], q),
            )
        )
    run.details.append(
        f"Long-term: {size.long_term_rows:,} rows COPY-seeded and analysed in {seeded:.1f}s; "
        "`search` is `content ILIKE '%q%'` in time order, LIMIT 5, with the pg_trgm GIN index "
        "(bench/long_term.py sets it beside the plain scan)."
    )


# --- vector: bench/vector.py ---


async def run_vector(run: Run) -> None:
    size = run.size
    say(f"vector: top-5 over {size.vectors:,} x 384, memory and Postgres stores, {size.queries} queries")
    r = await vector.main(size.vectors, 384, size.queries, postgres=True)
    for store in ("memory", "postgres"):
        for q in ("p50", "p99"):
            value = r[f"{store}_search_{q}"]
            run.rows.append(
                Row(
                    f"Vector search {q}, top-5 of {size.vectors:,} x 384, {store} store",
                    value,
                    "ms",
                    f"raw numpy matrix @ q + argpartition {q}",
                    r[f"{store}_anchor_{q}"],
                    "<= 15 ms" if q == "p50" else "",
                    value <= 15 if q == "p50" else None,
                )
            )
        run.quantiles[f"vector search ({store})"] = {q: r[f"{store}_search_{q}"] for q in ("p50", "p90", "p99")}
        run.quantiles[f"raw numpy ({store} run)"] = {q: r[f"{store}_anchor_{q}"] for q in ("p50", "p90", "p99")}
    blas = (
        f"BLAS kernel {r['kernel']}, {r.get('threads')} threads"
        if "kernel" in r
        else "BLAS kernel not shown (pip install threadpoolctl)"
    )
    run.details.append(
        f"Vector: synthetic unit vectors ({vector.LATENT} latent dims), memory store filled through the port, "
        f"Postgres by COPY then an HNSW build ({r.get('postgres_build_s', 0):.1f}s, "
        f"ef_search {r.get('postgres_ef_default')}, recall@10 {r.get('postgres_recall10', 0):.3f}); {blas}; "
        f"OPENBLAS_CORETYPE={r.get('OPENBLAS_CORETYPE')}."
    )


# --- rebuild: bench/rebuild.py, through its CLI ---


REBUILD_VIEWS = {  # bench/rebuild.py's view keys, and where each is built
    "window": "sliding-window-30 into Redis",
    "token-window": "token-window-4000 into Redis",
    "conversation-pg": "conversation into PostgreSQL",
    "long-term": "long-term into Redis",
    "long-term-pg": "long-term into PostgreSQL",
}


async def run_rebuild(run: Run) -> None:
    events = run.size.rebuild_events
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "rebuild.py"),
        "--events",
        str(events),
        "--views",
        ",".join(REBUILD_VIEWS),
        "--log",
        "kafka",
        "--batch-size",
        "20000",
        "--json",
    ]
    say(f"rebuild: bench/rebuild.py {shlex.join(cmd[2:])}")
    # Its own process: rebuild starts worker processes, and its memory is gone when it ends.
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=ROOT, stdout=subprocess.PIPE)
    out, _ = await proc.communicate()
    if proc.returncode not in (0, MISSED_EXIT):  # a missed target is in the rows, below
        raise RuntimeError(f"bench/rebuild.py exited with {proc.returncode}")
    r = json.loads(out.decode().strip().splitlines()[-1])
    for name, rate in r["rebuild_per_s"].items():
        view = REBUILD_VIEWS[name.split(" ")[0]]
        run.rows.append(
            Row(
                f"Rebuild events/s, {view}, {r['events']:,} events from Kafka",
                rate,
                "/s",
                "raw fastavro schemaless_reader decode",
                r["raw_fastavro_decode_per_s"],
                ">= 50,000/s",
                rate >= 50_000,
            )
        )
    shown = ["python", "bench/rebuild.py", *cmd[2:]]
    run.details.append(
        f"Rebuild: `{shlex.join(shown)}` ({r['bytes_per_event']} B per event; "
        f"Codec.decode {r['codec_decode_per_s']:,}/s; worker processes: the rebuild's default, one per "
        "core; each rate counts from the start, worker start-up included)."
    )


# --- the scale sections: standalone scripts, each in its own process, read through --json ---


async def script_json(run: Run, script: str, *args: str) -> dict[str, Any]:
    """`python bench/<script> <args> --json` in its own process (its memory is gone when it ends, and
    it cleans up after itself); its stderr goes on to ours, its last line names a failure."""
    cmd = [sys.executable, str(ROOT / "bench" / script), *args, "--json"]
    shown = shlex.join(["python", f"bench/{script}", *args, "--json"])
    say(f"{script}: {shown}")
    env = {
        **os.environ,
        "HELIX_KAFKA_BOOTSTRAP": run.bootstrap,
        "HELIX_REDIS_URL": run.redis_url,
        "HELIX_POSTGRES_DSN": run.dsn,
        # This tree, not an installed helix-es; tenants.py also imports `projectors`.
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
    }
    proc = await asyncio.create_subprocess_exec(*cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    tail: deque[str] = deque(maxlen=1)

    async def relay(stream: asyncio.StreamReader) -> None:
        async for line in stream:
            text = line.decode(errors="replace").rstrip()
            print(text, file=sys.stderr, flush=True)
            if text.strip():
                tail.append(text.strip())

    relaying = asyncio.create_task(relay(proc.stderr))
    try:
        out = await proc.stdout.read()
        await relaying
        code = await proc.wait()
    finally:
        if proc.returncode is None:  # interrupted: the script's own cleanup runs on SIGTERM
            proc.terminate()
            await proc.wait()
    if code not in (0, MISSED_EXIT):  # a missed target: its figures are read, and judged here again
        raise RuntimeError(f"`{shown}` exited with {code}: {tail[-1] if tail else 'no output'}")
    text = out.decode().strip()
    try:
        result: dict[str, Any] = json.loads(text)  # tenants.py indents its JSON
    except json.JSONDecodeError:
        result = json.loads(text.splitlines()[-1])
    result["_command"] = shown
    return result


async def pg_facts(
    run: Run, extension: str, existing: str, names_: list[str]
) -> tuple[bool, set[str], tuple[str, float]]:
    """Whether the server has `extension`, which of `names_` exist already (`existing` checks one), and
    its shared_buffers (as the server shows it, and in MB)."""
    import asyncpg

    conn = await asyncpg.connect(run.dsn)
    try:
        has = bool(await conn.fetchval("SELECT 1 FROM pg_available_extensions WHERE name = $1", extension))
        there = {n for n in names_ if await conn.fetchval(existing, n)}
        shown = str(await conn.fetchval("SHOW shared_buffers"))
        mb = await conn.fetchval(
            "SELECT setting::float8 * current_setting('block_size')::float8 / 1e6 FROM pg_settings "
            "WHERE name = 'shared_buffers'"
        )
        shared = (shown, float(mb))
    finally:
        await conn.close()
    return has, there, shared


async def scale_runs(
    run: Run,
    section: str,
    extension: tuple[str, str, str],
    named: dict[str, int],
    script: str,
    args: Callable[[int], list[str]],
) -> tuple[list[tuple[int, dict[str, Any]]], tuple[str, float]]:
    """`script` once per size of `named` (table or database name -> rows), each reusing and keeping
    what an earlier --keep left; `extension` is (name, the SQL that finds one of `named`, what is
    missing without it). The results by size, and the server's shared_buffers."""
    name, existing, missing = extension
    has, kept, shared = await pg_facts(run, name, existing, list(named))
    if not has:
        raise RuntimeError(f"not measured: {missing}")
    out = []
    for what, n in named.items():
        if what in kept:
            say(f"{section}: {what} exists (an earlier --keep): reused and left in place")
        keep = ["--keep"] if run.keep or what in kept else []
        out.append((n, await script_json(run, script, *args(n), *keep)))
    return out, shared


async def run_redis_cluster(run: Run) -> None:
    if not os.environ.get("HELIX_REDIS_CLUSTER_URL"):
        raise RuntimeError(
            "not measured: HELIX_REDIS_CLUSTER_URL is not set "
            "(`scripts/services redis-cluster up` starts a cluster and prints the export line)"
        )
    size = run.size
    r = await script_json(
        run, "redis_cluster.py", "--events", str(size.cluster_events), "--rounds", str(size.cluster_rounds)
    )
    one, cluster = r["targets"]["1 server"], r["targets"]["cluster, 3 masters"]
    masters = r["cluster_masters"]
    run.rows.append(
        Row(
            f"Redis Cluster, {masters} masters: projector fold events/s (sliding window 30, batches of 500, "
            f"median of {r['rounds']} rounds)",
            statistics.median(cluster["fold_per_s"]),
            "/s",
            "the same fold into 1 Redis server, rounds interleaved",
            statistics.median(one["fold_per_s"]),
        )
    )
    for q in ("p50", "p99"):
        run.rows.append(
            Row(
                f"Redis Cluster, {masters} masters: session read {q} (the guarded read of `get`)",
                cluster[f"read_{q}_ms"],
                "ms",
                f"the same read from 1 Redis server, {q}",
                one[f"read_{q}_ms"],
            )
        )
    run.details.append(
        f"Redis Cluster: `{r['_command']}`: {r['events']:,} events over {r['sessions']} sessions per round and "
        f"target; fold rounds {', '.join(f'{x:,.0f}' for x in cluster['fold_per_s'])} events/s on the cluster, "
        f"{', '.join(f'{x:,.0f}' for x in one['fold_per_s'])} on one server. No target: on one machine the "
        "cluster's six servers share the same cores, and a batch costs a `WAIT` per master "
        "(docs/operations/redis-cluster.md)."
    )


async def run_service(run: Run) -> None:
    sessions, turns, rounds = run.size.service
    r = await script_json(
        run,
        *["service.py", "--sessions", f"1,{sessions}", "--turns", str(turns), "--rounds", str(rounds)],
        "--missed-target-ok",
    )
    for level in r["levels"].values():
        run.rows.append(
            Row(
                f"Service: HTTP add p50 less a bare round trip p50 ({level['sessions']} concurrent sessions)",
                level["http"]["add"]["p50_ms"] - level["http"]["hop"]["p50_ms"],
                "ms",
                "the in-process add, p50",
                level["in_process"]["add"]["p50_ms"],
                f"<= {r['target_add_past_hop']:g}x anchor",
                level["target_met"],
            )
        )
    http, local = r["http"], r["in_process"]
    where = f"{sessions} concurrent sessions, add then get per turn"
    for op in ("add", "get"):
        for q in ("p50", "p99"):
            ratio = http[op][f"{q}_ms"] / local[op][f"{q}_ms"]
            run.rows.append(
                Row(
                    f"Service: {op} over HTTP {q} ({where})",
                    http[op][f"{q}_ms"],
                    "ms",
                    f"the in-process client (SessionMemoryManager), same turns, same log and store, {q}",
                    local[op][f"{q}_ms"],
                    "<= 2x anchor, no errors" if q == "p50" else "",
                    ratio <= 2 and not http["errors"] if q == "p50" else None,
                )
            )
    run.rows.append(
        Row(
            f"Service: turns/s over HTTP ({where}; median of {rounds} rounds)",
            http["turns_per_s_median"],
            "/s",
            "the in-process client, same turns",
            local["turns_per_s_median"],
        )
    )
    run.rows.append(
        Row(
            f"Service: a bare HTTP round trip p50, no memory work (GET /healthz; {where})",
            http["hop"]["p50_ms"],
            "ms",
            "the in-process add, p50",
            local["add"]["p50_ms"],
        )
    )
    run.details.append(
        f"Service: `{r['_command']}`: a `helix-es serve` process (Kafka log, sliding window of {r['window']} "
        f"in Redis, a `helix-es project` folding it), client {r['client']} (one keep-alive HTTP/1.1 connection "
        f"per session); turns/s by round {', '.join(f'{x:,.0f}' for x in http['turns_per_s'])} over HTTP, "
        f"{', '.join(f'{x:,.0f}' for x in local['turns_per_s'])} in process; errors {http['errors']} over HTTP, "
        f"{local['errors']} in process."
    )


async def run_tenants(run: Run) -> None:
    namespaces, partitions, seconds, sessions = run.size.tenants
    r = await script_json(
        run,
        "tenants.py",
        "--namespaces",
        str(namespaces),
        "--partitions",
        str(partitions),
        "--seconds",
        f"{seconds:g}",
        "--sessions",
        str(sessions),
    )
    new, raw_new = r["new_namespace_first_add_visible"], r["anchor_new_topic"]
    churn, calm, raw = r["existing_under_churn"], r["existing_calm"], r["anchor_visible"]
    raw_churn = r["anchor_visible_under_churn"]
    where = f"{r['namespaces']:,} namespaces x {r['partitions']} partitions, one projector"
    for q, target in (("p50", 1500.0), ("p99", None)):
        value = new[f"{q}_ms"]
        run.rows.append(
            Row(
                f"New namespace: first add visible {q} ({where}; one new namespace a second, topic creation included)",
                value,
                "ms",
                f"raw aiokafka create topic + first acked produce, {q}",
                raw_new[f"{q}_ms"],
                "" if target is None else "<= 1,500 ms",
                None if target is None else value <= target,
            )
        )
    for q, target in (("p50", None), ("p99", 50.0)):
        value = churn[f"{q}_ms"]
        run.rows.append(
            Row(
                f"Existing namespaces: add-to-visible {q} while one namespace appears a second ({sessions} sessions)",
                value,
                "ms",
                f"raw aiokafka produce-to-consume {q}, beside them while the namespaces appear",
                raw_churn[f"{q}_ms"],
                "" if target is None else "<= 50 ms",
                None if target is None else value <= target,
            )
        )
    run.rows.append(
        Row(
            "Existing namespaces: add-to-visible p99, no new namespaces",
            calm["p99_ms"],
            "ms",
            "raw aiokafka produce-to-consume p99",
            raw["p99_ms"],
        )
    )
    idle = r["idle"]
    run.rows.append(Row(f"Projector idle CPU ({where})", idle["cpu_share_of_a_core"] * 100, "% of a core"))
    run.rows.append(Row(f"Projector resident memory, idle ({where})", idle["rss_mb"], "MB"))
    run.details.append(
        f"Tenants: `{r['_command']}`: the projector caught up {r['start_to_caught_up_s']:.1f} s after its start; "
        f"{new['n']} new namespaces (max {new['max_ms']:,.0f} ms); {churn['n']:,} adds under churn "
        f"(max {churn['max_ms']:,.0f} ms), {calm['n']:,} without (p50 {calm['p50_ms']:.2f} ms); idle over 20 s; "
        f"{r['projector_rss_mb_after']:,.0f} MB resident after the churn."
    )


async def run_trgm(run: Run) -> None:
    size = run.size
    results, _ = await scale_runs(
        run,
        "trgm",
        (
            "pg_trgm",
            "SELECT to_regclass(quote_ident($1)) IS NOT NULL",
            "the server has no pg_trgm extension (postgresql-contrib)",
        ),
        {f"bench_long_term_{n}": n for n in size.trgm_rows},  # bench/long_term.py's names
        "long_term.py",
        lambda n: ["--n", str(n), "--queries", str(size.trgm_queries)],
    )
    top = max(size.trgm_rows)
    for n, r in results:
        indexed = any("Bitmap Index Scan" in line for line in r["rare_plan"])
        for q in ("p50", "p99"):
            value = r[f"rare_indexed_{q}"]
            gated = q == "p50" and n == top  # the target is at 1M rows
            run.rows.append(
                Row(
                    f"Long-term search {q}, pg_trgm GIN index, {n:,} rows in one namespace "
                    "(a term in one row at a random place)",
                    value,
                    "ms",
                    f"the same SELECT as a plain ILIKE scan (bitmap scans off), {q}",
                    r[f"rare_plain_{q}"],
                    "<= 5 ms, through the index" if gated else "",
                    (value <= 5 and indexed) if gated else None,
                )
            )
        built = (
            f"COPY {r['copy_s']:.1f} s, index built in {r['build_s']:.1f} s"
            if "build_s" in r
            else "a kept table, reused (no COPY, no build)"
        )
        run.details.append(
            f"pg_trgm at {n:,} rows: `{r['_command']}`: {built}; index {r['index_mb']:,.0f} MB beside a "
            f"{r['table_mb']:,.0f} MB table; the plan of `search` {'is' if indexed else 'is NOT'} a Bitmap Index "
            f"Scan; a common word p50 {r['common_indexed_p50']:.2f} ms (scan {r['common_plain_p50']:.2f}), "
            f"2 characters p50 {r['short_indexed_p50']:.2f} ms (scan {r['short_plain_p50']:.2f}); every result "
            "checked equal to the scan's."
        )


async def run_pgvector(run: Run) -> None:
    size = run.size
    results, shared = await scale_runs(
        run,
        "pgvector",
        (
            "vector",
            "SELECT 1 FROM pg_database WHERE datname = $1",
            "the server has no vector extension (pgvector; `scripts/services up` adds it)",
        ),
        {f"helix_bench_vector_{n}_384": n for n in size.pgvector_rows},  # bench/vector.py's names
        "vector.py",
        lambda n: ["--postgres", "--no-memory", "--n", str(n), "--queries", str(size.queries)],
    )
    top = max(size.pgvector_rows)
    for n, r in results:
        ef, recall = r["postgres_ef_default"], r["postgres_recall10"]
        gated = n == top  # the target is at 1M
        for q in ("p50", "p99"):
            value = r[f"postgres_topk_{q}"]
            run.rows.append(
                Row(
                    f"pgvector top-5 {q}, {n:,} x 384 (HNSW, ef_search {ef})",
                    value,
                    "ms",
                    f"exact numpy top-5 (matrix @ q + argpartition), interleaved, {q}",
                    r[f"postgres_anchor_{q}"],
                    "<= 10 ms with recall@10 >= 0.95" if gated and q == "p50" else "",
                    (value <= 10 and recall >= 0.95) if gated and q == "p50" else None,
                )
            )
        run.rows.append(
            Row(
                f"pgvector recall@10, {n:,} x 384 (ef_search {ef})",
                recall,
                "recall",
                "exact numpy top-10 of the same queries",
                target=">= 0.95" if gated else "",
                met=recall >= 0.95 if gated else None,
            )
        )
        run.rows.append(
            Row(
                f"pgvector HNSW build, {n:,} x 384 (CONCURRENTLY)",
                r.get("postgres_build_s"),
                "s",
                "COPY of the rows",
                r.get("postgres_copy_s"),
            )
        )
        run.rows.append(
            Row(
                f"pgvector HNSW index size, {n:,} x 384",
                r["postgres_index_mb"],
                "MB",
                "the table it indexes (helix_vectors)",
                r["postgres_table_mb"],
            )
        )
        for name, key in ((f"pgvector top-5, {n:,}", "postgres_topk"), (f"raw numpy top-5, {n:,}", "postgres_anchor")):
            run.quantiles[name] = {q: r[f"{key}_{q}"] for q in ("p50", "p90", "p99")}
        reused = "" if "postgres_build_s" in r else "a kept database, reused (no fill, no build: n/a above); "
        index = r["postgres_index_mb"]
        fits = (
            "holds the index"
            if shared[1] > index
            else "is smaller than the index: searches read most graph pages anew through the OS cache"
        )
        run.details.append(
            f"pgvector at {n:,} x 384: `{r['_command']}`: {reused}Postgres shared_buffers {shared[0]} {fits} "
            f"({index:,.0f} MB); the plan uses the HNSW index: {r[f'postgres_plan_uses_hnsw_ef{ef}']}; "
            f"projection.search p50 {r['postgres_search_p50']:.2f} ms."
        )


# --- the report ---


def kafka_version(bootstrap: str) -> str:
    """From the broker's command line (scripts/services), else unknown."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "kafka.Kafka" in cmdline:
            found = re.search(r"kafka[-_](?:2\.1[23]-)?(\d+\.\d+\.\d+)", cmdline)
            if found:
                return found.group(1)
    return f"unknown (broker at {bootstrap} not a local process)"


async def service_versions(run: Run) -> dict[str, str]:
    import asyncpg
    import redis.asyncio as aioredis

    out = {"Kafka": kafka_version(run.bootstrap)}
    try:
        client = aioredis.Redis.from_url(run.redis_url)
        out["Redis"] = (await client.info("server"))["redis_version"]
        await client.aclose()
    except Exception as exc:
        out["Redis"] = f"unknown ({exc})"
    try:
        conn = await asyncpg.connect(run.dsn)
        out["PostgreSQL"] = await conn.fetchval("SHOW server_version")
        await conn.close()
    except Exception as exc:
        out["PostgreSQL"] = f"unknown ({exc})"
    return out


def machine() -> dict[str, str]:
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        mem = next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal"))
        ram = f"{int(mem.split()[1]) / 1024 / 1024:.0f} GiB"
    except (OSError, StopIteration):
        ram = "unknown"
    libs = ", ".join(f"{p} {metadata.version(p)}" for p in ("aiokafka", "redis", "asyncpg", "fastavro", "numpy"))
    return {
        "cores": str(os.cpu_count()),
        "CPU": cpu,
        "RAM": ram,
        "OS": f"{platform.system()} {platform.release()}",
        "Python": f"{platform.python_implementation()} {platform.python_version()}",
        "libraries": libs,
    }


def git_commit() -> str:
    try:
        head = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        return head + (" plus uncommitted changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def table(rows: list[Row]) -> str:
    lines = [
        "| figure | value | anchor (same run) | anchor value | ratio | target | met? |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ratio = "" if r.ratio is None else f"{r.ratio:.2f}x"
        met = "" if r.met is None else ("yes" if r.met else "**no**")
        anchor = "" if r.anchor_value is None else fmt(r.anchor_value, r.unit)
        lines.append(f"| {r.figure} | {fmt(r.value, r.unit)} | {r.anchor} | {anchor} | {ratio} | {r.target} | {met} |")
    return "\n".join(lines)


def write_markdown(
    run: Run,
    path: Path,
    *,
    command: str,
    started: datetime,
    seconds: float,
    facts: dict[str, str],
    load: tuple[tuple[float, ...], tuple[float, ...]],
    plot: str | None,
) -> None:
    quick = run.size is QUICK
    head = [
        "# helix-es benchmarks" + (" (quick smoke run: smaller sizes, not the figures to quote)" if quick else ""),
        "",
        f"Measured {started:%Y-%m-%d %H:%M} UTC in {seconds / 60:.1f} min with `{command}` on commit {git_commit()}.",
        "Each figure's anchor is measured in the same run, interleaved with it where both are latencies. "
        "ratio = value / anchor value (for latencies lower is better; for rates, the share of the raw rate).",
        "",
        table(run.rows),
        "",
    ]
    if plot:
        head += [f"![latency percentiles]({plot})", ""]
    head += ["## Notes", ""] + [f"- {d}" for d in run.details]
    for e in run.errors:
        head.append(f"- **error**: {e}")
    head += ["", "## Machine", ""]
    head += [f"- {k}: {v}" for k, v in facts.items()]
    head.append(
        f"- load average (1, 5, 15 min) at start {', '.join(f'{x:.2f}' for x in load[0])}, at end "
        f"{', '.join(f'{x:.2f}' for x in load[1])}; the services run on the same machine"
    )
    path.write_text("\n".join(head) + "\n")


def plot_latency(run: Run, path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    except ImportError:
        say("no matplotlib: pip install -e '.[bench]' for latency.png")
        return False
    qs = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
    data: dict[str, dict[str, float]] = {
        name: {label: pct(s, q) for label, q in qs} for name, s in run.series.items() if s
    }
    data.update(run.quantiles)
    if not data:
        return False
    groups = [
        ("Add through Kafka", ["raw produce", "add"]),
        (
            "Window get by history length",
            sorted(
                (n for n in data if n.startswith(("raw LRANGE", "get "))),
                key=lambda n: (int(n.split()[-1].replace(",", "")), n[0] != "r"),
            ),
        ),
        ("Add-to-visible", ["raw produce-to-consume", "add-to-visible"]),
        (
            "pgvector top-5 by rows",
            sorted(
                (n for n in data if n.startswith(("pgvector top-5, ", "raw numpy top-5, "))),
                key=lambda n: (int(n.split()[-1].replace(",", "")), n[0] != "r"),
            ),
        ),
        (
            "Search",
            [
                "raw SQL long-term",
                "long-term search",
                "raw numpy (memory run)",
                "vector search (memory)",
                "raw numpy (postgres run)",
                "vector search (postgres)",
            ],
        ),
    ]
    groups = [(title, [n for n in found if n in data]) for title, found in groups]
    groups = [g for g in groups if g[1]]
    fig, axes = plt.subplots(
        len(groups), 1, figsize=(10, 2.2 + 1.1 * sum(len(g[1]) for g in groups) / 2), squeeze=False
    )
    colours = {"p50": "#4c72b0", "p90": "#dd8452", "p99": "#c44e52"}
    for ax, (title, series) in zip(axes[:, 0], groups, strict=True):
        ys = range(len(series))
        for k, (label, _) in enumerate(qs):
            values = [data[s][label] for s in series]
            at = [y + (k - 1) * 0.27 for y in ys]
            ax.barh(at, values, height=0.27, color=colours[label], label=label)
            for y, v in zip(at, values, strict=True):
                ax.text(v * 1.03, y, f"{v:.3g}", va="center", fontsize=6)
        low = min(min(data[s].values()) for s in series)
        high = max(max(data[s].values()) for s in series)
        ax.set_xlim(low / 2, high * 2)
        ax.set_yticks(list(ys), [s + (" (anchor)" if s.startswith("raw") else "") for s in series], fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_title(title, fontsize=10, loc="left")
        ax.grid(axis="x", which="both", alpha=0.3)
    axes[-1, 0].set_xlabel("milliseconds (log scale)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", fontsize=8, ncol=3)
    fig.suptitle(
        f"helix-es latency percentiles, {datetime.now(UTC):%Y-%m-%d}" + (" (quick)" if run.size is QUICK else ""),
        fontsize=11,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


async def cleanup(run: Run) -> None:
    import asyncpg
    import redis.asyncio as aioredis
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=run.bootstrap)
    await admin.start()
    try:
        topics = [t for t in await admin.list_topics() if t.startswith(run.prefix)]
        if topics:
            await admin.delete_topics(topics)
        # The projector's groups (`...<view>.<prefix>`): aiokafka's admin has no call for it, so the request itself.
        from aiokafka.protocol.admin import DeleteGroupsRequest

        for group, *_ in await admin.list_consumer_groups():
            if group.endswith(run.prefix):
                await admin._send_request(DeleteGroupsRequest([group]), await admin.find_coordinator(group))
    except Exception as exc:
        say(f"cleanup: Kafka: {exc!r}")
    finally:
        await admin.close()
    client = aioredis.Redis.from_url(run.redis_url)
    try:
        for pattern in (f"helix:memory:*-{run.run_id}:*", f"helix:*:*:{run.prefix}*"):
            async for key in client.scan_iter(match=pattern, count=1000):
                await client.delete(key)
        async for key in client.scan_iter(match="helix:checkpoint:*", count=1000):
            fields = [f for f in await client.hkeys(key) if f.decode().startswith(run.prefix + ".")]
            if fields:
                await client.hdel(key, *fields)
    finally:
        await client.aclose()
    conn = await asyncpg.connect(run.dsn)
    try:
        for t in run.tables:
            await conn.execute(f'DROP TABLE IF EXISTS "{t}"')
        for t in ("helix_checkpoints", "helix_row_marks"):
            if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", t):
                await conn.execute(f"DELETE FROM {t} WHERE view LIKE 'long-term-bench_long_term_{run.run_id}%'")
        for t in ("helix_aliases", "helix_targets", "helix_served"):
            if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", t):
                await conn.execute(f"DELETE FROM {t} WHERE view LIKE '%' || $1 || '%'", run.prefix)
    finally:
        await conn.close()


async def main(args: argparse.Namespace) -> int:
    size = QUICK if args.quick else FULL
    run = Run(
        size,
        os.environ.get("HELIX_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
        os.environ.get("HELIX_REDIS_URL", "redis://127.0.0.1:6379/0"),
        os.environ.get("HELIX_POSTGRES_DSN", "postgresql://helix:helix@127.0.0.1:5432/helix"),
        keep=args.keep,
    )
    out = Path(args.out) if args.out else ROOT / "bench" / ("quick" if args.quick else "")
    out.mkdir(parents=True, exist_ok=True)
    wanted = args.only.split(",") if args.only else list(SECTIONS)
    unknown = set(wanted) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"--only: unknown section(s) {sorted(unknown)}; known: {', '.join(SECTIONS)}")
    started, t0, load0 = datetime.now(UTC), time.perf_counter(), os.getloadavg()
    facts = {**machine(), **await service_versions(run)}
    say(
        f"run {run.run_id}: {', '.join(wanted)} ({'quick' if args.quick else 'full'}); "
        f"load average {load0[0]:.2f}, {os.cpu_count()} cores"
    )
    sections = {
        "spine": run_spine,
        "throughput": run_throughput,
        "long-term": run_long_term,
        "vector": run_vector,
        "rebuild": run_rebuild,
        "service": run_service,
        "redis-cluster": run_redis_cluster,
        "tenants": run_tenants,
        "trgm": run_trgm,
        "pgvector": run_pgvector,
    }
    try:
        for name in wanted:
            t = time.perf_counter()
            try:
                await sections[name](run)
            except Exception as exc:
                traceback.print_exc()
                run.errors.append(f"{name}: {exc!r}")
            say(f"{name}: done in {time.perf_counter() - t:.0f}s")
    finally:
        await cleanup(run)
    seconds = time.perf_counter() - t0
    png = out / "latency.png"
    plotted = plot_latency(run, png)
    command = "python bench/all.py" + "".join(f" {a}" for a in sys.argv[1:])
    md = out / "results.md"
    write_markdown(
        run,
        md,
        command=command,
        started=started,
        seconds=seconds,
        facts=facts,
        load=(load0, os.getloadavg()),
        plot=png.name if plotted else None,
    )
    print(table(run.rows))
    say(f"wrote {md}" + (f" and {png}" if plotted else "") + f" in {seconds / 60:.1f} min")
    code = missed(f"{r.figure}: {fmt(r.value, r.unit)}, target {r.target}" for r in run.rows if r.met is False)
    return 1 if run.errors or code else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run (a few minutes)")
    parser.add_argument("--only", help=f"comma-separated sections: {','.join(SECTIONS)}")
    parser.add_argument("--out", help="directory for results.md and latency.png (default bench/, or bench/quick/)")
    parser.add_argument(
        "--keep", action="store_true", help="keep the pgvector databases and pg_trgm tables for a later run"
    )
    sys.exit(asyncio.run(main(parser.parse_args())))
