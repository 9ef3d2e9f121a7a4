"""What HelixSession's hand-over to helix-es's own loop costs: `add_items` of one item and
`get_items` against the same work done on the caller's loop with an async memory (the anchor:
`item_message` and `add`, `get` and `message_items`, as HelixSession did before it moved its
memory to helix-es's loop), on one embedded log, in the same run.

    python bench/agents_session.py [--times 300] [--json]

Each side writes `--times` single-item adds into a session of its own, then reads it `--times`
times (a small session: the hand-over, not the fold, is what differs). p50 and p90 in ms.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

try:
    from bench import cli as bench_cli
except ModuleNotFoundError:  # run as `python bench/<script>.py`: bench/ itself is on the path
    import cli as bench_cli  # type: ignore[no-redef]
from helix_es import open_memory
from helix_es.client.protocol import Memory
from helix_es.integrations.openai_agents import HelixSession, item_message, message_items


def item(i: int) -> Any:
    return {"role": "user", "content": f"item {i}"}


async def items(memory: Memory) -> list[Any]:
    return [item for m in await memory.get() for item in message_items(m)]


async def timed(times: int, call: Callable[[int], Awaitable[Any]]) -> dict[str, float]:
    took = []
    for i in range(times):
        start = time.perf_counter()
        await call(i)
        took.append((time.perf_counter() - start) * 1000)
    took.sort()
    return {"p50_ms": statistics.median(took), "p90_ms": took[int(len(took) * 0.9)]}


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        config = {"log": {"type": "embedded", "path": folder, "fsync": False}, "memory": {"type": "conversation"}}
        async with open_memory(config, session_id="anchor") as memory:
            anchor_add = await timed(args.times, lambda i: memory.add(item_message(item(i))))
            anchor_get = await timed(args.times, lambda i: items(memory))
        async with HelixSession("session", config) as session:
            add = await timed(args.times, lambda i: session.add_items([item(i)]))
            get = await timed(args.times, lambda i: session.get_items())
    return {
        "times": args.times,
        "anchor_add": anchor_add,
        "anchor_get": anchor_get,
        "add_items": add,
        "get_items": get,
        "add_ratio": add["p50_ms"] / anchor_add["p50_ms"],
        "get_ratio": get["p50_ms"] / anchor_get["p50_ms"],
    }


if __name__ == "__main__":
    parsed = bench_cli.parser(__doc__)
    parsed.add_argument("--times", type=int, default=300)
    done = bench_cli.run(parsed, main)
    if done is not None:
        _, r = done
        for name in ("anchor_add", "add_items", "anchor_get", "get_items"):
            print(f"{name:>10}: p50 {r[name]['p50_ms']:.3f} ms, p90 {r[name]['p90_ms']:.3f} ms")
        print(f"add_items / add: {r['add_ratio']:.2f}x, get_items / get: {r['get_ratio']:.2f}x (p50)")
