"""`helix-es`: demo, project, history. Exit codes: 0 ok, 1 failure, 2 bad usage or config."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import signal
import sys
from collections.abc import Sequence
from typing import Any

from helix_es import __version__
from helix_es.model.errors import ConfigError, HelixError, InvalidInput


def served_projections(source: str) -> tuple[Any, list[tuple[Any, Any]]]:
    """The log and every (memory config, store) a config's projectors serve: all agents, all parts, once each."""
    from helix_es.config import load_configs
    from helix_es.projection.factory import store_key

    configs = load_configs(source)
    log_config = configs[0].log
    if log_config.type != "kafka":
        raise ConfigError("log.type", "the embedded log is projected inside the client; this needs log: kafka")
    seen: set[tuple[object, ...]] = set()
    parts = []
    for cfg in configs:
        for part in cfg.memory.parts:
            ident = (part.view.name, *store_key(part))
            if ident not in seen:
                seen.add(ident)
                parts.append(part)
    return log_config, parts


async def _project(args: argparse.Namespace) -> int:
    from helix_es.projection.factory import open_store
    from helix_es.views import View
    from projectors.follow import TargetFollower
    from projectors.runner import run_projectors

    log_config, parts = served_projections(args.config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    say = logging.getLogger("helix_es.project").info
    stores, projectors = [], []
    for part in parts:  # one projector (consumer group) per view: several processes share its partitions
        store = open_store(part) if isinstance(part.view, View) else None
        stores += [store] if store else []
        # A Projector of the target the view's alias names, moving with it when `helix-es rebuild` switches it.
        projectors.append(TargetFollower(part, store, bootstrap_servers=log_config.bootstrap_servers,
                                         topic_prefix=log_config.topic_prefix, batch_size=args.batch_size,
                                         session_timeout=args.session_timeout))
        say("projecting %s.* into view %s (%s store); SIGTERM stops", log_config.topic_prefix, part.view.name,
            part.store)

    async def report() -> None:
        while not stop.is_set():
            await asyncio.sleep(args.progress)
            for p in projectors:
                say("%s: %d events applied, %d re-deliveries skipped, %d dead letters, %d partitions"
                    "; %d writes retried, %d restarts, %d partitions refolded",
                    p.projection.name, p.progress.events, p.progress.skipped, p.progress.dead_letters,
                    len(p.progress.assigned), p.progress.retries, p.progress.restarts, p.progress.refolds)

    reporter = asyncio.create_task(report())
    try:
        done = await run_projectors(projectors, stop)
    finally:
        reporter.cancel()
        for p in projectors:
            await p.projection.close()
        for store in stores:
            await store.close()
    say("stopped cleanly after %d events", sum(progress.events for progress in done))
    return 0


async def _demo(args: argparse.Namespace) -> int:
    from helix_es.cli.demo import run_demo

    await run_demo(args.path, as_json=args.json, config_path=args.config)
    return 0


# Modules with add_command(subparsers).
COMMAND_MODULES: list[str] = [
    "projectors.lag", "helix_es.client.audit", "helix_es.client.erasure", "helix_es.cli.rebuild",
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="helix-es", description="Event-sourced memory for LLM agents.")
    p.add_argument("--version", action="version", version=f"helix-es {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="a scripted agent conversation on the embedded log")
    demo.add_argument("--path", help="keep the log in this directory (default: a new temporary one)")
    demo.add_argument("--json", action="store_true", help="print JSON lines instead of text")
    demo.add_argument("--config", help="run against the log and store this YAML names (e.g. Kafka + Redis)")
    demo.set_defaults(run=_demo)

    project = sub.add_parser("project", help="run the projector for the configured view until SIGTERM")
    project.add_argument("--config", required=True, help="YAML file (log: kafka, memory: ...)")
    project.add_argument("--batch-size", type=int, default=500, help="events per fetch (default 500)")
    project.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    project.add_argument("--session-timeout", type=float, default=10.0,
                         help="seconds after which the group gives a dead process's partitions to the others "
                              "(default 10; at least the broker's group.min.session.timeout.ms)")
    project.set_defaults(run=_project)

    # Commands that live in their own modules register here: each has add_command(sub).
    for module in COMMAND_MODULES:
        importlib.import_module(module).add_command(sub)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    try:
        return asyncio.run(args.run(args))
    except (ConfigError, InvalidInput) as exc:
        print(f"helix-es: {exc}", file=sys.stderr)
        return 2
    except (HelixError, OSError) as exc:
        print(f"helix-es: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
