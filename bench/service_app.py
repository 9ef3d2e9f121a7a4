"""The service's own layer: CPU a turn spent in `helix-es serve`'s app around the memory, next to the
memory's own add and get, in the same run.

    python bench/service_app.py [--sessions 50] [--turns 40] [--rounds 3] [--json]

The ASGI app (`build_app`, access lines on, kept and dropped at the end) is called directly, with no sockets
and no uvicorn: a turn is a POST of one message and a GET of the session's window (a sliding window
of 30 on the embedded log, its view in process). The anchor is the same turn on the app's own
memories (`Memories`), the add and the get called directly. `--sessions` sessions run their turns
at once; rounds alternate. Figures are the CPU time of this process's thread per turn (not the
wall clock: other processes on the machine do not count), so the difference is what the service
spends on a turn besides the memory's work: the key and namespace checks, reading the body,
building the message, the answers' JSON, the access line and the metrics.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from helix_es import Message  # noqa: E402
from helix_es.config import load_config  # noqa: E402
from helix_es.service.app import Options, build_app  # noqa: E402
from helix_es.service.keys import Keys  # noqa: E402
from helix_es.service.lane import Lane  # noqa: E402

try:
    from bench import cli as bench_cli
except ModuleNotFoundError:  # run as `python bench/<script>.py`: bench/ itself is on the path
    import cli as bench_cli  # type: ignore[no-redef]

KEY = "bench-service-app-key-0123456789"
NAMESPACE = "app"
WORDS = "words of a typical chat message " * 3


async def call(app: Lane, method: str, path: str, body: bytes = b"") -> int:
    """One request through the ASGI app; its status."""
    headers = [(b"host", b"bench"), (b"authorization", f"Bearer {KEY}".encode())]
    if body:
        headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    scope = {
        **{"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method, "scheme": "http"},
        **{"path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers},
        **{"client": ("127.0.0.1", 1), "server": ("127.0.0.1", 2), "state": {}},
    }
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    status: int = sent[0]["status"]
    return status


async def main(args: argparse.Namespace) -> dict[str, Any]:
    tmp = tempfile.mkdtemp(prefix="helix-bench-app-")
    memory = {"type": "sliding-window", "window_size": 30, "namespace": NAMESPACE}
    config = load_config({"log": {"type": "embedded", "path": f"{tmp}/log"}, "memory": memory})
    app = build_app(config, Keys.parse({KEY: ["*"]}), Options())
    service = app.state.service
    memories = service.memories

    async def over_http(sid: str, i: int) -> None:
        body = json.dumps({"role": "user", "content": f"{sid} turn {i}: {WORDS}"}).encode()
        path = f"/v1/{NAMESPACE}/sessions/{sid}/messages"
        if await call(app, "POST", path, body) != 201 or await call(app, "GET", path) != 200:
            raise RuntimeError(f"the app refused a turn of {sid}")

    async def direct(sid: str, i: int) -> None:
        await (await memories.memory(NAMESPACE, sid)).add(Message("user", f"{sid} turn {i}: {WORDS}"))
        await (await memories.memory(NAMESPACE, sid)).get()

    async def round_of(one: Callable[[str, int], Awaitable[None]], prefix: str, first: int) -> float:
        async def session(s: int) -> None:
            for i in range(first, first + args.turns):
                await one(f"{prefix}{s}", i)

        t = time.thread_time()
        await asyncio.gather(*(session(s) for s in range(args.sessions)))
        return (time.thread_time() - t) / (args.sessions * args.turns) * 1e6

    systems = {"app": (over_http, "h"), "memory": (direct, "d")}
    for one, prefix in systems.values():  # warm-up: the memories open, the windows fill
        await round_of(one, prefix, 0)
    rounds: dict[str, list[float]] = {name: [] for name in systems}
    try:
        for r in range(args.rounds):
            order = list(systems) if r % 2 == 0 else list(systems)[::-1]
            for name in order:
                one, prefix = systems[name]
                rounds[name].append(await round_of(one, prefix, (r + 1) * args.turns))
    finally:
        with contextlib.redirect_stderr(io.StringIO()):  # the access lines, made as the server makes them
            await service.close()
    app_us, memory_us = statistics.median(rounds["app"]), statistics.median(rounds["memory"])
    return {
        "sessions": args.sessions,
        "turns": args.turns,
        "rounds": args.rounds,
        "app_cpu_us_per_turn": rounds["app"],
        "memory_cpu_us_per_turn": rounds["memory"],
        "app_cpu_us_per_turn_median": app_us,
        "memory_cpu_us_per_turn_median": memory_us,
        "layer_cpu_us_per_turn": app_us - memory_us,
        "app_per_memory": app_us / memory_us,
    }


def cli() -> None:
    parsed = bench_cli.parser(__doc__)
    parsed.add_argument("--sessions", type=int, default=50, help="sessions running their turns at once")
    parsed.add_argument("--turns", type=int, default=40, help="turns (a POST, then a GET) per session and round")
    parsed.add_argument("--rounds", type=int, default=3)
    ran = bench_cli.run(parsed, main)
    if ran is None:
        return
    _args, r = ran
    print(f"{r['sessions']} sessions x {r['turns']} turns x {r['rounds']} rounds; CPU of this thread per turn")
    print(f"  the memory's add and get (anchor)   {r['memory_cpu_us_per_turn_median']:>7.0f} us")
    app_us, ratio = r["app_cpu_us_per_turn_median"], r["app_per_memory"]
    print(f"  the same turn through the app       {app_us:>7.0f} us  ({ratio:.2f}x)")
    print(f"  the service's layer                 {r['layer_cpu_us_per_turn']:>7.0f} us a turn")


if __name__ == "__main__":
    cli()
