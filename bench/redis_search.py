"""Another client's latency while a Redis long-term `search` walks a big namespace.

    python bench/redis_search.py [--rows 1000000] [--port 7100]

Starts a private redis-server (no persistence) on `--port`, folds `--rows` long-term messages of one
namespace into it (the long-term fold over Redis rows, batches of 10,000), then, while a client
PINGs in a loop, runs a search that matches nothing (it reads every row): the paged search of
`helix_es.stores.redis.rows` next to one script that reads every row at once (its Lua, kept here:
what a search did before it paged). Prints the pinger's p50/p99/max and each search's duration.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import shutil
import statistics
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import redis
import redis.asyncio as aioredis

from helix_es.model import names
from helix_es.model.events import Event, MessageAdded, Position, Record
from helix_es.model.message import Message
from helix_es.projection.long_term import LongTermRows
from helix_es.stores.ports import SessionKey
from helix_es.stores.redis.rows import RedisRows, prefix
from helix_es.views.long_term import DEFAULT_TABLE
from helix_es.views.long_term_rows import tables

# One script over every row of the namespace at once: Redis serves nobody else until it ends.
_ONE_SCRIPT = r"""
local needle = ARGV[1]
local out = {}
local values = redis.call('HVALS', KEYS[1])
for i = 1, #values do
  if string.find(string.lower(values[i]), needle, 1, true) then out[#out + 1] = values[i] end
end
return out
"""
T0 = datetime(2023, 11, 14, tzinfo=UTC)


async def seed(store: LongTermRows, ns: str, rows: int) -> None:
    for start in range(0, rows, 10_000):
        batch = []
        for i in range(start, min(start + 10_000, rows)):
            message = MessageAdded(Message("user", f"row {i}: the weather in Oslo is {i % 17} degrees"))
            event = Event(ns, f"s{i % 1000}", message, timestamp=T0 + timedelta(microseconds=i))
            batch.append(Record(event, Position(names.topic(ns), 0, i)))
        await store.apply(batch)


def pinger(port: int, stop: Any, out: Any) -> None:
    """Another client, in its own process: PING, 1 ms pause, again; each round trip timed. A server
    stalled by one long script shows as one round trip as long as the stall (the max)."""
    client = redis.Redis(port=port, socket_timeout=None, socket_connect_timeout=None)
    lat: list[float] = []
    while not stop.is_set():
        t = time.perf_counter()
        client.ping()  # no timeout: a stalled server shows as the full stall
        lat.append(time.perf_counter() - t)
        time.sleep(0.001)
    out.put(lat)


def report(name: str, lat: list[float], took: float) -> None:
    ms = sorted(x * 1000 for x in lat)
    p99 = ms[min(len(ms) - 1, int(len(ms) * 0.99))]
    print(
        f"{name}: search {took:.2f} s; other client's PING during it: n={len(ms)} "
        f"p50 {statistics.median(ms):.2f} ms, p99 {p99:.2f} ms, max {ms[-1]:.2f} ms"
    )


async def main(rows: int, port: int) -> None:
    client = aioredis.Redis(port=port, socket_timeout=None, socket_connect_timeout=None)
    ns = "bench-search"
    store = LongTermRows(RedisRows(f"redis://127.0.0.1:{port}/0", "long-term", tables(DEFAULT_TABLE)), DEFAULT_TABLE)
    t = time.perf_counter()
    await seed(store, ns, rows)
    used = (await client.info("memory"))["used_memory_human"]
    print(f"seeded {rows} rows in {time.perf_counter() - t:.1f} s; used_memory {used}")

    async def paged() -> None:
        assert await store.search(SessionKey(ns, "s1"), "no such words", 5, None) == []

    async def old() -> None:
        await client.eval(_ONE_SCRIPT, 1, prefix(ns, "long-term") + DEFAULT_TABLE + ":r", "no such words")

    for name, search in (("idle (no search)", None), ("paged search (now)", paged), ("one script (before)", old)):
        stop, out = multiprocessing.Event(), multiprocessing.Queue()
        ping = multiprocessing.Process(target=pinger, args=(port, stop, out))
        ping.start()
        await asyncio.sleep(0.5)
        t = time.perf_counter()
        if search is None:
            await asyncio.sleep(3)
        else:
            await search()
        took = time.perf_counter() - t
        stop.set()
        lat = out.get()
        ping.join()
        report(name, lat, took)
    await store.close()
    await client.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--port", type=int, default=7100)
    args = parser.parse_args()
    home = tempfile.mkdtemp(prefix="helix-bench-redis-")
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(args.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            home,
            "--busy-reply-threshold",
            "60000",
        ],
        stdout=subprocess.DEVNULL,
    )
    try:
        time.sleep(0.5)
        asyncio.run(main(args.rows, args.port))
    finally:
        server.terminate()
        server.wait(30)
        shutil.rmtree(home, ignore_errors=True)
