"""The command-line tail the benchmark scripts share: their arguments, `--json`, one run of `main`."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

MISSED_EXIT = 3  # the run itself went well, and a target it prints was missed


def missed(lines: Iterable[str]) -> int:
    """One `MISSED: ...` line on stderr per target missed; the exit code: MISSED_EXIT if any, else 0."""
    found = list(lines)
    for line in found:
        print(f"MISSED: {line}", file=sys.stderr, flush=True)
    return MISSED_EXIT if found else 0


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by the script docstring's first paragraph."""
    return argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])


def run(
    parsed: argparse.ArgumentParser, main: Callable[[argparse.Namespace], Awaitable[dict[str, Any]]]
) -> tuple[argparse.Namespace, dict[str, Any]] | None:
    """Parse the arguments (with `--json`) and run `main` once; with `--json` print its result as
    JSON and return None, else return the arguments and the result for the script to print."""
    parsed.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parsed.parse_args()
    result = asyncio.run(main(args))
    if args.json:
        print(json.dumps(result))
        return None
    return args, result


def child_env(**extra: str) -> dict[str, str]:
    """The environment for a helix-es process a bench starts: this tree first on PYTHONPATH."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


async def delete_topics(bootstrap: str, prefix: str) -> None:
    """Delete every Kafka topic whose name starts with `prefix` (a bench's own)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if t.startswith(prefix)]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()
