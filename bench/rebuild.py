"""How fast `helix-es rebuild` folds the log into a new target, next to the raw fastavro decode rate.

    python bench/rebuild.py [--events 200000] [--sessions 2000] [--views window,long-term] [--log kafka,embedded]
                            [--batch-size 5000] [--workers N | --members N] [--profile] [--json]

Needs HELIX_KAFKA_BOOTSTRAP, HELIX_REDIS_URL and HELIX_POSTGRES_DSN (eval "$(scripts/services up)").
Writes `--events` chat events (the bytes `add` writes: user and assistant turns, tool calls and
their results, a clear now and then) over `--sessions` sessions into one namespace, on a Kafka topic
of 6 partitions and in an embedded log file, then rebuilds each view from it into a new target with
`projectors.rebuild.rebuild` (what the CLI runs) and reports events/s per view. `--members N`
rebuilds through the target's consumer group instead (`--group`, Kafka only): this process leads and
N - 1 `helix-es rebuild --join` processes join it, as other machines would; the rate counts from the
lead's start, the members' start-up included. The anchor, measured in the same run on the same
bytes, is `fastavro.schemaless_reader` alone (schema parsed once, as any Avro program would), once
over every event and again over 100,000 of them just before and just after each view's rebuild: a
view's ratio is to the mean of its own two, as a shared machine's speed drifts. Everything it
creates is deleted at the end; the long-term view in PostgreSQL goes to a table of this run's own,
so each run loads a new target as a rebuild does.

Target: every view >= 50,000 events/s (`TARGET_PER_S`); a miss is a `MISSED:` line on stderr and
exit status 3 (after the figures, `--json` too).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import fastavro

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helix_es.log.codec import Codec, fingerprint  # noqa: E402
from helix_es.model import names  # noqa: E402
from helix_es.model.events import Event, MemoryCleared, MessageAdded  # noqa: E402
from helix_es.model.message import Message, ToolCall  # noqa: E402
from projectors.rebuild import rebuild  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from cli import child_env, missed  # noqa: E402

TARGET_PER_S = 50_000
ANCHOR_EVENTS = 100_000  # events each view's own anchor decodes

VIEWS: dict[str, dict[str, Any]] = {
    "window": {"type": "sliding-window", "window_size": 30, "store": "redis"},
    "token-window": {"type": "token-window", "max_tokens": 4000, "store": "redis"},
    "conversation-pg": {"type": "conversation", "store": "postgres"},
    "long-term": {"type": "long-term", "store": "redis"},
    "long-term-pg": {"type": "long-term", "store": "postgres"},
}


def events(n: int, sessions: int, namespace: str) -> list[Event]:
    out = []
    for i in range(n):
        sid = f"s{i % sessions}"
        turn = i // sessions
        r = turn % 10
        if turn % 97 == 96:
            payload: Any = MemoryCleared()
        elif r == 3:
            payload = MessageAdded(
                Message(
                    "assistant",
                    "",
                    tool_calls=(ToolCall(f"c{i}", "read_file", json.dumps({"path": f"src/module_{turn}.py"})),),
                )
            )
        elif r == 4:
            payload = MessageAdded(
                Message("tool", "def handler(event):\n    return event\n" * 4, tool_call_id=f"c{i - sessions}")
            )
        else:
            role = "user" if r % 2 else "assistant"
            payload = MessageAdded(
                Message(
                    role,
                    f"turn {turn}: " + "words of a typical chat message " * 3,
                    metadata={"lang": "en"} if r == 0 else {},
                )
            )
        out.append(Event(namespace, sid, payload))
    return out


def anchor(data: list[bytes]) -> float:
    """Raw fastavro: schemaless_reader on each event body, the writer schema parsed once."""
    schemas = {}
    for f in sorted((ROOT / "schemas").glob("envelope.v*.avsc")):
        raw = json.loads(f.read_text())
        schemas[fingerprint(raw)] = fastavro.parse_schema(raw)
    started = time.perf_counter()
    for d in data:
        fastavro.schemaless_reader(io.BytesIO(d[10:]), schemas[d[2:10]])
    return len(data) / (time.perf_counter() - started)


def codec_rate(data: list[bytes]) -> float:
    codec = Codec()
    started = time.perf_counter()
    for d in data:
        codec.decode(d)
    return len(data) / (time.perf_counter() - started)


async def write_kafka(bootstrap: str, prefix: str, namespace: str, evs: list[Event], data: list[bytes]) -> str:
    from aiokafka import AIOKafkaProducer
    from aiokafka.admin import AIOKafkaAdminClient

    from helix_es.log.kafka import create_topic

    topic = names.topic(namespace, prefix)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await create_topic(admin, topic, 6, 1)
    finally:
        await admin.close()
    await asyncio.sleep(0.5)
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=20, max_batch_size=1 << 20
    )
    await producer.start()
    try:
        sent = [await producer.send(topic, d, key=e.session_id.encode()) for e, d in zip(evs, data, strict=True)]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()
    return topic


async def write_embedded_async(path: str, prefix: str, evs: list[Event]) -> None:
    from helix_es.log.embedded import EmbeddedLog

    log = EmbeddedLog(path, fsync=False, topic_prefix=prefix)
    try:
        for e in evs:
            await log.append(e)
    finally:
        await log.close()


async def cleanup(
    bootstrap: str,
    redis_url: str,
    dsn: str,
    prefix: str,
    namespace: str,
    topics: list[str],
    built: list[tuple[dict[str, Any], str]],
    tables: list[str],
) -> None:
    import asyncpg
    import redis.asyncio as aioredis
    from aiokafka.admin import AIOKafkaAdminClient

    from helix_es.model.names import alias_id
    from helix_es.views.long_term import LongTerm, target_table
    from projectors.rebuild import drop_target, select

    for cfg, target in built:
        log_config, part = select(cfg)
        for old in {target, part.view.name}:
            await drop_target(part, log_config, old, [namespace])
    client = aioredis.Redis.from_url(redis_url)
    for pattern in (f"helix:*:*:{prefix}", f"helix:memory:{namespace}:*"):
        async for key in client.scan_iter(match=pattern, count=1000):
            await client.delete(key)
    await client.aclose()
    conn = await asyncpg.connect(dsn)
    try:
        for cfg, target in built:
            _, part = select(cfg)
            if isinstance(part.view, LongTerm) and part.view.table in tables:
                t = target_table(part.view.table, part.view.name, target)
                await conn.execute(f'DROP TABLE IF EXISTS "{t}", "{t}_retracted"')
            alias = alias_id(part.view.name, prefix)
            for table in ("helix_aliases", "helix_targets", "helix_served"):
                if await conn.fetchval("SELECT to_regclass($1) IS NOT NULL", table):
                    await conn.execute(f"DELETE FROM {table} WHERE view = $1", alias)
        for table in tables:
            await conn.execute(f'DROP TABLE IF EXISTS "{table}", "{table}_retracted"')
    finally:
        await conn.close()
    if topics:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.delete_topics(topics)
        finally:
            await admin.close()


async def shared(cfg: dict[str, Any], tmp: Path, into: str, args: argparse.Namespace) -> Any:
    """The rebuild led by this process, with `--members` - 1 member processes joining its consumer group."""
    path = tmp / f"{uuid.uuid4().hex[:8]}.json"
    path.write_text(json.dumps(cfg))
    env = child_env()
    join = ["-m", "helix_es.cli", "rebuild", "--config", str(path), "--into", into, "--join"]
    members = [
        await asyncio.create_subprocess_exec(
            sys.executable, *join, "--batch-size", str(args.batch_size), "--progress", "60", env=env
        )
        for _ in range(args.members - 1)
    ]
    try:
        report = await rebuild(
            path, into=into, switch=False, batch_size=args.batch_size, group=True, members=args.members
        )
        for member in members:
            if await member.wait() != 0:
                raise RuntimeError(f"a rebuild member exited with {member.returncode}")
        return report
    finally:
        for member in members:
            if member.returncode is None:
                member.kill()
                await member.wait()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    bootstrap = os.environ.get("HELIX_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    redis_url = os.environ.get("HELIX_REDIS_URL", "redis://127.0.0.1:6379/0")
    dsn = os.environ.get("HELIX_POSTGRES_DSN", "postgresql://helix:helix@127.0.0.1:5432/helix")
    run = uuid.uuid4().hex[:8]
    prefix, namespace = f"bench-rebuild-{run}", f"bench-{run}"
    evs = events(args.events, args.sessions, namespace)
    codec = Codec()
    data = [codec.encode(e) for e in evs]
    result: dict[str, Any] = {
        "events": len(evs),
        "sessions": args.sessions,
        "bytes_per_event": round(sum(map(len, data)) / len(data)),
        "raw_fastavro_decode_per_s": round(anchor(data)),
        "codec_decode_per_s": round(codec_rate(data)),
        "rebuild_per_s": {},
        "anchor_per_s": {},
    }
    topics: list[str] = []
    built: list[tuple[dict[str, Any], str]] = []
    tables = [f"bench_rebuild_{run}"]  # the long-term view's; its targets' are derived from it
    tmp = tempfile.mkdtemp(prefix="helix-bench-rebuild-")
    try:
        for log_kind in args.log.split(","):
            if log_kind == "kafka":
                topics.append(await write_kafka(bootstrap, prefix, namespace, evs, data))
                log_cfg: dict[str, Any] = {"type": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": prefix}
            else:
                await write_embedded_async(tmp, prefix, evs)
                log_cfg = {"type": "embedded", "path": tmp, "topic_prefix": prefix, "fsync": False}
            for view in args.views.split(","):
                memory = {**VIEWS[view], "namespace": namespace, "redis_url": redis_url, "dsn": dsn}
                if memory["type"] == "long-term" and memory["store"] == "postgres":
                    memory["table"] = tables[0]
                cfg = {"log": log_cfg, "memory": memory}
                key = f"{view} ({log_kind})"
                # this view's anchor, just before and just after it: a shared machine's speed drifts
                before = anchor(data[:ANCHOR_EVENTS])
                profiler = cProfile.Profile() if args.profile else None
                if profiler:
                    profiler.enable()
                if args.members > 1 and log_kind == "kafka":
                    report = await shared(cfg, Path(tmp), f"{view}@g{run}", args)
                else:
                    report = await rebuild(cfg, switch=False, batch_size=args.batch_size, workers=args.workers)
                if profiler:
                    profiler.disable()
                    pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(25)
                built.append((cfg, report.target))
                result["anchor_per_s"][key] = round((before + anchor(data[:ANCHOR_EVENTS])) / 2)
                result["rebuild_per_s"][key] = report.events_per_second
                print(
                    f"{view:>16} from {log_kind:<8}: {report.read:,} events in {report.seconds:.2f}s = "
                    f"{report.events_per_second:,} events/s",
                    file=sys.stderr,
                )
    finally:
        await cleanup(bootstrap, redis_url, dsn, prefix, namespace, topics, built, tables)
    return result


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--sessions", type=int, default=2000)
    parser.add_argument("--views", default="window,long-term")
    parser.add_argument("--log", default="kafka,embedded")
    parser.add_argument("--batch-size", type=int, default=5000)
    parser.add_argument("--workers", type=int, help="rebuild worker processes (default: one per core)")
    parser.add_argument(
        "--members",
        type=int,
        default=1,
        help="rebuild through the target's consumer group: this process and N - 1 joined member processes",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile each rebuild (slower)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = asyncio.run(main(args))
    raw = out["raw_fastavro_decode_per_s"]
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"raw fastavro decode: {raw:,} events/s; Codec.decode: "
            f"{out['codec_decode_per_s']:,} events/s ({out['events']:,} events, {out['bytes_per_event']} B each)"
        )
        for name, rate in out["rebuild_per_s"].items():
            near = out["anchor_per_s"][name]
            print(
                f"rebuild {name}: {rate:,} events/s ({rate / near:.2f}x raw decode measured around it, "
                f"{near:,}/s; target >= {TARGET_PER_S:,}/s)"
            )
    sys.exit(
        missed(
            f"rebuild {name}: {rate:,} events/s, target >= {TARGET_PER_S:,}/s "
            f"({rate / out['anchor_per_s'][name]:.2f}x raw decode)"
            for name, rate in out["rebuild_per_s"].items()
            if rate < TARGET_PER_S
        )
    )
