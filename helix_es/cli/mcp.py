"""`helix-es mcp`: the memory as a Model Context Protocol server over stdio (helix_es.service.mcp)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

from helix_es.client.runtime import Runtime
from helix_es.config import load_config
from helix_es.service.pool import with_namespace


def _namespaces(text: str) -> list[str]:
    found = [n.strip() for n in text.split(",") if n.strip()]
    if not found:
        raise argparse.ArgumentTypeError("give one or more namespaces or globs, comma-separated")
    return found


async def _run(args: argparse.Namespace) -> int:
    try:
        from helix_es.service.mcp import serve_stdio  # the mcp package only when serving
    except ImportError as exc:
        print(f"helix-es mcp: needs the mcp package (pip install 'helix-es[service]', or mcp): {exc}", file=sys.stderr)
        return 1

    config = load_config(args.config, agent=args.agent)
    if args.namespace is not None:
        config = replace(config, memory=with_namespace(config.memory, args.namespace))
    async with Runtime() as runtime:
        await serve_stdio(config, namespaces=args.namespaces, runtime=runtime)
    return 0


def add_command(subparsers: Any) -> None:
    """Register `helix-es mcp` (helix_es.cli.COMMAND_MODULES)."""
    p = subparsers.add_parser(
        "mcp",
        help="serve the memory to an LLM agent over the Model Context Protocol (stdio)",
        description="Serve the memory the config describes as a Model Context Protocol server over stdin and "
        "stdout, for an MCP host (an agent, a desktop assistant) to start as a subprocess. Tools: add_memory, "
        "get_memory, search_memory, clear_memory and audit_session, each taking namespace (default: the "
        "config's memory.namespace) and session_id. stdout carries only the protocol; logs go to stderr. "
        "The server exits 0 when the client closes stdin.",
        epilog='example host entry: {"command": "helix-es", "args": ["mcp", "--config", "helix.yaml", '
        '"--namespaces", "agent-a"]}',
    )
    p.add_argument("--config", required=True, help="YAML file naming the log, the namespace and the memory's view")
    p.add_argument("--agent", metavar="ID", help="in an agents: document, this agent's memory (default: the first)")
    p.add_argument("--namespace", help="the default namespace when a tool call names none (default: memory.namespace)")
    p.add_argument(
        "--namespaces",
        type=_namespaces,
        metavar="NS[,NS...]",
        help="serve only these namespaces (names or globs such as tenant-*); a call naming another is refused "
        "and writes nothing (default: any namespace)",
    )
    p.set_defaults(run=_run)
