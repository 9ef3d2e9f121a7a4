"""LangGraph checkpoints on the log: HelixSaver put and get_tuple next to InMemorySaver and to the same
rows written straight to PostgreSQL, all in the same run.

    python bench/checkpoints.py [--n 500] [--messages 20] [--json]

Needs HELIX_KAFKA_BOOTSTRAP and HELIX_POSTGRES_DSN (eval "$(scripts/services up)"). Each round puts
one checkpoint of a growing thread (a `messages` channel of `--messages` chat turns, as a chat
graph's state) and reads it back twice (`get`: right after the put, so HelixSaver on Kafka waits for
the projector to fold it; `get again`: the view already has it), in each system in turn, call by call:

- InMemorySaver, LangGraph's reference (anchor for the embedded figures);
- HelixSaver on the embedded log with its in-process view;
- HelixSaver on Kafka with a PostgreSQL view, a real `helix-es project` folding it (get_tuple waits
  until the view holds the put: read-your-writes);
- raw asyncpg: the rows HelixSaver's view keeps (the checkpoint, one blob per new channel version),
  written in one transaction and read back by primary key (anchor for the Kafka figures).
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
from pathlib import Path
from typing import Any

import asyncpg
from langgraph.checkpoint.base import BaseCheckpointSaver, create_checkpoint, empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helix_es.integrations.langgraph import HelixSaver  # noqa: E402

RAW_SCHEMA = """
CREATE TABLE IF NOT EXISTS bench_raw_checkpoints (
    thread_id text, checkpoint_ns text, checkpoint_id text, parent_id text,
    type text, checkpoint bytea, metadata bytea, PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
CREATE TABLE IF NOT EXISTS bench_raw_blobs (
    thread_id text, checkpoint_ns text, channel text, version text, type text, blob bytea,
    PRIMARY KEY (thread_id, checkpoint_ns, channel, version));
"""


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


class Thread:
    """One chat thread's checkpoints, as a graph would put them: each step adds a turn."""

    def __init__(self, saver: BaseCheckpointSaver[Any], thread_id: str, turns: int) -> None:
        self.saver = saver
        self.config: dict[str, Any] = {"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}}
        self.checkpoint = empty_checkpoint()
        self.turns = turns
        self.step = 0

    def next(self) -> tuple[Any, dict[str, Any], dict[str, str]]:
        self.step += 1
        turns = [
            {"role": "user" if i % 2 else "assistant", "content": f"turn {i}: " + "words " * 12}
            for i in range(max(0, self.step - self.turns), self.step)
        ]
        version = self.saver.get_next_version(self.checkpoint["channel_versions"].get("messages"), None)
        checkpoint = create_checkpoint(self.checkpoint, None, self.step)
        checkpoint["channel_values"] = {"messages": turns, "step": self.step}
        checkpoint["channel_versions"] = {"messages": version, "step": version}
        metadata = {"source": "loop", "step": self.step, "writes": {}, "parents": {}}
        return checkpoint, metadata, {"messages": version, "step": version}

    async def put(self) -> None:
        checkpoint, metadata, versions = self.next()
        self.config = await self.saver.aput(self.config, checkpoint, metadata, versions)
        self.checkpoint = checkpoint

    async def get(self) -> None:
        found = await self.saver.aget_tuple(self.config)
        assert found is not None and found.checkpoint["id"] == self.checkpoint["id"]


class Raw:
    """The same rows, straight to PostgreSQL with asyncpg: the checkpoint and its new blobs."""

    def __init__(self, pool: asyncpg.Pool, thread_id: str, turns: int) -> None:
        self.pool = pool
        self.thread = Thread(InMemorySaver(), thread_id, turns)  # InMemorySaver only numbers versions
        self.serde = self.thread.saver.serde
        self.last: str | None = None

    async def put(self) -> None:
        full, metadata, versions = self.thread.next()
        checkpoint = {k: v for k, v in full.items() if k != "channel_values"}
        values = full["channel_values"]
        kind, data = self.serde.dumps_typed(checkpoint)
        _, meta = self.serde.dumps_typed(metadata)
        tid = self.thread.config["configurable"]["thread_id"]
        async with self.pool.acquire() as conn, conn.transaction():
            await conn.execute(
                "INSERT INTO bench_raw_checkpoints VALUES ($1, '', $2, $3, $4, $5, $6)",
                tid,
                checkpoint["id"],
                self.last,
                kind,
                data,
                meta,
            )
            await conn.executemany(
                "INSERT INTO bench_raw_blobs VALUES ($1, '', $2, $3, $4, $5)",
                [(tid, ch, json.dumps(v), *self.serde.dumps_typed(values[ch])) for ch, v in versions.items()],
            )
        self.last = checkpoint["id"]
        self.thread.checkpoint = full

    async def get(self) -> None:
        tid = self.thread.config["configurable"]["thread_id"]
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(
                "SELECT * FROM bench_raw_checkpoints WHERE thread_id = $1 AND checkpoint_ns = '' "
                "AND checkpoint_id = $2",
                tid,
                self.last,
            )
            checkpoint = self.serde.loads_typed((row["type"], row["checkpoint"]))
            versions = [(ch, json.dumps(v)) for ch, v in checkpoint["channel_versions"].items()]
            blobs = await conn.fetch(
                "SELECT channel, type, blob FROM bench_raw_blobs WHERE thread_id = $1 AND checkpoint_ns = '' "
                "AND (channel, version) IN (SELECT * FROM unnest($2::text[], $3::text[]))",
                tid,
                [c for c, _ in versions],
                [v for _, v in versions],
            )
            values = {b["channel"]: self.serde.loads_typed((b["type"], b["blob"])) for b in blobs}
        assert values["step"] == self.thread.step


async def rounds(systems: dict[str, Any], n: int) -> dict[str, dict[str, list[float]]]:
    """Put then get in every system in turn, `n` times (plus a warm-up), timing each call."""
    out: dict[str, dict[str, list[float]]] = {name: {"put": [], "get": [], "get again": []} for name in systems}
    for i in range(n + 20):
        for name, system in systems.items():
            for op, call in (("put", system.put), ("get", system.get), ("get again", system.get)):
                started = time.perf_counter()
                await call()
                if i >= 20:
                    out[name][op].append(time.perf_counter() - started)
    return out


async def main(args: argparse.Namespace) -> dict[str, Any]:
    bootstrap = os.environ.get("HELIX_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    dsn = os.environ.get("HELIX_POSTGRES_DSN", "postgresql://helix:helix@127.0.0.1:5432/helix")
    run = uuid.uuid4().hex[:8]
    tmp = Path(tempfile.mkdtemp(prefix="helix-bench-cp-"))
    kafka_cfg = {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": f"bench-cp-{run}", "partitions": 1},
        "checkpoints": {"store": "postgres", "dsn": dsn, "namespace": f"cp{run}"},
    }
    path = tmp / "projector.json"
    path.write_text(json.dumps(kafka_cfg))
    projector = subprocess.Popen(
        [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=2)
    try:
        await pool.execute(RAW_SCHEMA)
        embedded_cfg = {
            "log": {"type": "embedded", "path": str(tmp / "log"), "fsync": False},
            "checkpoints": {"store": "memory", "namespace": f"cp{run}"},
        }
        async with HelixSaver.from_config(embedded_cfg) as embedded, HelixSaver.from_config(kafka_cfg) as on_kafka:
            systems = {
                "InMemorySaver": Thread(InMemorySaver(), f"t{run}", args.messages),
                "HelixSaver, embedded": Thread(embedded, f"t{run}", args.messages),
                "HelixSaver, Kafka + PostgreSQL": Thread(on_kafka, f"t{run}", args.messages),
                "raw asyncpg rows": Raw(pool, f"t{run}", args.messages),
            }
            timings = await rounds(systems, args.n)
    finally:
        await pool.execute("DROP TABLE IF EXISTS bench_raw_checkpoints, bench_raw_blobs")
        await pool.close()
        projector.send_signal(signal.SIGTERM)
        projector.wait(30)
    figures = {
        name: {op: {"p50_ms": pct(s, 0.5), "p99_ms": pct(s, 0.99)} for op, s in ops.items()}
        for name, ops in timings.items()
    }
    anchors = {"HelixSaver, embedded": "InMemorySaver", "HelixSaver, Kafka + PostgreSQL": "raw asyncpg rows"}
    ratios = {
        name: {op: figures[name][op]["p50_ms"] / figures[anchor][op]["p50_ms"] for op in ("put", "get", "get again")}
        for name, anchor in anchors.items()
    }
    return {"n": args.n, "messages": args.messages, "figures": figures, "ratios_p50": ratios}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=500)
    parser.add_argument("--messages", type=int, default=20, help="chat turns in the thread's messages channel")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = asyncio.run(main(args))
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.n} rounds, a messages channel of {args.messages} turns; p50 / p99 ms")
        for name, ops in out["figures"].items():
            print(f"{name:>32}: " + "   ".join(f"{op} {t['p50_ms']:.3f} / {t['p99_ms']:.3f}" for op, t in ops.items()))
        for name, r in out["ratios_p50"].items():
            print(f"{name:>32}: " + ", ".join(f"{op} {x:.2f}x" for op, x in r.items()) + " its anchor's p50")
