"""A sliding window of 30 folded into one Redis server next to a Redis Cluster of 3 masters (with
replicas), in the same run, rounds interleaved.

    python bench/redis_cluster.py [--events 20000] [--sessions 200] [--rounds 3] [--json]

Needs HELIX_REDIS_URL and HELIX_REDIS_CLUSTER_URL (`scripts/services up --redis-cluster`). Folds
`--events` events (batches of 500, one partition, the driver a projector uses) and reads 2,000
sessions (`read`, with the guard, as `get` does); prints events/s and read p50/p99 per target
(`--json`: one JSON object, as bench/all.py reads it). Everything written is dropped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from helix_es import Event, Message, MessageAdded, Position, Record
from helix_es.projection.fold import project
from helix_es.stores.ports import SessionKey
from helix_es.stores.redis.views import RedisStore
from helix_es.views.sliding_window import SlidingWindow


async def one(url: str, events: int, sessions: int) -> tuple[float, float, float]:
    ns = f"bench-rc-{uuid.uuid4().hex[:8]}"
    topic = f"helix.memory.{ns}"
    view, store = SlidingWindow(30), RedisStore(url)
    records = [
        Record(
            Event(ns, f"s{i % sessions}", MessageAdded(Message("user", f"turn {i} " + "x" * 80))), Position(topic, 0, i)
        )
        for i in range(events)
    ]
    try:
        t = time.perf_counter()
        for i in range(0, events, 500):
            await project(view, store, records[i : i + 500])
        rate = events / (time.perf_counter() - t)
        lat = []
        for _ in range(2000):
            key = SessionKey(ns, f"s{random.randrange(sessions)}")
            t = time.perf_counter()
            await store.read(view, key)
            lat.append((time.perf_counter() - t) * 1000)
        lat.sort()
        return rate, statistics.median(lat), lat[int(len(lat) * 0.99)]
    finally:
        await store.drop(view, [ns], [topic])
        await store.close()


TARGETS = {"1 server": "HELIX_REDIS_URL", "cluster, 3 masters": "HELIX_REDIS_CLUSTER_URL"}


async def masters(url: str) -> int:
    """Masters serving slots, as the node at `url` sees the cluster."""
    client = aioredis.Redis.from_url(url)
    try:
        info = await client.cluster("INFO")  # redis-py parses it into a dict
    finally:
        await client.aclose()
    return int(info["cluster_size"])


async def main(events: int, sessions: int, rounds: int) -> dict[str, Any]:
    targets = {name: os.environ[var] for name, var in TARGETS.items()}
    found: dict[str, list[tuple[float, float, float]]] = {name: [] for name in targets}
    for _ in range(rounds):
        for name, url in targets.items():
            found[name].append(await one(url, events, sessions))
    out: dict[str, Any] = {"events": events, "sessions": sessions, "rounds": rounds}
    out["cluster_masters"] = await masters(targets["cluster, 3 masters"])
    out["targets"] = {
        name: {
            "fold_per_s": [r for r, _, _ in runs],
            "read_p50_ms": statistics.median(p for _, p, _ in runs),
            "read_p99_ms": statistics.median(p for _, _, p in runs),
        }
        for name, runs in found.items()
    }
    return out


def report(out: dict[str, Any]) -> None:
    for name, t in out["targets"].items():
        rates = ", ".join(f"{r:,.0f}" for r in t["fold_per_s"])
        print(
            f"{name}: fold {rates} events/s; read p50 {t['read_p50_ms']:.2f} ms, p99 {t['read_p99_ms']:.2f} ms "
            f"(median of {out['rounds']} rounds)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main(args.events, args.sessions, args.rounds))
    print(json.dumps(result)) if args.json else report(result)
