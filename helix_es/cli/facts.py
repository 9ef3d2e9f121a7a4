"""`helix-es facts`: a namespace's facts as a table or JSON; `--assert` and `--retract` correct them.

The facts come from the config's facts view (a composite's first facts part), as `Memory.facts`
reads them; `--json` prints what `GET /v1/{namespace}/facts` answers. A correction is one event
on the log in the namespace's session `facts`, as the REST service and MCP record theirs.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from datetime import datetime
from typing import Any

from helix_es.cli.facts_diff import add_diff
from helix_es.cli.facts_table import render
from helix_es.client.open import open_memory
from helix_es.client.runtime import Runtime
from helix_es.config import load_config
from helix_es.history.describe import word
from helix_es.model import names
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Position
from helix_es.model.facts import Fact
from helix_es.model.times import parse_time
from helix_es.service import facts as knowledge
from helix_es.service.pool import with_namespace

FLAGS = {
    "subject": "--subject",
    "predicate": "--predicate",
    "as_of": "--as-of",
    "known_as_of": "--known-as-of",
    "value": "--assert",
    "valid_from": "--valid-from",
    "fact_id": "--retract",
    "reason": "--reason",
    "namespace": "--namespace",
}


def _written(args: argparse.Namespace, namespace: str, what: str, position: Position) -> None:
    if args.json:
        p = position
        print(json.dumps({"positions": [{"topic": p.topic, "partition": p.partition, "offset": p.offset}]}))
    else:
        where = f"{position.topic}[{position.partition}]@{position.offset}"
        print(f"{what} in {namespace} (session {knowledge.FACTS_SESSION}), at {where}")


# --- the command ------------------------------------------------------------------------------------


def _when(text: str | None, flag: str) -> datetime | None:
    return None if text is None else parse_time(text, field=flag)


async def _act(args: argparse.Namespace, memory: Any, namespace: str) -> None:
    if args.assert_ is not None:
        subject, predicate, value = args.assert_
        valid_from = _when(args.valid_from, "--valid-from")
        position = await knowledge.method(memory, "assert_fact")(subject, predicate, value, valid_from)
        _written(args, namespace, f"asserted {word(subject)} {word(predicate)} {word(value)}", position)
    elif args.retract is not None:
        position = await knowledge.method(memory, "retract_fact")(args.retract, args.reason)
        _written(args, namespace, f"retracted fact {word(args.retract)}", position)
    else:
        found: list[Fact] = await knowledge.method(memory, "facts")(
            args.subject,
            args.predicate,
            _when(args.as_of, "--as-of"),
            _when(args.known_as_of, "--known-as-of"),
            args.history,
        )
        if args.json:
            print(json.dumps(knowledge.facts_json(found), indent=2, ensure_ascii=False))
        else:
            print(render(namespace, found, history=args.history))


async def _run(args: argparse.Namespace) -> int:
    if args.config is None:
        raise InvalidInput("--config", "is required: the YAML file naming the log and a facts view")
    if args.assert_ is None and args.valid_from is not None:
        raise InvalidInput("--valid-from", "goes with --assert")
    if args.retract is None and args.reason is not None:
        raise InvalidInput("--reason", "goes with --retract")
    cfg = load_config(args.config, agent=args.agent)
    if args.namespace is not None:
        namespace = names.concrete_namespace(args.namespace, "--namespace")
        cfg = replace(cfg, memory=with_namespace(cfg.memory, namespace))
    namespace = cfg.memory.namespace
    try:
        async with Runtime() as runtime, open_memory(cfg, session_id=knowledge.FACTS_SESSION, runtime=runtime) as mem:
            await _act(args, mem, namespace)
    except InvalidInput as exc:  # name the flags the person typed, not the Python arguments
        if exc.field not in FLAGS:
            raise
        raise type(exc)(FLAGS[exc.field], exc.problem) from None
    return 0


def add_command(subparsers: Any) -> None:
    """Register `helix-es facts` (helix_es.cli.COMMAND_MODULES): exit 0 done, 1 failed, 2 bad usage or input."""
    p = subparsers.add_parser(
        "facts",
        help="a namespace's facts (a facts view) as a table or JSON; assert or retract one",
        description="Print the facts the config's facts view holds for the namespace: by default those holding "
        "now, with when each held in the world (valid) and when the memory knew it (known), who said it (the "
        "extractor's model, or person) and its id. --assert states a fact as a person, --retract takes one back; "
        "each is one event on the log, in the namespace's session 'facts'.",
    )
    p.add_argument("--config", help="YAML file naming the log, the namespace and a facts view (required)")
    p.add_argument("--agent", metavar="ID", help="in an agents: document, this agent's memory (default: the first)")
    p.add_argument("--namespace", help="override memory.namespace (an agent's id)")
    ask = p.add_argument_group("which facts")
    ask.add_argument("--subject", metavar="S", help="only this subject (any case)")
    ask.add_argument("--predicate", metavar="P", help="only this predicate (lives_in, works_at, likes, ...)")
    ask.add_argument(
        "--as-of", metavar="TIME", help="valid time: what held then (ISO-8601, no zone means UTC; now; -10m, 2d ago)"
    )
    ask.add_argument("--known-as-of", metavar="TIME", help="known time: as the memory knew it then (same forms)")
    ask.add_argument(
        "--history",
        action="store_true",
        help="every fact of the subject and predicate, superseded and retracted ones too",
    )
    fix = p.add_argument_group("corrections (at most one)").add_mutually_exclusive_group()
    fix.add_argument(
        "--assert",
        dest="assert_",
        nargs=3,
        metavar=("SUBJECT", "PREDICATE", "VALUE"),
        help="state a fact as a person: it outranks what the model drew from earlier turns",
    )
    fix.add_argument("--retract", metavar="ID", help="take the fact with this id back (the table's last column)")
    p.add_argument("--valid-from", metavar="TIME", help="with --assert: since when it holds (default now)")
    p.add_argument("--reason", metavar="R", help="with --retract: why, kept on the log (no personal data)")
    p.add_argument("--json", action="store_true", help="the facts as GET /v1/{namespace}/facts answers them")
    p.set_defaults(run=_run)
    add_diff(p)  # `helix-es facts diff ...` sets its own run
