"""`helix-es facts diff OLD NEW`: what two targets of a facts view know differently (`helix_es.history.facts_diff`)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from helix_es.cli.facts_table import render
from helix_es.history.facts_diff import diff_facts
from helix_es.model import names
from helix_es.model.errors import ConfigError
from projectors.rebuild import select


async def _run(args: argparse.Namespace) -> int:
    _, part = select(args.config, args.view)
    if args.namespace:
        spaces = [names.concrete_namespace(ns, "--namespace") for ns in args.namespace]
    else:
        spaces = list(part.served)
        if any(names.is_pattern(ns) for ns in spaces):
            raise ConfigError("--namespace", f"the view serves {spaces}: name the namespaces to compare")
    diffs = await diff_facts(part, args.old, args.new, spaces)
    if args.json:
        print(json.dumps([d.to_json() for d in diffs], indent=2, ensure_ascii=False))
        return 0
    for d in diffs:
        print(
            f"{d.namespace}: {len(d.added)} only in {args.new}, {len(d.removed)} only in {args.old}, {d.same} in both"
        )
        for found, where in ((d.added, args.new), (d.removed, args.old)):
            if found:
                print("\n" + render(d.namespace, found, history=True, what=f"only in {where}"))
    return 0


def add_diff(facts: argparse.ArgumentParser) -> None:
    """`helix-es facts diff`: a subcommand of `helix-es facts`."""
    sub = facts.add_subparsers(dest="facts_command", metavar="diff")
    d: Any = sub.add_parser(
        "diff",
        help="what two targets of a facts view know differently (after helix-es rebuild --re-extract)",
        description="Compare two targets of a facts view (e.g. facts, which readers use, and facts@v2, rebuilt "
        "with another model) per namespace: the facts, history included, only the new one holds, only the old "
        "one holds, and how many both hold (by subject, predicate, value and valid time).",
    )
    d.add_argument("--config", required=True, help="YAML file naming the log and the facts view")
    d.add_argument("--view", help="the facts view, by name or type (default: the config's only view)")
    d.add_argument("--namespace", action="append", help="a namespace to compare (repeat; default: the view's)")
    d.add_argument("--json", action="store_true", help="one JSON document: per namespace, added, removed, same")
    d.add_argument("old", help="the target to compare from (e.g. facts)")
    d.add_argument("new", help="the target to compare to (e.g. facts@v2)")
    d.set_defaults(run=_run)
