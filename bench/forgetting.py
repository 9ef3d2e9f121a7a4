"""What forgetting costs: the policy worker over 100,000 items, and `add` beside a policy at work.

    python bench/forgetting.py [--part policy,add] [--items 100000] [--sessions 1000]
                               [--add-sessions 20] [--turns 40] [--rounds 5] [--every 0.25s] [--json]

(a) `policy`: an embedded log of `--items` messages over `--sessions` sessions, said over the last
    120 days (imported: `occurred_at`), and a long-term memory with `forget: {max_age: 720h, budget:
    --items // 4}`. Opening the memory folds the log into the view, and the policy's index reads
    along (the open is timed with and without a policy); then the worker's time is measured in its
    parts: reading the log into its index (`load`: nothing left to read after the open), deciding
    (`due`: every item looked at), and recording (`MemoryForgotten` appended, one per session and
    rule, and folded by the view). The anchor, in the same run, is decoding the same log with fastavro alone.
    Target: the policy applied to 100,000 items in <= 10 s of worker time (load + decide + record).
(b) `add`: `add` latency on the embedded log (no fsync: the disk's sync tail would drown the
    difference) into a long-term memory whose policy runs every `--every` (0.25 s: a stress, the
    default is a minute) and forgets all the time (`budget: 200`), next to the same memory without
    a policy; `--rounds` rounds alternate them, and each round runs the no-policy config twice (the
    control: what two identical configs give here).
    Target: add p99 with the policy <= 1.1x without (the median of the rounds' ratios).

A miss is a `MISSED:` line on stderr and exit status 3.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cli import missed, parser, run  # bench/, this script's directory
from rebuild import anchor as fastavro_rate

from helix_es import Message, open_memory
from helix_es.log.codec import Codec
from helix_es.log.embedded import EmbeddedLog
from helix_es.model.events import Event, MessageAdded

WORKER_TARGET_S = 10.0
P99_RATIO_TARGET = 1.1
NS = "bench-forget"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def write_history(path: Path, items: int, sessions: int) -> list[bytes]:
    """`items` messages over `sessions` sessions, said over the last 120 days, oldest first; their bytes."""
    now = datetime.now(UTC)
    log = EmbeddedLog(str(path), fsync=False)
    codec = Codec()
    data: list[bytes] = []
    try:
        batch: list[Event] = []
        for i in range(items):
            said = now - timedelta(days=120) + timedelta(days=120) * i / items
            message = Message(
                "user" if i % 2 == 0 else "assistant", f"turn {i}: notes on topic {i % 97}", occurred_at=said
            )
            batch.append(Event(NS, f"s{i % sessions}", MessageAdded(message)))
            data.append(codec.encode(batch[-1]))
            if len(batch) == 5_000:
                await log.append_many(batch)
                batch = []
        if batch:
            await log.append_many(batch)
    finally:
        await log.close()
    return data


async def part_policy(args: Any) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp)
        data = await write_history(path, args.items, args.sessions)
        budget = args.items // 4
        cfg = {
            "log": {"path": str(path), "fsync": False},
            "memory": {
                "type": "long-term",
                "namespace": NS,
                "forget": {"max_age": "720h", "budget": budget, "every": "1h"},
            },
        }
        plain = {"log": cfg["log"], "memory": {"type": "long-term", "namespace": NS}}
        started = time.perf_counter()
        async with open_memory(plain, session_id="reader"):
            opened_plain = time.perf_counter() - started
        started = time.perf_counter()
        async with open_memory(cfg, session_id="reader") as mem:
            opened = time.perf_counter() - started  # the policy's index reads along with the view's catch-up
            backend: Any = mem.backend  # type: ignore[attr-defined]
            (job,) = backend._forgetting.values()
            t0 = time.perf_counter()
            await job.load()
            t1 = time.perf_counter()
            events = job.index.due(datetime.now(UTC))
            t2 = time.perf_counter()
            await backend.append_many(events)  # the worker appends these; the view folds them inline
            t3 = time.perf_counter()
            left = len(await mem.get())
            forgotten = args.items - left
        anchor = len(data) / fastavro_rate(data)
    return {
        "items": args.items,
        "sessions": args.sessions,
        "open_s": round(opened, 2),
        "open_without_policy_s": round(opened_plain, 2),
        "load_s": round(t1 - t0, 2),
        "decide_s": round(t2 - t1, 3),
        "record_s": round(t3 - t2, 2),
        "worker_s": round(t3 - t0, 2),
        "events": len(events),
        "forgotten": forgotten,
        "kept": left,
        "budget": budget,
        "fastavro_decode_s": round(anchor, 2),
    }


async def add_round(path: Path, memory: dict[str, Any], sessions: int, turns: int) -> list[float]:
    ns = f"add-{time.monotonic_ns()}"
    cfg = {"log": {"path": str(path), "fsync": False}, "memory": {**memory, "namespace": ns}}
    took: list[float] = []
    async with AsyncExitStack() as stack:
        mems = [await stack.enter_async_context(open_memory(cfg, session_id=f"s{i}")) for i in range(sessions)]
        for turn in range(turns):
            for i, mem in enumerate(mems):
                message = Message("user", f"session {i} turn {turn}: what I said")
                started = time.perf_counter()
                await mem.add(message)
                took.append(time.perf_counter() - started)
                await asyncio.sleep(0.002)  # the agent's own work between turns, untimed
    return took


async def part_add(args: Any) -> dict[str, Any]:
    plain = {"type": "long-term"}
    policy = {"type": "long-term", "forget": {"budget": 200, "every": args.every}}
    ratios, controls, with_all, without_all = [], [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            without = await add_round(Path(tmp), plain, args.add_sessions, args.turns)
            with_ = await add_round(Path(tmp), policy, args.add_sessions, args.turns)
            again = await add_round(Path(tmp), plain, args.add_sessions, args.turns)
            ratios.append(round(percentile(with_, 0.99) / percentile(without, 0.99), 2))
            controls.append(round(percentile(again, 0.99) / percentile(without, 0.99), 2))
            with_all += with_
            without_all += without
    return {
        "every": args.every,
        "adds": len(with_all),
        "without_p50_ms": round(percentile(without_all, 0.5) * 1e3, 3),
        "without_p99_ms": round(percentile(without_all, 0.99) * 1e3, 3),
        "with_p50_ms": round(percentile(with_all, 0.5) * 1e3, 3),
        "with_p99_ms": round(percentile(with_all, 0.99) * 1e3, 3),
        "p99_ratio_rounds": ratios,
        "p99_ratio": round(statistics.median(ratios), 2),
        "control_ratio_rounds": controls,
        "control_ratio": round(statistics.median(controls), 2),
    }


async def main(args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    parts = args.part.split(",")
    if "policy" in parts:
        out["policy"] = await part_policy(args)
    if "add" in parts:
        out["add"] = await part_add(args)
    return out


def report(out: dict[str, Any], say: Any = print) -> list[str]:
    misses = []
    if "policy" in out:
        p = out["policy"]
        say(
            f"policy over {p['items']:,} items ({p['sessions']:,} sessions; max_age 720h, budget {p['budget']:,}):"
            f" worker {p['worker_s']} s = load {p['load_s']} s + decide {p['decide_s']} s + record {p['record_s']} s"
            f" (target <= {WORKER_TARGET_S} s); {p['forgotten']:,} forgotten in {p['events']:,} events,"
            f" {p['kept']:,} kept"
        )
        say(
            f"  anchor: fastavro alone decodes the same log in {p['fastavro_decode_s']} s;"
            f" the open folded it in {p['open_s']} s with the policy's index reading along,"
            f" {p['open_without_policy_s']} s without a policy"
        )
        if p["worker_s"] > WORKER_TARGET_S:
            misses.append(f"the policy took {p['worker_s']} s of worker time over {p['items']:,} items")
    if "add" in out:
        a = out["add"]
        say(
            f"add into long-term, {a['adds']:,} per config: without a policy p50 {a['without_p50_ms']} ms, p99"
            f" {a['without_p99_ms']} ms; with a policy forgetting every {a['every']} p50 {a['with_p50_ms']} ms,"
            f" p99 {a['with_p99_ms']} ms"
        )
        say(
            f"  p99 with / without, round by round: {', '.join(f'{r}x' for r in a['p99_ratio_rounds'])};"
            f" median {a['p99_ratio']}x (target <= {P99_RATIO_TARGET}x)"
        )
        say(
            f"  control, the no-policy config again / first: {', '.join(f'{r}x' for r in a['control_ratio_rounds'])};"
            f" median {a['control_ratio']}x (what the machine's noise alone gives)"
        )
        if a["p99_ratio"] > P99_RATIO_TARGET:
            misses.append(f"add p99 with a forgetting policy {a['p99_ratio']}x without")
    return misses


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--part", default="policy,add")
    cli.add_argument("--items", type=int, default=100_000)
    cli.add_argument("--sessions", type=int, default=1_000)
    cli.add_argument("--add-sessions", type=int, default=20)
    cli.add_argument("--turns", type=int, default=40)
    cli.add_argument("--rounds", type=int, default=5)
    cli.add_argument("--every", default="0.25s", help="how often the policy runs in the add part")
    done = run(cli, main)
    if done is not None:
        raise SystemExit(missed(report(done[1])))
