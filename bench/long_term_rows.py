"""Long-term memory on PostgreSQL: the view kept as rows (`LongTermRows` over `PostgresRows`) next to
a baseline adapter, in the same run, on the same events.

    python bench/long_term_rows.py [--n 20000 100000] [--queries 200] [--json]

Each run folds `n` messages (sessions of 50 in namespaces of 500, batches of 500 records per
partition, as a projector writes them) into a fresh table, then reads: `get` of a random namespace
(500 messages), `search` in it for a term in one row (`ref-NNNNNN`) and for a word in every 10th
row (LIMIT 5), both with a `want` position, as the service reads after a write. Reports events/s
applied and the p50 of each read in ms, and the ratio rows / baseline. Every answer of the two is
checked equal. The baseline is `--baseline` (a `module:Class` long-term store taking
`(dsn, table=..., name=...)`); without one, rows only. Needs HELIX_POSTGRES_DSN.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import random
import statistics
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg

from helix_es import Message
from helix_es.model.events import Event, MessageAdded, Position, Record
from helix_es.projection.long_term import LongTermRows
from helix_es.stores.ports import SessionKey
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.views.long_term_rows import tables

T0 = datetime(2030, 1, 1, tzinfo=UTC)
WORDS = ["flight", "hotel", "invoice", "meeting", "passport", "train", "budget", "dentist", "weather", "visa"]
PER_NS, PER_SESSION, PARTITIONS, BATCH = 500, 50, 6, 500
TOPIC = "bench-lt-rows"


def records(n: int) -> list[list[Record]]:
    """The events, as batches of one partition each, in offset order within a partition."""
    by_partition: list[list[Record]] = [[] for _ in range(PARTITIONS)]
    for i in range(n):
        ns = f"ns{i // PER_NS}"
        p = (i // PER_NS) % PARTITIONS
        role = "user" if i % 2 else "assistant"
        text = (
            f"turn {i}: about the {WORDS[i % len(WORDS)]}, " + "words of a typical chat message " * 2 + f"ref-{i:06d}"
        )
        event = Event(
            ns, f"s{i // PER_SESSION}", MessageAdded(Message(role, text)), timestamp=T0 + timedelta(microseconds=i)
        )
        by_partition[p].append(Record(event, Position(TOPIC, p, len(by_partition[p]))))
    return [part[i : i + BATCH] for part in by_partition for i in range(0, len(part), BATCH)]


def p50(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


async def run(stores: dict[str, Any], n: int, queries: int, batches: list[list[Record]]) -> dict[str, dict[str, float]]:
    """Apply to each store in turn, then read them in turns (each query of each store in a row, so a
    noisy neighbour slows both alike), checking their answers equal."""
    out: dict[str, dict[str, float]] = {}
    for name, store in stores.items():
        t = time.perf_counter()
        for batch in batches:
            await store.apply(batch)
        out[name] = {"apply_eps": n / (time.perf_counter() - t)}
    rng = random.Random(7)
    namespaces = n // PER_NS
    tops = {p: await next(iter(stores.values())).checkpoint(TOPIC, p) for p in range(PARTITIONS)}
    reads: dict[tuple[str, str], list[float]] = {}
    for q in range(queries + 10):
        k = rng.randrange(namespaces)
        key = SessionKey(f"ns{k}", "s")
        want = Position(TOPIC, k % PARTITIONS, tops[k % PARTITIONS])
        term = f"ref-{k * PER_NS + rng.randrange(PER_NS):06d}"
        for read, args in (
            ("get", ()),
            ("search_rare", (term, 5)),
            ("search_common", (WORDS[q % len(WORDS)], 5)),
        ):
            answers = []
            for name, store in stores.items():
                call = store.get(key, want) if read == "get" else store.search(key, *args, want)
                t = time.perf_counter()
                got = await call
                took = time.perf_counter() - t
                assert got is not None, (name, read)
                if q >= 10:
                    reads.setdefault((name, read), []).append(took)
                answers.append([m.to_json() for m in got])
            assert all(a == answers[0] for a in answers), f"{read} answered differently"
    for (name, read), samples in reads.items():
        out[name][f"{read}_p50_ms"] = p50(samples)
    return out


async def drop(dsn: str, *names: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        for t in names:
            await conn.execute(f'DROP TABLE IF EXISTS "{t}"')
        await conn.execute("DELETE FROM helix_checkpoints WHERE view LIKE 'bench-lt-rows%'")
        await conn.execute("DELETE FROM helix_row_marks WHERE view LIKE 'bench-lt-rows%'")
    finally:
        await conn.close()


async def main(sizes: list[int], queries: int, baseline: str | None) -> dict[str, Any]:
    dsn = os.environ.get("HELIX_POSTGRES_DSN", "postgresql://helix:helix@127.0.0.1:5432/helix")
    result: dict[str, Any] = {}
    for n in sizes:
        batches = records(n)
        stores: dict[str, Any] = {}
        table = f"bench_lt_rows_{n}"
        made = [table, f"{table}_retracted"]
        stores["rows"] = LongTermRows(PostgresRows(dsn, f"bench-lt-rows-{n}", tables(table)), table)
        if baseline:
            module, cls = baseline.split(":")
            made.append(f"bench_lt_base_{n}")
            stores["baseline"] = getattr(importlib.import_module(module), cls)(
                dsn, table=made[-1], name=f"bench-lt-rows-base-{n}"
            )
        await drop(dsn, *made)
        try:
            for name, figures in (await run(stores, n, queries, batches)).items():
                result[f"{name}_{n}"] = figures
            if baseline:
                r, b = result[f"rows_{n}"], result[f"baseline_{n}"]
                result[f"ratio_{n}"] = {k: r[k] / b[k] for k in r}
        finally:
            for store in stores.values():
                await store.close()
            await drop(dsn, *made)
    return result


def report(result: dict[str, Any]) -> None:
    for name, figures in result.items():
        print(f"{name:16} " + "  ".join(f"{k} {v:,.2f}" for k, v in figures.items()))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, nargs="+", default=[20_000, 100_000])
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--baseline", help="module:Class of a long-term store to compare with")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = asyncio.run(main(args.n, args.queries, args.baseline))
    print(json.dumps(out)) if args.json else report(out)
