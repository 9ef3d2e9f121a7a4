"""`helix-es lag`: how far each view is behind the log, per partition, and the dead letters parked."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from projectors.lag import LagReport, lag


def _print(report: LagReport) -> None:
    if not report.partitions:
        print("no namespace topics yet: nothing to project")
    width = max([len(f"{p.view} ({p.store})") for p in report.partitions] + [4])
    print(f"{'view':<{width}}  {'topic[partition]':<48} {'end':>9} {'applied':>9} {'lag':>9}")
    for p in report.partitions:
        applied = "-" if p.applied is None else str(p.applied)
        where = f"{p.topic}[{p.partition}]"
        print(f"{p.view + ' (' + p.store + ')':<{width}}  {where:<48} {p.end:>9} {applied:>9} {p.lag:>9}")
    for view in sorted({p.view for p in report.partitions}):
        print(f"total lag of {view}: {report.total(view)}")
    for view, counts in report.pending.items():
        for ns, turns in counts.items():
            print(f"turns {view} has still to extract in {ns}: {turns}")
    for ns, count in report.dead_letters.items():
        print(f"dead letters in {ns}: {count} (see helix.dlq topics; headers name the source and error)")


async def _run(args: argparse.Namespace) -> int:
    report = await lag(args.config)
    if args.json:
        print(
            json.dumps(
                {
                    "partitions": [asdict(p) for p in report.partitions],
                    "dead_letters": report.dead_letters,
                    "pending": report.pending,
                    "total": report.total(),
                }
            )
        )
    else:
        _print(report)
    return 1 if args.max is not None and report.total() > args.max else 0


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("lag", help="how far each view is behind the log, and the dead letters parked")
    p.add_argument("--config", required=True, help="YAML file (log: kafka, memory or agents: ...)")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--max", type=int, help="exit 1 if the total lag is above this (for health checks)")
    p.set_defaults(run=_run)
