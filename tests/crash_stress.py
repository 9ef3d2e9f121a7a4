"""Crash exactness under stress: the fault tests' SIGKILL, in a loop, until a view is not the clean fold.

    python -m tests.crash_stress [--loop 50] [--seed S] [--logs kafka,embedded] [--kills K]
                                 [--sessions N] [--events N] [--shared]

Opt-in (not collected by pytest, not part of CI's run). Each iteration draws, from its seed, a
namespace of sessions and a stream of adds (varied lengths, tool exchanges), clears, retractions
and retried idempotency keys, and:

- kafka: writes the stream to Kafka while `helix-es project` folds it into every session view and
  long-term view in Redis and PostgreSQL (windows, token window, smart, conversation, summary with
  the extractive summariser recording its summaries on the log, long-term, vector), and SIGKILLs the
  projector at random points (a view's checkpoints reaching a random offset, or a random delay),
  starting it again each time; then lets the last one catch up and stop;
- embedded: a writer process on the embedded log, whose appends fold inline into the same views in
  Redis and PostgreSQL, SIGKILLed at random moments (mid-append, mid-write of a view) and started
  again; the last one catches every view up from the log on open.

Then each view is compared with a clean fold of the log (retries marked as the views mark them):
every session's state and guard, every partition's checkpoint. On a mismatch it prints the seed, the
log, the view, the session and the first differing row, and exits 1; `--seed S --loop 1` replays
that iteration's stream and kill points (the interleaving with the projector is the machine's).

Services: private Kafka, Redis and PostgreSQL started for the run (`tests.faults`, as the fault
tests do), or with `--shared` the ones the HELIX_* variables name (topics and keys are unique per
iteration; nothing there is killed).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from helix_es import Message, ToolCall
from helix_es.config import MemoryConfig, load_served
from helix_es.log.embedded import EmbeddedLog
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.model.events import (
    ChannelBlob,
    CheckpointSaved,
    CheckpointsDeleted,
    Event,
    ItemDeleted,
    ItemPut,
    ItemTouched,
    MemoryCleared,
    MessageAdded,
    MessageRetracted,
    PendingWrite,
    Record,
    Serialized,
    WritesSaved,
)
from helix_es.views.checkpoints import EMPTY
from helix_es.views.items import session_of
from tests import faults
from tests.clean_fold import Mismatch, compare_memories

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
START = datetime(2026, 1, 1, tzinfo=UTC)  # the item events' clock (TTLs are folded on the events' times)
ADAPTER_TYPES = ("langgraph-checkpoints", "langgraph-store")
WORDS = ("alpha", "beta", "gamma", "delta", "Oslo", "weather", "tool", "path/to/file.py")


# --- what each iteration writes ---


def views(redis_url: str, dsn: str) -> list[dict[str, Any]]:
    """Every session view and long-term view the fault harness compares, in both stores where they live."""
    r: dict[str, Any] = {"store": "redis", "redis_url": redis_url}
    p: dict[str, Any] = {"store": "postgres", "dsn": dsn}
    return [
        {"type": "sliding-window", "window_size": 4, "tool_pairs": "split", **r},
        {"type": "sliding-window", "window_size": 5, **r},
        {"type": "token-window", "max_tokens": 60, **r},
        {"type": "smart", "max_tokens": 80, **r},
        {"type": "conversation", **r},
        {"type": "summary", "max_messages": 6, **r},
        {"type": "long-term", **r},
        {"type": "conversation", **p},
        {"type": "conversation", "max_length": 7, **p},
        {"type": "summary", "max_messages": 5, **p},
        {"type": "long-term", **p},
        {"type": "vector", "top_k": 5, **p},
    ]


def stream(rng: random.Random, ns: str, sessions: Sequence[str], n: int, tag: str) -> list[Event]:
    """`n` writes over `sessions`: turns, tool exchanges, now and then a retraction, a clear (rarely:
    a long-term clear empties the namespace) or a write retried with its idempotency key."""
    out: list[Event] = []
    keyed: list[Event] = []
    while len(out) < n:
        sid = rng.choice(sessions)
        r = rng.random()
        if r < 0.002:
            event = Event(ns, sid, MemoryCleared(), idempotency_key=f"{tag}-c{len(out)}")
        elif r < 0.03:
            event = Event(ns, sid, MessageRetracted())
        elif r < 0.06 and keyed:
            first = rng.choice(keyed[-50:])  # the same key and message again: a retry, folded as nothing
            event = Event(first.namespace, first.session_id, first.payload, idempotency_key=first.idempotency_key)
        elif r < 0.1:
            calls = tuple(ToolCall(f"{tag}-{len(out)}-{j}", "lookup", "{}") for j in range(rng.randint(1, 2)))
            out.append(Event(ns, sid, MessageAdded(Message("assistant", "", tool_calls=calls))))
            for call in calls[: rng.randint(0, len(calls))]:
                out.append(
                    Event(ns, sid, MessageAdded(Message("tool", "result " * rng.randint(1, 9), tool_call_id=call.id)))
                )
            continue
        else:
            role = rng.choice(("user", "assistant"))
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
            key = f"{tag}-k{len(out)}" if rng.random() < 0.2 else None
            event = Event(ns, sid, MessageAdded(Message(role, f"{tag}-{len(out)} {words}")), idempotency_key=key)
            if key is not None:
                keyed.append(event)
        out.append(event)
    return out[:n]


def adapters(redis_url: str, dsn: str, ns: str) -> dict[str, Any]:
    """The LangGraph adapters' views in both stores: the `checkpoints:` and `store:` mappings, and the
    same views as memories of their types (a document has one mapping of each), over namespaces
    `<ns>-cp` and `<ns>-st`."""
    return {
        "checkpoints": {"store": "redis", "redis_url": redis_url, "namespace": f"{ns}-cp"},
        "store": {"store": "postgres", "dsn": dsn, "namespace": f"{ns}-st"},
        "agents": [
            {"type": "langgraph-checkpoints", "store": "postgres", "dsn": dsn, "namespace": f"{ns}-cp"},
            {"type": "langgraph-store", "store": "redis", "redis_url": redis_url, "namespace": f"{ns}-st"},
        ],
    }


def document(log: dict[str, Any], ns: str, s: Services, extra: dict[str, Any]) -> dict[str, Any]:
    """An iteration's config: every session view over `ns`, and the adapters' views."""
    more = adapters(s.redis, s.postgres, ns)
    agents = [{"namespace": ns, **m, **extra} for m in views(s.redis, s.postgres)] + more.pop("agents")
    return {"log": log, "agents": [{"id": f"a{i}", "memory": m} for i, m in enumerate(agents)], **more}


def namespaces(cfg: dict[str, Any]) -> list[str]:
    return list(dict.fromkeys(c.memory.namespace for c in load_served(cfg)))


def memories(cfg: dict[str, Any], ns: str | None) -> list[MemoryConfig]:
    """The memories of `cfg` over `ns` (None: all of them), mappings included."""
    return [c.memory for c in load_served(cfg) if ns is None or c.memory.namespace == ns]


def _serialized(rng: random.Random, kind: str = "msgpack") -> Serialized:
    return Serialized(kind, rng.randbytes(rng.randint(0, 24)))


def checkpoint_stream(rng: random.Random, ns: str, n: int, tag: str) -> list[Event]:
    """`n` checkpoint events over a few threads: saves (with blobs, some "empty"), pending writes (special
    channels replace), and deletions of every scope with the blobs they list; now and then a clear."""
    threads = [f"t{i}" for i in range(rng.randint(2, 10))]
    saved: dict[str, list[tuple[str, str]]] = {t: [] for t in threads}
    made: dict[str, list[tuple[str, str, str]]] = {t: [] for t in threads}
    out: list[Event] = []
    for i in range(n):
        tid = rng.choice(threads)
        r = rng.random()
        if r < 0.5 or not saved[tid]:
            cns = rng.choice(("", "", "inner:1"))
            cid = f"{tag}-{i:06d}"  # ids sort as they are made, as LangGraph's do
            parent = next((c for s, c in reversed(saved[tid]) if s == cns), None)
            blobs = tuple(
                ChannelBlob(ch, str(rng.choice((i, i, 1, 2))), _serialized(rng, rng.choice(("msgpack", EMPTY))))
                for ch in rng.sample(("messages", "a", "b"), rng.randint(0, 3))
            )
            made[tid] += [(cns, b.channel, b.version) for b in blobs]
            saved[tid].append((cns, cid))
            run = rng.choice((None, "r1", "r2", "r3"))
            payload: Any = CheckpointSaved(cns, cid, parent, _serialized(rng), _serialized(rng, "json"), run, blobs)
        elif r < 0.8:
            cns, cid = rng.choice(saved[tid][-6:])  # maybe one deleted since: a write racing a deletion
            writes = tuple(
                PendingWrite(rng.choice((-1, -2, 0, 1, 2)), rng.choice(("a", "b", "__error__")), _serialized(rng))
                for _ in range(rng.randint(1, 3))
            )
            payload = WritesSaved(cns, cid, rng.choice(("task1", "task2")), rng.choice(("", "~1")), writes)
        elif r < 0.99:
            scope = rng.choice(("thread", "runs", "keep_latest", "checkpoints", "checkpoints"))
            listed = tuple(rng.sample(saved[tid], min(len(saved[tid]), rng.randint(0, 3))))
            dropped = tuple(rng.sample(made[tid], min(len(made[tid]), rng.randint(0, 3))))
            runs = tuple(rng.sample(("r1", "r2", "r3"), rng.randint(1, 2)))
            payload = CheckpointsDeleted(
                scope,
                runs if scope == "runs" else (),
                listed if scope == "checkpoints" else (),
                () if scope == "thread" else dropped,
            )
        else:
            payload = MemoryCleared()
        out.append(Event(ns, tid, payload))
    return out


def item_stream(rng: random.Random, ns: str, n: int, start: datetime) -> list[Event]:
    """`n` store item events over a few paths, on a clock that moves 0-30 s an event (so TTLs of
    seconds to minutes expire along the stream): puts (with and without TTL), deletes, refreshes
    (`ItemTouched`, of live, expired and missing items); now and then a path's clear."""
    paths = [("users", f"u{i}") for i in range(rng.randint(1, 4))] + [("users", "u0", "prefs"), ("docs",)]
    out: list[Event] = []
    at = start
    for i in range(n):
        at += timedelta(seconds=rng.uniform(0, 30))
        path = rng.choice(paths)
        key = f"k{rng.randint(0, 6)}"
        r = rng.random()
        payload: Any
        if r < 0.5:
            value = json.dumps({"n": i, "text": rng.choice(WORDS)})
            ttl = rng.choice((None, None, 0.2, 1.0, 5.0))
            payload = ItemPut(path, key, value, rng.choice((None, False)), ttl)
        elif r < 0.65:
            payload = ItemDeleted(path, key)
        elif r < 0.99:
            payload = ItemTouched(path, key)
        else:
            payload = MemoryCleared()
        out.append(Event(ns, session_of(path), payload, timestamp=at))
    return out


