"""The spine's speed on the local services, each figure next to an anchor measured in the same run.

    python bench/spine.py [--n 2000] [--json]

Needs HELIX_KAFKA_BOOTSTRAP and HELIX_REDIS_URL (eval "$(scripts/services up)"). Starts a real
`helix-es project` process for the sliding window, as a deployment would.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient

from helix_es import Message, load_config, open_memory
from helix_es.log.kafka import KafkaLog
from helix_es.model import names

ROOT = Path(__file__).resolve().parent.parent
WINDOW = 30


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


async def timed(n: int, op: Callable[[int], Awaitable[Any]], warmup: int = 50) -> list[float]:
    for i in range(warmup):
        await op(-1 - i)
    out = []
    for i in range(n):
        t = time.perf_counter()
        await op(i)
        out.append(time.perf_counter() - t)
    return out


def message(i: int) -> Message:
    return Message("user" if i % 2 else "assistant", f"turn {i}: " + "words of a typical chat message " * 3)


def start_projector(cfg: dict[str, Any]) -> subprocess.Popen[bytes]:
    """A real `helix-es project` process for `cfg`, as a deployment runs it (its log to DEVNULL)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        json.dump(cfg, f)
    projector = subprocess.Popen(
        [sys.executable, "-m", "helix_es.cli", "project", "--config", f.name],
        cwd=ROOT,
        stderr=subprocess.DEVNULL,
    )
    projector.config_path = f.name  # type: ignore[attr-defined]
    return projector


def stop_process(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM (its own cleanup runs), SIGKILL after 30 s; nothing if it has exited."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def stop_projector(projector: subprocess.Popen[bytes]) -> None:
    stop_process(projector)
    os.unlink(projector.config_path)  # type: ignore[attr-defined]


async def main(n: int, as_json: bool) -> dict[str, float]:
    bootstrap = os.environ.get("HELIX_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    redis_url = os.environ.get("HELIX_REDIS_URL", "redis://127.0.0.1:6379/0")
    ns = f"bench-{uuid.uuid4().hex[:8]}"
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 1},
        "memory": {
            "type": "sliding-window",
            "window_size": WINDOW,
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
            "read_timeout": 30,
        },
    }
    log = KafkaLog(bootstrap, partitions=1)
    await log.ensure_topic(ns)  # exists before the projector subscribes
    anchor = KafkaLog(bootstrap, partitions=1, topic_prefix="bench-anchor")
    anchor_topic = await anchor.ensure_topic(ns)
    await anchor.close()
    await log.close()
    projector = start_projector(cfg)
    r: dict[str, float] = {}
    try:
        async with open_memory(cfg, session_id="bench") as mem:
            for i in range(WINDOW * 2):
                await mem.add(message(i))
            assert len(await mem.get()) == WINDOW

            # Anchor: the same producer settings, raw bytes, no helix-es, on a topic no projector reads.
            raw = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True, linger_ms=0)
            await raw.start()
            payload = os.urandom(200)
            samples = await timed(n, lambda i: raw.send_and_wait(anchor_topic, payload, key=b"raw-anchor"))
            await raw.stop()
            r["raw_aiokafka_send_p50_ms"], r["raw_aiokafka_send_p99_ms"] = pct(samples, 0.5), pct(samples, 0.99)

            samples = await timed(n, lambda i: mem.add(message(i)))
            r["add_p50_ms"], r["add_p99_ms"] = pct(samples, 0.5), pct(samples, 0.99)

            await mem.get()  # caught up; from here get is one round trip
            client = aioredis.Redis.from_url(redis_url)
            key = names.session_key(ns, "bench", load_config(cfg).memory.view.name)
            assert len(await client.lrange(key, 0, -1)) == WINDOW
            lrange, get = [], []
            for _ in range(3):  # interleaved, so drift hits both alike
                lrange += await timed(n // 3, lambda i: client.lrange(key, 0, -1))
                get += await timed(n // 3, lambda i: mem.get())
            await client.aclose()
            r["raw_lrange_30_p50_ms"] = pct(lrange, 0.5)
            r["get_window_30_p50_ms"] = pct(get, 0.5)
            r["get_over_lrange"] = r["get_window_30_p50_ms"] / r["raw_lrange_30_p50_ms"]

            async def add_then_get(i: int, keyed: bool = False) -> None:
                await mem.add(message(i), idempotency_key=f"req-{uuid.uuid4()}" if keyed else None)
                got = await mem.get()
                assert got[-1].content == message(i).content

            plain, keyed = [], []
            for _ in range(3):  # interleaved, so drift hits both alike
                plain += await timed(max(70, n // 12), add_then_get)
                keyed += await timed(max(70, n // 12), lambda i: add_then_get(i, keyed=True))
            r["add_to_visible_p50_ms"], r["add_to_visible_p99_ms"] = pct(plain, 0.5), pct(plain, 0.99)
            r["keyed_add_to_visible_p50_ms"] = pct(keyed, 0.5)
            r["keyed_over_plain"] = r["keyed_add_to_visible_p50_ms"] / r["add_to_visible_p50_ms"]
    finally:
        stop_projector(projector)
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        await admin.delete_topics([f"helix.memory.{ns}", anchor_topic])  # a bench leaves no history behind
        await admin.close()
    r["samples"] = n
    print(json.dumps(r, indent=2) if as_json else report(r))
    return r


def report(r: dict[str, float]) -> str:
    rows = [
        (
            "Add through Kafka p50 / p99",
            f"{r['add_p50_ms']:.2f} / {r['add_p99_ms']:.2f} ms",
            "p50 <= 2 ms",
            f"raw aiokafka send {r['raw_aiokafka_send_p50_ms']:.2f} / {r['raw_aiokafka_send_p99_ms']:.2f} ms",
        ),
        (
            "Get, sliding window of 30, p50",
            f"{r['get_window_30_p50_ms']:.3f} ms",
            "<= 1.2x LRANGE",
            f"raw LRANGE {r['raw_lrange_30_p50_ms']:.3f} ms -> {r['get_over_lrange']:.2f}x",
        ),
        (
            "Add-to-visible p50 / p99",
            f"{r['add_to_visible_p50_ms']:.2f} / {r['add_to_visible_p99_ms']:.2f} ms",
            "p50 <= 10 ms",
            "add + read-your-writes get",
        ),
        (
            "Add-to-visible with an idempotency key p50",
            f"{r['keyed_add_to_visible_p50_ms']:.2f} ms",
            "-",
            f"without a key {r['add_to_visible_p50_ms']:.2f} ms -> {r['keyed_over_plain']:.2f}x",
        ),
    ]
    width = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [f"{'what':<{width[0]}}  {'got':<{width[1]}}  {'target':<{width[2]}}  anchor (same run)"]
    lines += [f"{a:<{width[0]}}  {b:<{width[1]}}  {c:<{width[2]}}  {d}" for a, b, c, d in rows]
    return "\n".join(lines) + f"\n({int(r['samples'])} samples each; median of the run)"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="samples per figure")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    asyncio.run(main(args.n, args.json))
