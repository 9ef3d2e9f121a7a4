"""Another client's latency while a Redis long-term `search` walks a big namespace.

    python bench/redis_search.py [--rows 1000000] [--port 7100]

Starts a private redis-server (no persistence) on `--port`, seeds `--rows` long-term rows of one
namespace straight into the store's layout (pipelines), then, while a client PINGs in a loop,
runs a search that matches nothing (it reads every row): the paged search of
`helix_es.stores.redis.long_term` next to the whole-keyspace single-script SCAN it replaced (its
Lua, kept here). Prints the pinger's p50/p99/max and each search's duration.
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
from typing import Any

import redis
import redis.asyncio as aioredis

from helix_es.model.message import Message
from helix_es.stores.ports import SessionKey
from helix_es.stores.redis.long_term import RedisLongTerm, prefix

# The search this store ran before it paged (one script, one SCAN of the keyspace).
_OLD_SEARCH = r"""
local needle = ARGV[2]
local out = {'ok'}
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000)
  cursor = page[1]
  local found = page[2]
  for i = 1, #found, 500 do
    local keys = {}
    for j = i, math.min(i + 499, #found) do keys[#keys + 1] = found[j] end
    local values = redis.call('MGET', unpack(keys))
    for k = 1, #values do
      local value = values[k]
      if value then
        local content = cjson.decode(value)['message']['content']
        if string.find(string.lower(content), needle, 1, true) then
          out[#out + 1] = keys[k]
          out[#out + 1] = value
        end
      end
    end
  end
until cursor == '0'
return out
"""


async def seed(client: aioredis.Redis, ns: str, rows: int) -> None:
    base = prefix(ns)
    for start in range(0, rows, 10_000):
        async with client.pipeline(transaction=False) as pipe:
            members = []
            for i in range(start, min(start + 10_000, rows)):
                member = f"{1_700_000_000_000_000 + i:020d},helix.memory.{ns},{i % 6:010d},{i:020d}"
                message = Message("user", f"row {i}: the weather in Oslo is {i % 17} degrees")
                value = (
                    f'{{"session_id":"s{i % 1000}","at":{1_700_000_000_000_000 + i},'
                    f'"position":"helix.memory.{ns}:{i % 6}:{i}","message":{message.to_json()}}}'
                )
                pipe.set(base + "m:" + member, value)
                members.append(member)
            pipe.zadd(base + "index", dict.fromkeys(members, 0))
            await pipe.execute()


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
    t = time.perf_counter()
    await seed(client, ns, rows)
    used = (await client.info("memory"))["used_memory_human"]
    print(f"seeded {rows} rows in {time.perf_counter() - t:.1f} s; used_memory {used}")
    store = RedisLongTerm(f"redis://127.0.0.1:{port}/0")

    async def paged() -> None:
        assert await store.search(SessionKey(ns, "s1"), "no such words", 5, None) == []

    async def old() -> None:
        await client.eval(_OLD_SEARCH, 0, prefix(ns) + "m:*", "no such words")

    for name, search in (("idle (no search)", None), ("paged search (now)", paged), ("one-script SCAN (before)", old)):
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