def adapter_events(rng: random.Random, ns: str, n: int, tag: str, start: datetime) -> list[Event]:
    """`n` events for each adapter view (namespaces as `adapters` names them), interleaved."""
    return interleave(rng, checkpoint_stream(rng, f"{ns}-cp", n, tag), item_stream(rng, f"{ns}-st", n, start))


def interleave(rng: random.Random, *streams: list[Event]) -> list[Event]:
    """The streams merged at random, each in its own order."""
    rest = [list(reversed(s)) for s in streams if s]
    out: list[Event] = []
    while rest:
        pick = rng.choices(rest, weights=[len(s) for s in rest])[0]
        out.append(pick.pop())
        rest = [s for s in rest if s]
    return out


# --- the Kafka track ---


@dataclass
class Services:
    kafka: str
    redis: str
    postgres: str


@contextlib.contextmanager
def private_services() -> Iterator[Services]:
    libs, pg_bin = faults.kafka_libs(), faults.pg_bin()
    if libs is None or pg_bin is None or shutil.which("redis-server") is None:
        raise SystemExit(
            "crash_stress: needs java with the Kafka jars (scripts/services up once), redis-server, postgres"
        )
    with faults.started(libs, pg_bin) as (kafka, redis, postgres):
        s = Services(kafka.bootstrap, redis.url, postgres.dsn)
        # The environment wins over a config's addresses: this process's reads (lag, compare) use these too.
        os.environ.update(HELIX_KAFKA_BOOTSTRAP=s.kafka, HELIX_REDIS_URL=s.redis, HELIX_POSTGRES_DSN=s.postgres)
        yield s


