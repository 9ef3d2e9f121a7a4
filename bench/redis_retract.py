"""A retraction and an erasure in a big Redis long-term namespace (the long-term fold over Redis
rows: a retraction or an erasure reads the session's rows through its `session_id` lookup set).

    python bench/redis_retract.py [--rows 100000] [--sessions 1000] [--times 20] [--json]

Needs HELIX_REDIS_URL (eval "$(scripts/services up)"). It writes `--rows` rows of `--sessions`
sessions into a namespace of its own; then `--times` times: one add and one retraction of one
session (the retraction's apply is timed), then two erasures of a session (one of a session with
no rows), and at the end a clear of the whole namespace. Anchor: a raw redis-py PING round trip.
Every key it made is deleted at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import redis.asyncio as aioredis

try:
    from bench import cli as bench_cli
except ModuleNotFoundError:  # run as `python bench/<script>.py`: bench/ itself is on the path
    import cli as bench_cli  # type: ignore[no-redef]
from helix_es import Event, Message, MessageAdded
from helix_es.model import names
from helix_es.model.events import MemoryCleared, MessageRetracted, Position, Record, SessionErased
from helix_es.projection.long_term import LongTermRows
from helix_es.stores.redis.rows import RedisRows, prefix
from helix_es.views.long_term import DEFAULT_TABLE
from helix_es.views.long_term_rows import tables

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def record(ns: str, sid: str, payload: Any, offset: int) -> Record:
    at = T0 + timedelta(milliseconds=offset)
    return Record(Event(ns, sid, payload, timestamp=at), Position(names.topic(ns), 0, offset))


async def mode(url: str, args: argparse.Namespace) -> dict[str, float]:
    ns = f"bench-rt-{uuid.uuid4().hex[:8]}"
    store = LongTermRows(RedisRows(url, "long-term", tables(DEFAULT_TABLE)), DEFAULT_TABLE)
    client = aioredis.Redis.from_url(url)
    base = prefix(ns, "long-term") + DEFAULT_TABLE + ":"
    try:
        offset = 0
        for start in range(0, args.rows, 5000):
            batch = []
            for i in range(start, min(start + 5000, args.rows)):
                message = MessageAdded(Message("user", f"row {i} of the namespace"))
                batch.append(record(ns, f"s{i % args.sessions}", message, offset))
                offset += 1
            await store.apply(batch)
        retract: list[float] = []
        for i in range(args.times):
            sid = f"s{i}"
            await store.apply([record(ns, sid, MessageAdded(Message("user", f"to take back {i}")), offset)])
            offset += 1
            took = record(ns, sid, MessageRetracted(), offset)
            offset += 1
            started = time.perf_counter()
            await store.apply([took])
            retract.append(time.perf_counter() - started)
        started = time.perf_counter()
        await store.apply([record(ns, "s999999", SessionErased(), offset)])  # a session of none
        await store.apply([record(ns, f"s{args.times}", SessionErased(), offset + 1)])
        erase = time.perf_counter() - started
        started = time.perf_counter()
        await store.apply([record(ns, "s0", MemoryCleared(), offset + 2)])
        clear = time.perf_counter() - started
        assert await client.zcard(base + "o") == 0 and await client.exists(base + "l:session_id:s1") == 0
        return {
            "retract_p50_ms": statistics.median(retract) * 1000,
            "erase_two_ms": erase * 1000,
            "clear_ms": clear * 1000,
        }
    finally:
        await store.drop([ns], [names.topic(ns)])
        await client.aclose()
        await store.close()


async def ping_p50(url: str, n: int = 200) -> float:
    client = aioredis.Redis.from_url(url)
    try:
        took = []
        for _ in range(n):
            started = time.perf_counter()
            await client.ping()
            took.append(time.perf_counter() - started)
        return statistics.median(took) * 1000
    finally:
        await client.aclose()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    url = os.environ.get("HELIX_REDIS_URL")
    if not url:
        raise SystemExit('redis_retract: set HELIX_REDIS_URL (eval "$(bash scripts/services up)")')
    rows = await mode(url, args)
    ping = await ping_p50(url)
    return {
        "rows": args.rows,
        "sessions": args.sessions,
        "ping_p50_ms": round(ping, 3),
        "by_session": {k: round(v, 2) for k, v in rows.items()},
    }


def cli() -> None:
    parsed = bench_cli.parser(__doc__)
    parsed.add_argument("--rows", type=int, default=100_000)
    parsed.add_argument("--sessions", type=int, default=1000)
    parsed.add_argument("--times", type=int, default=20)
    ran = bench_cli.run(parsed, main)
    if ran is None:
        return
    args, result = ran
    print(f"{args.rows:,} rows of {args.sessions:,} sessions in one namespace; raw PING p50 {result['ping_p50_ms']} ms")
    for name in ("by_session",):
        r = result[name]
        retract, erase, clear = r["retract_p50_ms"], r["erase_two_ms"], r["clear_ms"]
        print(
            f"  {name:<11} retraction apply p50 {retract:>9.2f} ms; two erasures {erase:>9.2f} ms; "
            f"the clear {clear:>9.2f} ms"
        )


if __name__ == "__main__":
    cli()
