"""Restart-to-first-read: a projector SIGKILLed and started again at once, until it serves a read.

    python bench/recovery.py [--runs 5] [--before REF] [--session-timeout 10] [--json]

Needs HELIX_KAFKA_BOOTSTRAP and HELIX_REDIS_URL (eval "$(scripts/services up)"). Each run starts
`helix-es project` for a conversation view in Redis (a topic of 4 partitions, a prefix and namespace
of its own, its topics deleted afterwards),
waits until it serves a read-your-writes `get`, SIGKILLs it, adds one message, starts it again and
times from that start to the first `get` that returns the message. "after" is this tree (static
group membership: the restart takes the dead member's place); `--before REF` also runs the code of
git REF (unpacked with `git archive` into a temporary directory), e.g. the commit before static
membership, whose restart waits for the group to expire the dead member (the session timeout).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cli import delete_topics  # noqa: E402  # bench/, this script's directory

from helix_es import Message, open_memory  # noqa: E402


def _config(prefix: str) -> dict[str, Any]:
    return {
        "log": {
            "type": "kafka",
            "bootstrap_servers": os.environ["HELIX_KAFKA_BOOTSTRAP"],
            "partitions": 4,
            "topic_prefix": prefix,
        },
        "memory": {
            "type": "conversation",
            "store": "redis",
            "redis_url": os.environ["HELIX_REDIS_URL"],
            "namespace": prefix,
            "read_timeout": 60,
        },
    }


def _start(tree: Path, cfg: Path, runtime: Path, session_timeout: float) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "helix_es.cli", "project", "--config", str(cfg)]
    cmd += ["--session-timeout", str(session_timeout)]
    env = {**os.environ, "PYTHONPATH": str(tree), "HELIX_RUNTIME_DIR": str(runtime)}
    env.pop("HELIX_INSTANCE_ID", None)
    return subprocess.Popen(cmd, cwd=tree, stderr=subprocess.DEVNULL, env=env)


async def _one(tree: Path, work: Path, session_timeout: float) -> float:
    prefix = f"bench-rec-{uuid.uuid4().hex[:8]}"
    cfg = _config(prefix)
    path = work / f"{prefix}.yaml"
    path.write_text(json.dumps(cfg))
    runtime = work / prefix
    proc = _start(tree, path, runtime, session_timeout)
    try:
        async with open_memory(cfg, session_id="s") as mem:
            await mem.add(Message("user", "before"))
            await mem.get()  # serving
            proc.kill()
            proc.wait()
            await mem.add(Message("user", "after"))
            started = time.monotonic()
            proc = _start(tree, path, runtime, session_timeout)
            got = await mem.get()
            took = time.monotonic() - started
        assert [m.content for m in got] == ["before", "after"], got
        return took
    finally:
        proc.kill()
        proc.wait()
        await delete_topics(os.environ["HELIX_KAFKA_BOOTSTRAP"], prefix)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--before", help="git ref of the code to compare with (e.g. the commit before)")
    parser.add_argument("--session-timeout", type=float, default=10.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        trees = {"after": ROOT}
        if args.before:
            old = work / "before"
            old.mkdir()
            archive = subprocess.run(["git", "archive", args.before], cwd=ROOT, check=True, capture_output=True)
            subprocess.run(["tar", "-x", "-C", str(old)], input=archive.stdout, check=True)
            trees = {"before": old, **trees}
        results = {}
        for label, tree in trees.items():
            times = [await _one(tree, work, args.session_timeout) for _ in range(args.runs)]
            results[label] = {"median_s": statistics.median(times), "max_s": max(times), "runs": times}
    if args.json:
        print(json.dumps(results))
        return
    for label, r in results.items():
        runs = ", ".join(f"{t:.2f}" for t in r["runs"])
        print(f"{label:>6}: restart to first read p50 {r['median_s']:.2f} s, max {r['max_s']:.2f} s ({runs})")


if __name__ == "__main__":
    asyncio.run(main())
