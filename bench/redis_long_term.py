"""The Redis long-term view: the old adapter (`RedisLongTerm`, view Lua of its own) next to the
long-term fold over generic Redis rows (`LongTermRows` on `RedisRows`), in one run on one server.

    python bench/redis_long_term.py [--rows 20000] [--batch 500] [--reads 30] [--url redis://...]

Each store folds the same `--rows` messages (one partition, 40 sessions, batches of `--batch`)
into a namespace of its own, then reads it (the stores take turns, batch by batch and read by read,
so load from elsewhere falls on both alike): `get` (every message of the namespace) and `search`
(a needle in one message in 50: it reads the namespace until `limit` 10 hits, and one that matches
nothing, reading every row). Prints apply events/s and the reads' p50 in ms, and rows/old per
figure (above 1: rows cost more), and the CPU an apply takes per event in this process and in the
server (the server's is its own only on a server nothing else uses: `--url` of a private one on a
loaded machine; its wall-clock figures then vary from run to run, CPU figures much less). Its keys
are deleted at the end. With `--old` absent (the old
adapter gone), only the rows store runs.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import redis.asyncio as aioredis

from helix_es import Message
from helix_es.model import names
from helix_es.model.events import Event, MessageAdded, Position, Record
from helix_es.projection.long_term import LongTermRows
from helix_es.stores.ports import SessionKey
from helix_es.stores.redis.rows import RedisRows
from helix_es.views.long_term import DEFAULT_TABLE
from helix_es.views.long_term_rows import tables

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def records(ns: str, rows: int) -> list[Record]:
    topic = names.topic(ns)
    out = []
    for i in range(rows):
        text = f"message {i} about {'the needle ' if i % 50 == 7 else ''}the weather in town, {'x' * (i % 90)}"
        event = Event(ns, f"s{i % 40}", MessageAdded(Message("user" if i % 2 else "assistant", text)))
        event = Event(ns, event.session_id, event.payload, timestamp=T0 + timedelta(milliseconds=i))
        out.append(Record(event, Position(topic, 0, i)))
    return out


async def server_cpu(client: aioredis.Redis) -> float:
    """The server's CPU seconds so far (user and system): its share of a call, when nothing else uses it."""
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def measure(
    url: str, stores: dict[str, Any], namespaces: dict[str, str], rows: int, size: int, reads: int
) -> dict[str, dict[str, float]]:
    """Every figure taken in turns, store after store, so load from elsewhere falls on each alike."""
    batches = {label: records(ns, rows) for label, ns in namespaces.items()}
    spent = dict.fromkeys(stores, 0.0)
    cpu = {label: [0.0, 0.0] for label in stores}  # this process's, the server's
    server = aioredis.Redis.from_url(url)
    for i in range(0, rows, size):
        for label, store in stores.items():
            served = await server_cpu(server)
            start, used = time.perf_counter(), time.process_time()
            await store.apply(batches[label][i : i + size])
            spent[label] += time.perf_counter() - start
            cpu[label][0] += time.process_time() - used
            cpu[label][1] += await server_cpu(server) - served
    await server.aclose()
    figures = {
        label: {
            "apply events/s": rows / spent[label],
            "apply client cpu us/event": cpu[label][0] / rows * 1e6,
            "apply server cpu us/event": cpu[label][1] / rows * 1e6,
        }
        for label in stores
    }
    calls: dict[str, Callable[[Any, SessionKey], Awaitable[Any]]] = {
        "get p50 ms": lambda s, k: s.get(k, Position(names.topic(k.namespace), 0, rows - 1)),
        "search p50 ms": lambda s, k: s.search(k, "needle", 10, None),
        "search-none p50 ms": lambda s, k: s.search(k, "absent", 10, None),
    }
    for label, store in stores.items():
        key = SessionKey(namespaces[label], "s0")
        assert len(await store.get(key, None)) == rows
        assert len(await store.search(key, "NEEDLE", 10, None)) == min(10, rows // 50)
    for what, call in calls.items():
        times: dict[str, list[float]] = {label: [] for label in stores}
        for n in range(reads + 1):
            for label, store in stores.items():
                start = time.perf_counter()
                await call(store, SessionKey(namespaces[label], "s0"))
                if n:  # the first warms: scripts loaded, caches as a live reader's
                    times[label].append(time.perf_counter() - start)
        for label in stores:
            figures[label][what] = statistics.median(times[label]) * 1000
    return figures


def old_store(url: str) -> Any | None:
    try:
        module = importlib.import_module("helix_es.stores.redis.long_term")
    except ImportError:
        return None
    return module.RedisLongTerm(url, name=f"bench-lt-old-{uuid.uuid4().hex[:8]}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--reads", type=int, default=30)
    parser.add_argument("--url", default=os.environ.get("HELIX_REDIS_URL", "redis://127.0.0.1:6379/0"))
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    name = f"bench-lt-rows-{run}"
    stores: dict[str, Any] = {"rows": LongTermRows(RedisRows(args.url, name, tables(DEFAULT_TABLE)), DEFAULT_TABLE)}
    old = old_store(args.url)
    if old is not None:
        stores = {"old": old, **stores}
    namespaces = {label: f"bench-lt-{label}-{run}" for label in stores}
    try:
        figures = await measure(args.url, stores, namespaces, args.rows, args.batch, args.reads)
    finally:
        for label, store in stores.items():
            await store.drop([namespaces[label]], [names.topic(namespaces[label])])
            await store.close()
    print(f"{args.rows} messages, batches of {args.batch}, {args.reads} reads each")
    for what in figures["rows"]:
        line = f"{what:20} " + " ".join(f"{label} {f[what]:10.1f}" for label, f in figures.items())
        if "old" in figures:
            ratio = figures["rows"][what] / figures["old"][what]
            line += f"   rows/old {1 / ratio if 'events/s' in what else ratio:.2f}"  # above 1: rows cost more
        print(line)


if __name__ == "__main__":
    asyncio.run(main())
