"""LangGraph `prune(keep_latest)` on a long thread: what it costs and what it frees, against listing
the same thread (`alist`, which reads and decodes every checkpoint once), in the same run.

    python bench/prune.py [--steps 200] [--turn 200] [--json]

A graph that appends one chat turn of `--turn` characters per step to a list channel runs `--steps`
steps on one thread, on the embedded log (its view in process). Then: `alist` of the whole thread
(the anchor), `aprune(keep_latest)` timed (the saver decodes every checkpoint to find the blobs only
deleted checkpoints refer to), and the blob bytes the view held before and after.
"""

from __future__ import annotations

import argparse
import json
import operator
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any, TypedDict

from langgraph.graph import END, START, StateGraph

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helix_es.integrations.langgraph import HelixSaver  # noqa: E402

try:
    from bench import cli as bench_cli
except ModuleNotFoundError:  # run as `python bench/<script>.py`: bench/ itself is on the path
    import cli as bench_cli  # type: ignore[no-redef]


def graph(turn: int) -> Any:
    state = TypedDict("state", {"messages": Annotated[list[str], operator.add]})  # noqa: UP013

    def node(_: Any) -> dict[str, Any]:
        return {"messages": ["x" * turn]}

    built: Any = StateGraph(state)
    built.add_node("n", node)
    built.add_edge(START, "n")
    built.add_edge("n", END)
    return built


async def blob_bytes(saver: HelixSaver, thread: str, pairs: set[tuple[str, str]]) -> int:
    reads, namespace = saver._log.reads, saver._log.namespace
    total = 0
    for pair in pairs:
        for value in (await reads.blobs(namespace, thread, "", [pair])).values():
            total += len(value.data)
    return total


async def main(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        config = {"log": {"path": f"{tmp}/log", "fsync": False}, "checkpoints": {"namespace": "bench-prune"}}
        async with HelixSaver.from_config(config) as saver:
            app = graph(args.turn).compile(checkpointer=saver)
            thread: Any = {"configurable": {"thread_id": "t"}}
            for i in range(args.steps):
                await app.ainvoke({"messages": [f"in{i}"]}, thread)
                if (i + 1) % 50 == 0:
                    print(f"prune: {i + 1}/{args.steps} steps", file=sys.stderr)
            started = time.perf_counter()
            listed = [t async for t in saver.alist(thread)]
            list_ms = (time.perf_counter() - started) * 1000
            pairs = {(ch, json.dumps(v)) for t in listed for ch, v in t.checkpoint["channel_versions"].items()}
            before = await blob_bytes(saver, "t", pairs)
            started = time.perf_counter()
            await saver.aprune(["t"], strategy="keep_latest")
            prune_ms = (time.perf_counter() - started) * 1000
            after = await blob_bytes(saver, "t", pairs)
            kept = len([t async for t in saver.alist(thread)])
    return {
        "checkpoints": len(listed),
        "kept": kept,
        "list_ms": round(list_ms, 1),
        "prune_ms": round(prune_ms, 1),
        "prune_per_list": round(prune_ms / list_ms, 2),
        "blob_bytes_before": before,
        "blob_bytes_after": after,
    }


def cli() -> None:
    parsed = bench_cli.parser(__doc__)
    parsed.add_argument("--steps", type=int, default=200)
    parsed.add_argument("--turn", type=int, default=200, help="characters of each chat turn")
    ran = bench_cli.run(parsed, main)
    if ran is None:
        return
    args, result = ran
    print(f"{result['checkpoints']} checkpoints of one thread, each step adding a {args.turn}-character turn")
    print(f"  alist of the whole thread (anchor)   {result['list_ms']:>9.1f} ms")
    print(f"  prune(keep_latest)                   {result['prune_ms']:>9.1f} ms  ({result['prune_per_list']}x)")
    print(f"  checkpoints kept                     {result['kept']:>9}")
    print(f"  blob bytes held before / after       {result['blob_bytes_before']:,} / {result['blob_bytes_after']:,}")


if __name__ == "__main__":
    cli()