def shared_services() -> Services:
    env = os.environ
    missing = [v for v in ("HELIX_KAFKA_BOOTSTRAP", "HELIX_REDIS_URL", "HELIX_POSTGRES_DSN") if not env.get(v)]
    if missing:
        raise SystemExit(f"crash_stress --shared: set {', '.join(missing)} (scripts/services env)")
    return Services(env["HELIX_KAFKA_BOOTSTRAP"], env["HELIX_REDIS_URL"], env["HELIX_POSTGRES_DSN"])


def _env(s: Services) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.update(HELIX_KAFKA_BOOTSTRAP=s.kafka, HELIX_REDIS_URL=s.redis, HELIX_POSTGRES_DSN=s.postgres)
    env.pop("HELIX_INSTANCE_ID", None)
    return env


class Child:
    """A process of ours that gets SIGKILLed; stderr to a file (a pipe would fill and block it)."""

    def __init__(self, cmd: list[str], log: Path, env: dict[str, str]) -> None:
        self.said = log.stat().st_size if log.exists() else 0  # where its own lines begin
        with log.open("ab") as err:
            self.proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, env=env)
        self.log = log

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(60)

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(120)

    def says(self, text: bytes) -> bool:
        return text in self.log.read_bytes()[self.said :]

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


async def _folded(redis_url: str, view: str, topic: str) -> int:
    import redis.asyncio as aioredis

    from tests.test_faults import folded

    client = aioredis.Redis.from_url(redis_url)
    try:
        return await folded(client, view, topic)
    finally:
        await client.aclose()


