"""`helix-es audit` (alias `history`): a session's history from the log, as text or JSON (helix_es.history.audit)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from helix_es.client.runtime import Runtime
from helix_es.config import audit_config
from helix_es.history.audit import AuditError, AuditReport, audit, describe_message, quote
from helix_es.model.errors import InvalidInput

# --- text for people --------------------------------------------------------------------------------


def table(rows: list[list[str]]) -> list[str]:
    """Rows as aligned columns, the last one unpadded."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    return [
        "  ".join([*(cell.ljust(w) for cell, w in zip(row, widths, strict=False)), row[-1]]).rstrip() for row in rows
    ]


def render(report: AuditReport) -> str:
    """The report as aligned text: the events, then each view at the cut."""
    lines = [f"session {report.session_id} of namespace {report.namespace}, from the log (topic {report.topic})"]
    if report.erasure is not None:
        why = f": {quote(report.erasure.reason)}" if report.erasure.reason else ""
        lines.append(
            f"ERASED at {report.erasure.at.isoformat()} (offset {report.erasure.position.offset}){why}; "
            "the content of its earlier messages is crypto-shredded"
        )
    if report.opened:
        lines.append("messages opened with the encryption key held here (--raw shows them as stored)")
    elif report.sealed is not None:
        lines.append(report.sealed)
    if report.offset is not None:
        cut = f"events at or below offset {report.offset} of partition {report.partition}"
        if report.cut_time is not None:
            cut += f"; other partitions, for namespace-wide views, up to {report.cut_time.isoformat()}"
        lines.append(f"cut: {cut}")
    elif report.as_of is not None:
        lines.append(f"cut: events at or before {report.as_of.isoformat()}")
    lines.append(f"{len(report.events)} event{'s' if len(report.events) != 1 else ''}")
    if report.events:
        rows = [["TIME (UTC)", "PARTITION", "OFFSET", "EVENT ID", "TYPE", "EVENT"]]
        for e in report.events:
            rows.append(
                [
                    e.time.strftime("%Y-%m-%d %H:%M:%S.%f"),
                    str(e.position.partition),
                    str(e.position.offset),
                    e.event_id,
                    e.type,
                    e.describe(),
                ]
            )
        lines += ["", *table(rows)]
    if report.skipped:
        lines += ["", f"{len(report.skipped)} record(s) skipped: the projector dead-letters them"]
        lines += table([["", str(b.position.partition), str(b.position.offset), b.error] for b in report.skipped])
    for name, messages in (report.views or {}).items():
        count = f"{len(messages)} message{'s' if len(messages) != 1 else ''}"
        lines += ["", f"view {name} at the cut: get() returns {count}"]
        if messages:
            lines += table([["", str(i), describe_message(m)] for i, m in enumerate(messages, 1)])
    return "\n".join(lines)


# --- the command ------------------------------------------------------------------------------------

_FLAGS = {
    "as_of": "--as-of",
    "offset": "--offset",
    "view": "--view",
    "namespace": "--namespace",
    "session_id": "--session",
}


def _flags(text: str) -> str:
    for name, flag in _FLAGS.items():
        text = text.replace(f"`{name}`", flag)
    return text


async def _run(args: argparse.Namespace) -> int:
    try:
        async with Runtime() as runtime:  # the keys that open sealed messages; closed before the command ends
            report = await audit(
                audit_config(args.config, agent=args.agent),
                session_id=args.session,
                namespace=args.namespace,
                as_of=args.as_of,
                offset=args.offset,
                view=args.view,
                raw=args.raw,
                runtime=runtime,
            )
    except InvalidInput as exc:  # name the flags the person typed, not the Python arguments
        if exc.field not in _FLAGS:
            raise
        raise type(exc)(_FLAGS[exc.field], _flags(exc.problem)) from None
    except AuditError as exc:
        raise AuditError(_flags(str(exc))) from None
    if args.json:
        print(json.dumps(report.to_json(), indent=2, ensure_ascii=False))
    else:
        print(render(report))
    return 0


def add_command(subparsers: Any) -> None:
    """Register `helix-es audit` (helix_es.cli.COMMAND_MODULES)."""
    p = subparsers.add_parser(
        "audit",
        aliases=["history"],
        help="a session's events from the log, and what its views returned at a time or offset",
        description="Print a session's event history read from the log (never from a view). With --as-of or "
        "--offset, also print what each configured view would have returned at that point, folded from the "
        "log without calling any model.",
    )
    p.add_argument("--config", required=True, help="YAML file naming the log, namespace and views")
    p.add_argument("--session", required=True, help="the session id")
    p.add_argument("--agent", metavar="ID", help="in an agents: document, this agent's memory (default: the first)")
    p.add_argument("--namespace", help="override memory.namespace (an agent's id)")
    cut = p.add_argument_group("cut (at most one)")
    cut.add_argument(
        "--as-of",
        metavar="TIME",
        help="events at or before TIME: ISO-8601 (no zone means UTC), now, or --as-of=-10m / '2h ago'",
    )
    cut.add_argument("--offset", type=int, metavar="O", help="events at or below offset O of the session's partition")
    p.add_argument("--view", metavar="NAME", help="only this view (name or type, e.g. summary-4 or summary)")
    p.add_argument(
        "--raw",
        action="store_true",
        help="messages as stored: with the encryption middleware, sealed (default: opened with the key held here)",
    )
    p.add_argument("--json", action="store_true", help="one JSON document instead of text")
    p.set_defaults(run=_run)
