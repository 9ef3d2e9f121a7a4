"""`helix-es erase`: erase everything about a person in a namespace, with a receipt
(helix_es.history.subject_erasure.erase_subject).

helix-es erase [--config F] --namespace N --subject S [--dry-run] [--json] [--timeout SECONDS]

Exit codes: 0 erased and verified (or a dry run), 1 the check after the erasure failed (or the log
or a store failed), 2 bad input or config.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from helix_es.client.runtime import Runtime
from helix_es.config import load_config
from helix_es.history.subject_erasure import DEFAULT_TIMEOUT, Receipt, erase_subject
from helix_es.history.subject_scan import check_subject
from helix_es.model import names

EMBEDDED_DEFAULT: dict[str, Any] = {"log": {"type": "embedded"}, "memory": {"type": "conversation"}}


async def _run(args: argparse.Namespace) -> int:
    cfg = load_config(args.config if args.config is not None else EMBEDDED_DEFAULT, agent=args.agent)
    ns = names.concrete_namespace(args.namespace, "--namespace")
    check_subject(args.subject, "--subject")
    async with Runtime() as runtime:  # the command's one runtime, closed (its key store's pool) before it exits
        receipt = await erase_subject(
            cfg, subject=args.subject, namespace=ns, dry_run=args.dry_run, runtime=runtime, timeout=args.timeout
        )
    if args.json:
        print(json.dumps(receipt.to_json()))
    else:
        _report(receipt)
    return 0 if receipt.passed else 1


def _report(receipt: Receipt) -> None:
    r = receipt.doc
    facts = len(r["facts"])
    messages = sum(len(o) for o in r["messages"].values())
    what = (
        f"{len(r['erased'])} session(s) of the subject ({len(r['sessions'])} in all), {messages} message(s) naming "
        f"it in {len(r['messages'])} other session(s), {facts} fact(s)"
    )
    if r["dry_run"]:
        print(f"would erase subject {r['subject']!r} from {r['namespace']}: {what}; nothing was written")
        if r["key_ids"]:
            print(f"would destroy {len(r['key_ids'])} key(s)")
    else:
        print(
            f"erased subject {r['subject']!r} from {r['namespace']} (request {r['request']}): {what}; "
            f"destroyed {len(r['key_ids'])} key(s)"
        )
    for name, view in r["views"].items():
        left = f"{len(view['sessions'])} session(s), {view['messages']} message(s), {len(view['ids'])} fact(s)"
        kept = f"; {view['kept']} message(s) naming it stay: {view['why']}" if view.get("kept") else ""
        print(f"  {name}: {'would leave' if r['dry_run'] else 'left'}: {left}{kept}")
    if r["not_shredded"]:
        print(f"not shredded (readable on the log): {len(r['not_shredded'])} session(s)")
    if r["undecodable"]:
        print(f"could not read {len(r['undecodable'])} record(s); listed in the receipt (--json)")
    print(f"log: {r['log']}")
    check = r["verification"]
    if check is not None:
        print(f"verification {'passed' if check['passed'] else 'FAILED'}")
        for failure in check["failures"]:
            print(f"  {failure}")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be seconds between 0 and 3600, got {text!r}")
    return value


def add_command(sub: Any) -> None:
    """`helix-es erase` (registered through `helix_es.cli.COMMAND_MODULES`)."""
    p = sub.add_parser(
        "erase",
        help="erase everything about a person in a namespace (GDPR art. 17), with a verified receipt",
        description="Erase a person (a user id or a name) from every session and view of a namespace: their own "
        "sessions (messages with metadata.user_id = SUBJECT, or facts about them) are crypto-shredded and dropped "
        "from every view; messages naming them in other sessions (whole word, any case) and facts about them leave "
        "every view. Then every view and the log are checked, and the receipt is recorded on the log "
        "(SubjectErased). Running it again erases nothing more and answers a receipt.",
        epilog="exit codes: 0 erased and verified (or --dry-run), 1 the verification failed, 2 bad input",
    )
    p.add_argument(
        "--config", help="YAML file naming the log, memory and middleware (default: the embedded log under .helix/log)"
    )
    p.add_argument("--namespace", required=True, help="the namespace to erase the subject from")
    p.add_argument("--subject", required=True, help="the person: a user id (metadata.user_id) or a name")
    p.add_argument("--agent", help="with an agents: document, the agent whose memory it is")
    p.add_argument("--dry-run", action="store_true", help="list what would go; write nothing")
    p.add_argument(
        "--timeout",
        type=_seconds,
        default=DEFAULT_TIMEOUT,
        help=f"seconds the check waits for each view to apply the erasure (default {DEFAULT_TIMEOUT:g})",
    )
    p.add_argument("--json", action="store_true", help="print the receipt as JSON")
    p.set_defaults(run=_run)
