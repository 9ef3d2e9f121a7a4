"""`helix-es project`: run the projector service (projectors.service) for a config until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import signal
from typing import Any

from projectors.service import serve


async def _run(args: argparse.Namespace) -> int:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return await serve(
        args.config,
        stop,
        batch_size=args.batch_size,
        session_timeout=args.session_timeout,
        progress=args.progress,
        instance_id=args.instance_id,
    )


def add_command(sub: Any) -> None:
    project = sub.add_parser(
        "project", help="fold every view the config names (memories, checkpoints:, store:) until SIGTERM"
    )
    project.add_argument(
        "--config", required=True, help="YAML file (log: kafka; memory:, agents:, checkpoints: and/or store:)"
    )
    project.add_argument("--batch-size", type=int, default=500, help="events per fetch (default 500)")
    project.add_argument("--progress", type=float, default=10.0, help="seconds between progress lines")
    project.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        help="seconds after which the group gives a dead process's partitions to the others "
        "(default 10; at least the broker's group.min.session.timeout.ms)",
    )
    project.add_argument(
        "--instance-id",
        default=None,
        help="this process's static group instance id, the same across its restarts (default: "
        "HELIX_INSTANCE_ID, else <hostname>-<n> for the first free slot n on this host); never two live "
        "processes with one id",
    )
    project.set_defaults(run=_run)
