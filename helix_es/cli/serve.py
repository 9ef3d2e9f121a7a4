"""`helix-es serve`: the memory as a REST service (helix_es.service.app), served by uvicorn."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from helix_es.config import load_config
from helix_es.model.errors import ConfigError


def _views_lag(source: str) -> Any:
    """The lag function /readyz and /metrics call: each view's total lag, from the projectors' lag report."""
    from projectors.lag import lag

    async def views_lag() -> dict[str, int]:
        report = await lag(source)
        return {view: report.total(view) for view in {p.view for p in report.partitions}}

    return views_lag


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop when installed (the `service` extra): less CPU per request than asyncio's own."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def _reload_keys(app: Any, path: Path) -> None:
    """SIGHUP: read the keys file again (rotate a key without a restart); a bad file keeps the old keys."""
    from helix_es.service.keys import load_keys

    try:
        keys = load_keys(path)
    except ConfigError as exc:
        print(f"helix-es serve: SIGHUP: kept the previous keys: {exc}", file=sys.stderr, flush=True)
        return
    app.state.service.keys = keys
    print(f"helix-es serve: SIGHUP: {len(keys)} key(s) read from {path}", file=sys.stderr, flush=True)


def _loop_name() -> str:
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def _positive(kind: type[int] | type[float]) -> Any:
    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
        if value < 0:
            raise argparse.ArgumentTypeError(f"must be 0 or more, got {text!r}")
        return value

    return parse


async def _run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from helix_es.service.app import Options, build_app
        from helix_es.service.keys import load_keys
        from helix_es.service.wire import http_protocol
    except ImportError as exc:
        print(f"helix-es serve: needs starlette and uvicorn (pip install 'helix-es[service]'): {exc}", file=sys.stderr)
        return 1

    config = load_config(args.config, agent=args.agent)
    keys = load_keys(args.keys)
    if args.max_body < 1:
        raise ConfigError("--max-body", f"must be at least 1 byte, got {args.max_body}")
    lag = _views_lag(args.config) if config.log.kind.groups else None
    options = Options(
        max_body=args.max_body,
        session_idle=args.session_idle,
        lag_bound=args.lag_bound,
        access_log=args.access_log,
    )
    app = build_app(config, keys, options, lag=lag)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=args.host,
            port=args.port,
            log_config=None,  # the command's logging: stderr
            access_log=False,  # ours is JSON, and names routes, never paths or keys
            lifespan="on",
            http=http_protocol(),
            ws="none",
            timeout_graceful_shutdown=args.grace,
            server_header=False,
            timeout_keep_alive=int(args.keep_alive),
            proxy_headers=False,  # no address is logged or trusted: nothing to take from X-Forwarded-For
        )
    )
    # uvicorn stops on SIGTERM, lets in-flight requests finish, runs the lifespan's shutdown (memories
    # closed), then raises the signal again: this handler takes it, so the command exits 0.
    stopped: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, frame: stopped.append(sig))
    asyncio.get_running_loop().add_signal_handler(signal.SIGHUP, _reload_keys, app, args.keys)
    print(
        f"helix-es serve: {config.log.type} log, {len(keys)} key(s), {_loop_name()} loop, on "
        f"http://{args.host}:{args.port} (/openapi.json lists the routes)",
        file=sys.stderr,
        flush=True,
    )
    await server.serve()
    return 0 if server.started else 1


def add_command(subparsers: Any) -> None:
    """Register `helix-es serve` (helix_es.cli.COMMAND_MODULES)."""
    p = subparsers.add_parser(
        "serve",
        help="serve the memory over HTTP (REST, JSON; API keys per namespace; a web console at /ui/)",
        description="Serve the memory the config describes as a REST service: add, get, search and clear a "
        "session's messages, its audit and erasure, a namespace's sessions, /healthz, /readyz, /metrics "
        "(Prometheus), /openapi.json and the web console at /ui/. Every /v1 request needs "
        "'Authorization: Bearer <key>' with a key the --keys file grants the namespace. SIGTERM stops it "
        "gracefully (in-flight requests finish, exit 0); SIGHUP reads the keys file again.",
        epilog='keys file: {"<key>": ["ns1", "tenant-*"], "sha256:<hex>": ["*"], '
        '"<admin key>": {"namespaces": ["*"], "admin": true}}.  Example: helix-es serve --config helix.yaml '
        "--keys keys.json --port 8080; curl -H 'Authorization: Bearer <key>' "
        "localhost:8080/v1/agent-a/sessions/s-42/messages",
    )
    p.add_argument("--config", required=True, help="YAML file naming the log and the memory's view")
    p.add_argument("--agent", metavar="ID", help="in an agents: document, this agent's memory (default: the first)")
    p.add_argument(
        "--keys", required=True, type=Path, metavar="FILE", help="JSON file: API key -> namespaces it may use"
    )
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    p.add_argument(
        "--max-body",
        type=_positive(int),
        default=1_048_576,
        metavar="BYTES",
        help="largest request body (default 1 MiB); 413 past it",
    )
    p.add_argument(
        "--session-idle",
        type=_positive(float),
        default=600.0,
        metavar="SECONDS",
        help="close a session's memory after this long unused (default 600); the next request opens it again",
    )
    p.add_argument(
        "--lag-bound",
        type=_positive(int),
        metavar="RECORDS",
        help="/readyz answers 503 while a view's projector lags more records than this (Kafka log; default: no bound)",
    )
    p.add_argument(
        "--grace",
        type=_positive(float),
        default=30.0,
        metavar="SECONDS",
        help="on SIGTERM, wait this long at most for in-flight requests (default 30)",
    )
    p.add_argument(
        "--keep-alive",
        type=_positive(int),
        default=75,
        metavar="SECONDS",
        help="keep an idle client connection open this long (default 75, so an agent's think time does not "
        "cost a reconnect)",
    )
    p.add_argument(
        "--no-access-log",
        dest="access_log",
        action="store_false",
        help="write no JSON access line per request (metrics still count every request)",
    )
    p.set_defaults(run=_run, loop_factory=_new_loop)
