"""`helix-es forget`: erase a session by crypto-shredding (helix_es.history.erasure.forget)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from helix_es.client.runtime import Runtime
from helix_es.config import Config, audit_config, read_source, sections_only
from helix_es.history.checkpoint_forget import forget_thread
from helix_es.history.erasure import ForgetResult, NotShreddable, forget
from helix_es.model import names


async def _run(args: argparse.Namespace) -> int:
    doc = read_source(args.config)
    thread = sections_only(doc) and "checkpoints" in doc  # a LangGraph thread of its checkpoints: namespace
    cfg = audit_config(doc, agent=args.agent)
    ns = names.concrete_namespace(args.namespace or cfg.memory.namespace, "--namespace")
    names.check_session_id(args.session, "--session")
    if not args.yes:
        if not sys.stdin.isatty():
            print("helix-es: forget destroys keys for good; not a terminal, so pass --yes", file=sys.stderr)
            return 2
        answer = input(
            f"Forget session {args.session!r} of {ns!r}? Its content becomes unreadable for good. Type 'yes': "
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("helix-es: nothing was changed", file=sys.stderr)
            return 1
    try:
        async with Runtime() as runtime:  # the command's one runtime, closed (its key store's pool) before it exits
            result = await _forget(args, doc, cfg, ns, thread, runtime)
    except NotShreddable as exc:
        print(f"helix-es: {exc}", file=sys.stderr)
        return 2
    _report(args, ns, thread, result)
    return 0


async def _forget(
    args: argparse.Namespace, doc: Mapping[str, Any], cfg: Config, ns: str, thread: bool, runtime: Runtime
) -> ForgetResult:
    if thread:
        # The thread's namespace: --namespace, else the file's own (a projector file's may be a pattern).
        one = {**doc, "checkpoints": {**doc["checkpoints"], "namespace": ns}}
        return await forget_thread(
            one,
            thread_id=args.session,
            reason=args.reason,
            allow_unshreddable=args.allow_unshreddable,
            runtime=runtime,
        )
    return await forget(
        cfg,
        session_id=args.session,
        namespace=ns,
        reason=args.reason,
        allow_unshreddable=args.allow_unshreddable,
        runtime=runtime,
    )


def _report(args: argparse.Namespace, ns: str, thread: bool, result: ForgetResult) -> None:
    if args.json:
        print(json.dumps(result.to_json()))
    elif result.already_erased:
        print(f"{ns}/{args.session} was already erased; nothing to do")
        _skipped(result.skipped)
    else:
        assert result.position is not None
        p = result.position
        print(
            f"forgot {ns}/{args.session}: destroyed {len(result.erased_keys)} key(s), {result.events} event(s) "
            f"stay on the log unreadable; SessionErased at {p.topic}[{p.partition}]@{p.offset}"
        )
        _skipped(result.skipped)
        if result.unshreddable:
            print(
                f"warning: {result.unshreddable} {'value' if thread else 'message'}(s) were not sealed by its keys "
                "and stay readable on the log",
                file=sys.stderr,
            )


def _skipped(count: int) -> None:
    if count:
        print(f"skipped {count} record(s) that the projector dead-letters (no view held them)")


def add_command(subparsers: Any) -> None:
    """`helix-es forget`: exit 0 erased (or already), 1 failed or declined, 2 bad usage or not shreddable."""
    p = subparsers.add_parser(
        "forget", help="erase a session: destroy its keys and drop it from every view (crypto-shredding)"
    )
    p.add_argument("--config", required=True, help="YAML file naming the log, memory and middleware")
    p.add_argument("--session", required=True, help="the session id to forget")
    p.add_argument("--namespace", help="override memory.namespace")
    p.add_argument("--agent", help="with an agents: document, the agent whose namespace it is")
    p.add_argument("--reason", help="recorded in the SessionErased event (no personal data)")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument(
        "--allow-unshreddable",
        action="store_true",
        help="go on even if some messages were written unencrypted (they stay readable on the log)",
    )
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    p.set_defaults(run=_run)
