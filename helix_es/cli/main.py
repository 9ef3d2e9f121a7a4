"""The `helix-es` command: parser, logging and exit codes (0 ok, 1 failure, 2 bad usage or config)."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import sys
from collections.abc import Sequence

from helix_es._version import __version__
from helix_es.log.kafka_clients import CLIENT_LOGGER
from helix_es.model.errors import ConfigError, HelixError, InvalidInput

# One module per command, each with add_command(subparsers); `--help` lists them in this order.
COMMAND_MODULES: list[str] = [
    "helix_es.cli.demo",
    "helix_es.cli.project",
    "helix_es.cli.lag",
    "helix_es.cli.audit",
    "helix_es.cli.facts",
    "helix_es.cli.forget",
    "helix_es.cli.erase",
    "helix_es.cli.imports",
    "helix_es.cli.rebuild",
    "helix_es.cli.mcp",
    "helix_es.cli.serve",
]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="helix-es", description="Event-sourced memory for LLM agents.")
    p.add_argument("--version", action="version", version=f"helix-es {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
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
    logging.getLogger(CLIENT_LOGGER).setLevel(logging.WARNING)
    try:
        # A command may pick its event loop (serve: uvloop when installed).
        with asyncio.Runner(loop_factory=getattr(args, "loop_factory", None)) as runner:
            code: int = runner.run(args.run(args))
        return code
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