async def _behind(config: Path) -> list[str]:
    """The partitions some view has not folded to the log's end, as `view[partition] checkpoint/end`."""
    from aiokafka.errors import KafkaError

    from projectors.lag import lag

    try:
        report = await asyncio.wait_for(lag(str(config)), 60)
    except (TimeoutError, KafkaError) as exc:  # a busy broker: asked again, within the catch-up's budget
        return [f"lag not read ({type(exc).__name__})"]
    if not report.partitions:
        return ["no partitions yet"]
    return [f"{p.view}({p.store})[{p.partition}] {p.applied}/{p.end}" for p in report.partitions if p.lag]


@dataclass(frozen=True)
class Size:
    """Sessions and events of an iteration; None: drawn from its seed."""

    sessions: int | None = None
    events: int | None = None


async def kafka_iteration(s: Services, seed: int, work: Path, kills: int, size: Size, say: Any) -> dict[str, Any]:
    rng = random.Random(seed)
    run = uuid.uuid4().hex[:6]  # guards are kept per namespace: a seed run again on shared services starts afresh
    prefix, ns = f"cs{seed}-{run}", f"ns{seed}-{run}"
    sessions = [f"s{i}" for i in range(rng.randint(4, 50) if size.sessions is None else size.sessions)]
    n = rng.randint(200, 1500) if size.events is None else size.events
    log = {"type": "kafka", "bootstrap_servers": s.kafka, "partitions": PARTITIONS, "topic_prefix": prefix}
    cfg = document(log, ns, s, {"read_timeout": 120})
    path = work / f"{prefix}.yaml"
    path.write_text(json.dumps(cfg))
    cmd = [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path), "--progress", "5"]
    cmd += ["--session-timeout", "6", "--batch-size", str(rng.choice((7, 50, 200, 500)))]
    log_file = work / f"{prefix}.log"
    env = {**_env(s), "HELIX_RUNTIME_DIR": str(work / f"{prefix}-run")}
    events = stream(rng, ns, sessions, n, "k")
    more = rng.randint(100, 600) if size.events is None else max(50, size.events // 5)
    events = interleave(rng, events, adapter_events(rng, ns, more, "k", START + timedelta(days=seed % 1000)))
    counts = {space: sum(e.namespace == space for e in events) for space in namespaces(cfg)}
    watching = rng.choice([m for m in memories(cfg, None) if m.store == "redis"])  # its checkpoints are in Redis
    watched, topic = watching.view.name, names.topic(watching.namespace, prefix)
    kafka_log = KafkaLog(s.kafka, topic_prefix=prefix, partitions=PARTITIONS)
    points: list[str] = []
    children: list[Child] = []
    try:
        firsts = list({e.namespace: e for e in reversed(events)}.values())
        for first in reversed(firsts):  # every topic exists before the projector looks for it
            await kafka_log.append(first)
        rest = [e for e in events if all(e is not f for f in firsts)]
        chunk = rng.choice((5, 20, 100))
        pause = rng.choice((0.0, 0.01, 0.03))

        async def write() -> None:
            for i in range(0, len(rest), chunk):
                await asyncio.gather(*(kafka_log.append(e) for e in rest[i : i + chunk]))
                if pause:
                    await asyncio.sleep(pause)

        writing = asyncio.create_task(write())
        child = Child(cmd, log_file, env)
        children.append(child)
        for _ in range(kills):
            if rng.random() < 0.5:
                target = rng.randrange(1, counts[watching.namespace])
                point = f"{watched} of {watching.namespace} at {target} events"
                deadline = time.monotonic() + 60
                while await _folded(s.redis, watched, topic) < target and time.monotonic() < deadline:
                    if not child.alive():
                        raise Mismatch(f"the projector exited:\n{child.tail()}")
                    await asyncio.sleep(rng.uniform(0, 0.05))
            else:
                delay = rng.uniform(1.0, 8.0)
                point = f"after {delay:.2f}s"
                await asyncio.sleep(delay)
            folded = await _folded(s.redis, watched, topic)
            child.kill()
            points.append(f"{point} ({watched} had {folded})")
            child = Child(cmd, log_file, env)
            children.append(child)
        await writing
        while not child.says(b"SIGTERM stops"):  # its signal handlers are set: the stop below is a clean one
            if not child.alive():
                raise Mismatch(f"the projector exited:\n{child.tail()}")
            await asyncio.sleep(0.1)
        wrote = time.monotonic()
        deadline = wrote + 300
        while behind := await _behind(path):
            if not child.alive():
                raise Mismatch(f"the projector exited:\n{child.tail()}")
            if time.monotonic() > deadline:
                raise Mismatch(f"the views did not catch up in 300 s: {', '.join(behind[:8])}\n{child.tail(8)}")
            await asyncio.sleep(0.5)
        caught = time.monotonic()
        code = child.stop()
        if code != 0:  # not an inexact view: said, and the views are compared all the same
            say(f"  NOTE: the projector did not stop cleanly (exit code {code}):\n{child.tail()}")
    finally:
        for started in children:
            started.kill()
        await kafka_log.close()
    timing = f"caught up {caught - wrote:.0f}s after the last write, stopped in {time.monotonic() - caught:.0f}s"
    say(f"  sessions {len(sessions)}, events {counts}, kills: {'; '.join(points)}; {timing}")
    return cfg


async def read_kafka(cfg: dict[str, Any], ns: str) -> tuple[list[Record], dict[int, int], str]:
    from tests.test_faults import read_log

    prefix = cfg["log"]["topic_prefix"]
    topic = names.topic(ns, prefix)
    records, last = await read_log(cfg["log"]["bootstrap_servers"], prefix, topic)
    return records, last, topic


# --- the embedded track ---


async def writer(config: Path, seed: int, life: int, count: int, sessions: int) -> None:
    """A writer on the embedded log: opens every view of `config` (each caught up from the log), then
    appends `count` events drawn from `seed` and `life`, folding them inline."""
    from helix_es import open_memory

    cfg = json.loads(config.read_text())
    ns = cfg["agents"][0]["memory"]["namespace"]
    rng = random.Random(seed * 1000 + life)
    ids = [f"s{i}" for i in range(sessions)]
    async with contextlib.AsyncExitStack() as stack:
        mems = [
            await stack.enter_async_context(open_memory(cfg, session_id="s0", agent=i))
            for i, agent in enumerate(cfg["agents"])
            if agent["memory"].get("type") not in ADAPTER_TYPES
        ]
        backend = mems[0].backend  # type: ignore[attr-defined]
        for served in load_served(cfg):
            if served.memory.type in ADAPTER_TYPES:  # as the saver and the store attach theirs
                await backend.attach(served.memory, served.memory.namespace)
        print("ready", file=sys.stderr, flush=True)
        start = START + timedelta(days=seed % 1000, hours=life)
        more = adapter_events(rng, ns, count // 2, f"e{life}", start)
        for event in interleave(rng, stream(rng, ns, ids, count, f"e{life}"), more):
            await backend.append(event)


async def embedded_iteration(s: Services, seed: int, work: Path, kills: int, size: Size, say: Any) -> dict[str, Any]:
    rng = random.Random(seed)
    ns = f"ns{seed}-{uuid.uuid4().hex[:6]}"
    prefix = f"ce{seed}-{uuid.uuid4().hex[:6]}"
    log = {"type": "embedded", "path": str(work / prefix), "fsync": rng.random() < 0.3, "topic_prefix": prefix}
    cfg = document(log, ns, s, {})
    sessions = rng.randint(4, 50) if size.sessions is None else size.sessions
    path = work / f"{prefix}.json"
    path.write_text(json.dumps(cfg))
    log_file = work / f"{prefix}.log"
    env = _env(s)
    points = []
    for life in range(kills + 1):
        last = life == kills
        count = 0 if last else rng.randint(100, 800) if size.events is None else size.events // kills
        cmd = [sys.executable, "-m", "tests.crash_stress", "--writer", str(path), "--seed", str(seed)]
        cmd += ["--life", str(life), "--count", str(count), "--sessions", str(sessions)]
        child = Child(cmd, log_file, env)
        if last:
            try:
                code = child.proc.wait(300)
            finally:
                child.kill()
            if code != 0:
                raise Mismatch(f"the last writer (catching up) failed:\n{child.tail()}")
            break
        deadline = time.monotonic() + 60
        while not child.says(b"ready") and child.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)  # every view caught up: the kill lands among appends
        delay = rng.uniform(0.5, 8.0)
        await asyncio.sleep(delay)
        child.kill()
        points.append(f"{delay:.2f}s after ready")
    say(f"  sessions {sessions}, fsync {cfg['log']['fsync']}, kills: {'; '.join(points)}")
    return cfg


async def read_embedded(cfg: dict[str, Any], ns: str) -> tuple[list[Record], dict[int, int], str]:
    log = EmbeddedLog(cfg["log"]["path"], topic_prefix=cfg["log"]["topic_prefix"])
    try:
        records = [r async for r in log.read(ns, on_bad=lambda bad: None)]
    finally:
        await log.close()
    topic = names.topic(ns, cfg["log"]["topic_prefix"])
    return records, {0: records[-1].position.offset} if records else {}, topic


# --- the loop ---


async def loop(args: argparse.Namespace, s: Services) -> int:
    work = Path(tempfile.mkdtemp(prefix="helix-stress-work-"))
    tracks = args.logs.split(",")
    seed0 = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    started = time.monotonic()
    try:
        for i in range(args.loop):
            seed = seed0 + i
            track = tracks[i % len(tracks)]
            kills = args.kills if args.kills is not None else random.Random(seed).randint(1, 3)
            print(f"[{i + 1}/{args.loop}] {track} seed {seed}, {kills} kills", flush=True)
            run = kafka_iteration if track == "kafka" else embedded_iteration
            read = read_kafka if track == "kafka" else read_embedded
            try:
                size = Size(args.sessions, args.events)
                cfg = await run(s, seed, work, kills, size, lambda m: print(m, flush=True))
                total: dict[str, int] = {}
                for space in namespaces(cfg):
                    records, last, topic = await read(cfg, space)
                    if records:  # else killed before its first append: nothing to compare
                        await compare_memories(memories(cfg, space), space, records, last, topic)
                    total[space] = len(records)
            except Mismatch as exc:
                print(f"MISMATCH: log {track}, seed {seed}: {exc}", flush=True)
                print(f"replay: python -m tests.crash_stress --logs {track} --seed {seed} --loop 1 --kills {kills}")
                print(f"(kept: {work})")
                return 1
            print(f"  exact (records: {total}; {time.monotonic() - started:.0f}s so far)", flush=True)
    except BaseException:
        print(f"(kept: {work})")
        raise
    shutil.rmtree(work, ignore_errors=True)
    print(f"{args.loop} iterations, every view exact")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", type=int, default=50, help="iterations (default 50)")
    parser.add_argument("--seed", type=int, default=None, help="first iteration's seed (default: random)")
    parser.add_argument("--kills", type=int, default=None, help="kills per iteration (default: 1-3, drawn)")
    parser.add_argument("--logs", default="kafka,embedded", help="tracks, alternated: kafka, embedded")
    parser.add_argument("--shared", action="store_true", help="use the services HELIX_* name, not private ones")
    parser.add_argument("--writer", type=Path, help=argparse.SUPPRESS)  # the embedded track's child
    parser.add_argument("--life", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--sessions", type=int, default=None, help="sessions per iteration (default: 4-50, drawn)")
    parser.add_argument("--events", type=int, default=None, help="events per iteration (default: drawn)")
    args = parser.parse_args(argv)
    if args.writer is not None:
        asyncio.run(writer(args.writer, args.seed, args.life, args.count, args.sessions or 1))
        return 0
    # SIGTERM (a timeout's) unwinds as Ctrl-C does: the projectors and writers started are killed on the way.
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))
    if args.shared:
        return asyncio.run(loop(args, shared_services()))
    with private_services() as s:
        return asyncio.run(loop(args, s))


if __name__ == "__main__":
    sys.exit(main())
