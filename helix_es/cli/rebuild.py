"""`helix-es rebuild`: the command; the rebuild itself is `projectors.rebuild` (its doc has the steps).

helix-es rebuild --config F [--view V] [--into NAME] [--switch/--no-switch] [--drop-old] [--json]
    (without --view: every view of the config, one after another)
helix-es rebuild --config F --view FACTS --re-extract [--dry-run]   (a facts view: a new model over history)
helix-es rebuild --config F [--view V] --drop NAME
helix-es rebuild --config F [--view V] --into NAME --group | --join
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from helix_es.config import MemoryConfig
from helix_es.model.errors import ConfigError
from helix_es.stores import registry
from projectors.rebuild import DEFAULT_BATCH, HANDOVER_SECONDS, Display, drop, join, rebuild, select, views
from projectors.rebuild.extract import bar


def add_command(sub: Any) -> None:
    """`helix-es rebuild` (registered through `helix_es.cli.COMMAND_MODULES`)."""
    p = sub.add_parser(
        "rebuild",
        help="build a view from the start of the log into a new target, then switch readers to it",
        description="Build a view from the start of the log into a new, versioned target while the current one "
        "keeps serving; switch readers to it atomically once it has caught up.",
    )
    p.add_argument("--config", required=True, help="YAML file; it names the store to build in")
    p.add_argument(
        "--view",
        help="the view to rebuild, by name (token-window-4000) or type (default: every view of the config, "
        "one after another)",
    )
    p.add_argument(
        "--into", metavar="NAME", help="the target to build (default <view>@v<N>); an unfinished one resumes"
    )
    p.add_argument(
        "--switch",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="switch readers to the target once it has caught up (default: yes)",
    )
    p.add_argument("--drop-old", action="store_true", help="after the switch, delete the old target's data")
    p.add_argument("--drop", metavar="NAME", help="only delete target NAME (never the one readers use)")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH, help=f"events per write (default {DEFAULT_BATCH})")
    p.add_argument(
        "--handover",
        type=float,
        default=HANDOVER_SECONDS,
        help="seconds to keep folding after the switch until a projector service takes over",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="processes sharing the partitions of a big rebuild "
        "(default: one per core, at most 4; 1: this process only)",
    )
    p.add_argument(
        "--group",
        action="store_true",
        help="share the partitions through the target's Kafka consumer group with members started with --join "
        "(on this machine or others); this process still decides when it is caught up and switches",
    )
    p.add_argument(
        "--members",
        type=int,
        default=1,
        metavar="N",
        help="with --group: wait until N processes (this one included) are in the group before folding, "
        "so the partitions are dealt out once (default 1: start at once; members may join any time)",
    )
    p.add_argument(
        "--join",
        action="store_true",
        help="join the running `--group` rebuild into --into NAME as one more member, fold the partitions the "
        "group assigns, and exit when that rebuild has caught up; same config as the rebuild",
    )
    p.add_argument(
        "--re-extract",
        action="store_true",
        help="a facts view: run its (new) extractor over every turn of history into the target before the switch "
        "(a plain rebuild folds the recorded facts and calls no model)",
    )
    p.add_argument(
        "--dry-run",
        action="store_true",
        help="with --re-extract: print the model calls and prompt tokens it would cost, call nothing, keep nothing",
    )
    p.add_argument("--progress", type=float, default=5.0, help="seconds between progress lines when not a terminal")
    p.add_argument("--json", action="store_true", help="print each view's final report as a line of JSON on stdout")
    p.set_defaults(run=_run)


async def _run(args: argparse.Namespace) -> int:
    if args.join:
        return await _join(args)
    if args.drop is not None:
        if args.into is not None or args.drop_old:
            raise ConfigError("--drop", "drops a target only: leave out --into and --drop-old")
        dropped = await drop(args.config, args.drop, view=args.view)
        if args.json:
            print(json.dumps(dropped.to_json()))
        print(
            f"helix-es: dropped {dropped.dropped} of {dropped.view} ({dropped.store}, {dropped.namespaces} namespaces)",
            file=sys.stderr,
        )
        return 0
    if args.view is not None:
        _, part = select(args.config, args.view)
        return await _rebuild(args, part)
    _, every = views(args.config)
    if len(every) > 1 and args.into is not None:
        raise ConfigError("--into", f"names one target, and the config has {len(every)} views: give --view too")
    for part in every:  # each refused before any is built
        _kept_outside(part)
    for i, part in enumerate(every, 1):
        if len(every) > 1:
            print(f"helix-es: view {i} of {len(every)}: {part.view.name} ({part.store})", file=sys.stderr)
        await _rebuild(args, part)
    return 0


def _kept_outside(part: MemoryConfig) -> None:
    """A view the CLI can rebuild: kept in a store outside the process that serves it."""
    if registry.kind(part.store).in_process:
        raise ConfigError(
            "memory.store",
            f"a {part.store} view lives in the process that serves it and is built "
            "from the log when it starts; rebuild it there: await rebuild(config)",
        )


async def _rebuild(args: argparse.Namespace, part: MemoryConfig) -> int:
    """One view: its progress on stderr, its report (--json: one line on stdout)."""
    _kept_outside(part)
    display = Display(interval=args.progress)
    try:
        report = await rebuild(
            args.config,
            view=part.view.name,
            store_kind=part.store,
            into=args.into,
            switch=args.switch,
            drop_old=args.drop_old,
            batch_size=args.batch_size,
            handover=args.handover,
            on_progress=display,
            workers=args.workers,
            group=args.group,
            members=args.members,
            re_extract=args.re_extract,
            dry_run=args.dry_run,
            extract_progress=bar,
        )
    finally:
        display.finish()
    if args.json:
        print(json.dumps(report.to_json()), flush=True)
    if report.extracted is not None:
        x = report.extracted
        would = "would make" if x["dry_run"] else "made"
        print(
            f"helix-es: re-extract with {x['model']}: {x['turns']:,} turns pending, {would} {x['calls']:,} model "
            f"calls, {x['prompt_tokens']:,} prompt tokens"
            + ("" if x["dry_run"] else f", {x['facts']:,} facts, {x['parked']} batches parked as dead letters"),
            file=sys.stderr,
        )
        if x["dry_run"]:
            print("helix-es: dry run: nothing was called, the target was dropped", file=sys.stderr)
            return 0
    moved = (
        f"; readers switched from {report.old_target}"
        if report.switched
        else f"; readers still use {report.old_target} (--no-switch)"
    )
    old = f"; dropped {', '.join(report.dropped)}" if report.dropped else ""
    print(
        f"helix-es: rebuilt {report.view} into {report.target}: {report.read:,} events read, {report.events:,} "
        f"folded, {report.skipped} skipped, in {report.seconds:.1f}s ({report.events_per_second:,} events/s)"
        f"{moved}{old}",
        file=sys.stderr,
    )
    return 0


async def _join(args: argparse.Namespace) -> int:
    """`--join`: one member of a running `--group` rebuild; the rebuild's own options are not a member's."""
    if args.into is None:
        raise ConfigError("--join", "needs --into NAME: the target of the running rebuild to join")
    for flag, given in (
        ("--group", args.group),
        ("--drop", args.drop is not None),
        ("--drop-old", args.drop_old),
        ("--no-switch", not args.switch),
        ("--workers", args.workers is not None),
        ("--members", args.members != 1),
    ):
        if given:
            raise ConfigError("--join", f"a member only folds: leave out {flag} (the rebuild it joins has it)")
    display = Display(interval=args.progress)
    try:
        report = await join(
            args.config, into=args.into, view=args.view, batch_size=args.batch_size, on_progress=display
        )
    finally:
        display.finish()
    if args.json:
        print(json.dumps(report.to_json()))
    print(
        f"helix-es: member of the rebuild into {report.target}: {report.read:,} events read, {report.events:,} "
        f"folded from {len(report.partitions)} partitions in {report.seconds:.1f}s",
        file=sys.stderr,
    )
    return 0
