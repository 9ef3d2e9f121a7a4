"""`helix-es import FILE`: messages from JSON Lines appended to a namespace's memory, in batches.

helix-es import FILE [--config F] --namespace N [--session S] [--json]

Each line is one message in the OpenAI chat shape: `role`, `content`, and optional `name`, `tool_calls`
(`{"id", "name", "arguments"}`, or OpenAI's `{"id", "type": "function", "function": {"name",
"arguments"}}`), `tool_call_id`, `metadata` (strings), `occurred_at` (ISO-8601 with an offset: when it
was said), and `session_id`. With `--session`, every line goes to that session (a line naming another
is an error); without it, every line names its own. Blank lines are skipped. The whole file is checked
before anything is written: a bad line is an error naming its number and field (exit 2), and nothing
is imported. Lines are appended in file order, each session's in batches of `--batch` (`add_many`).
Without `--config`, the embedded default: the log under .helix/log, a conversation view.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import replace
from pathlib import Path
from typing import Any

from helix_es.client.middleware import add_many
from helix_es.client.open import open_memory
from helix_es.client.protocol import Memory
from helix_es.client.runtime import Runtime
from helix_es.config import Config, load_config
from helix_es.model import names
from helix_es.model.errors import InvalidInput
from helix_es.model.message import Message, check_size
from helix_es.service.messages import message_from
from helix_es.service.pool import with_namespace
from projectors.rebuild import Display, Status

DEFAULT_BATCH = 500
EMBEDDED_DEFAULT: dict[str, Any] = {"log": {"type": "embedded"}, "memory": {"type": "conversation"}}


def read_lines(path: Path, session: str | None, max_content_bytes: int) -> list[tuple[str, Message]]:
    """Every message of the file with its session, checked; `InvalidInput` naming the first bad line."""
    found: list[tuple[str, Message]] = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                found.append(_line(raw, session, max_content_bytes))
            except InvalidInput as exc:
                raise InvalidInput(f"{path}: line {number}: {exc.field}", exc.problem) from None
    return found


def _line(raw: bytes, session: str | None, max_content_bytes: int) -> tuple[str, Message]:
    try:
        fields = json.loads(raw)
    except ValueError as exc:  # UnicodeDecodeError too
        raise InvalidInput("json", f"is not a JSON object ({exc})") from None
    if not isinstance(fields, dict):
        raise InvalidInput("json", f"must be an object, got {type(fields).__name__}")
    sid = fields.pop("session_id", None)
    if session is not None:
        if sid is not None and sid != session:
            raise InvalidInput("session_id", f"is {sid!r}, but --session is {session!r}: leave it out or make it equal")
        sid = session
    if sid is None:
        raise InvalidInput("session_id", "missing: give each line a session_id, or --session for the whole file")
    names.check_session_id(sid)
    if fields.get("content", "") is None:  # OpenAI: an assistant message of tool calls only
        fields["content"] = ""
    calls = fields.get("tool_calls")
    if isinstance(calls, list):
        fields["tool_calls"] = [_tool_call(c, f"tool_calls[{i}]") for i, c in enumerate(calls)]
    message = message_from(fields)
    check_size(message, max_content_bytes)  # here, not mid-import: a later batch must not fail after earlier ones
    return sid, message


def _tool_call(call: object, where: str) -> object:
    """OpenAI's `{"id", "type": "function", "function": {"name", "arguments"}}` as `{"id", "name", "arguments"}`."""
    if not isinstance(call, Mapping) or "function" not in call:
        return call
    function = call["function"]
    if not isinstance(function, Mapping):
        raise InvalidInput(f"{where}.function", "must be an object with name and arguments")
    if call.get("type", "function") != "function":
        raise InvalidInput(f"{where}.type", f"only function calls are kept, got {call.get('type')!r}")
    unknown = sorted(set(call) - {"id", "type", "function"})
    if unknown:
        raise InvalidInput(f"{where}.{unknown[0]}", "is not a tool call field")
    return {"id": call.get("id"), "name": function.get("name"), "arguments": function.get("arguments", "{}")}


def _config(args: argparse.Namespace) -> Config:
    config = load_config(args.config if args.config is not None else EMBEDDED_DEFAULT)
    return replace(config, memory=with_namespace(config.memory, names.check_namespace(args.namespace, "--namespace")))


async def run_import(args: argparse.Namespace) -> dict[str, Any]:
    """Check the whole file, then append it; the summary `--json` prints."""
    started = time.monotonic()
    config = _config(args)
    session = None if args.session is None else names.check_session_id(args.session, "--session")
    lines = read_lines(Path(args.file), session, config.memory.max_content_bytes)
    display = Display() if sys.stderr.isatty() else None  # a bar on a terminal only: logs stay clean
    status = Status(view="import", target=config.memory.namespace, phase="importing", lag=len(lines))
    memories: dict[str, Memory] = {}
    async with Runtime() as runtime, AsyncExitStack() as stack:
        start = 0
        while start < len(lines):
            sid = lines[start][0]
            end = start
            while end < len(lines) and end - start < args.batch and lines[end][0] == sid:
                end += 1  # a batch: consecutive lines of one session
            memory = memories.get(sid)
            if memory is None:
                memory = memories[sid] = await stack.enter_async_context(
                    open_memory(config, session_id=sid, runtime=runtime)
                )
            await add_many(memory, [m for _, m in lines[start:end]])
            status.read = status.events = end
            status.lag = len(lines) - end
            if display is not None:
                display(status)
            start = end
    if display is not None:
        status.phase = "imported"
        display(status, force=True)
        display.finish()
    return {
        "imported": len(lines),
        "namespace": config.memory.namespace,
        "sessions": len(memories),
        "seconds": round(time.monotonic() - started, 3),
    }


async def _run(args: argparse.Namespace) -> int:
    summary = await run_import(args)
    if args.json:
        print(json.dumps(summary))
    else:
        print(
            f"imported {summary['imported']} messages into {summary['namespace']} "
            f"({summary['sessions']} sessions) in {summary['seconds']:.1f}s"
        )
    return 0


def _batch(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, got {text!r}")
    return value


def add_command(sub: Any) -> None:
    """`helix-es import` (registered through `helix_es.cli.COMMAND_MODULES`)."""
    p = sub.add_parser(
        "import",
        help="append messages from a JSON Lines file (imports, backfills)",
        description="Append the messages of a JSON Lines file to a namespace's memory, in file order, in batches. "
        "Each line: role, content, and optional name, tool_calls (helix or OpenAI shape), tool_call_id, metadata, "
        "occurred_at (ISO-8601 with an offset: when it was said) and session_id. The whole file is checked first: "
        "a bad line is an error naming its number and field (exit 2), and nothing is written.",
        epilog='example line: {"session_id": "s-1", "role": "user", "content": "hi", '
        '"occurred_at": "2024-05-01T12:00:00Z"}',
    )
    p.add_argument("file", metavar="FILE", help="JSON Lines, one message per line")
    p.add_argument(
        "--config", help="YAML file naming the log and the memory (default: the embedded log under .helix/log)"
    )
    p.add_argument("--namespace", required=True, help="the namespace to import into")
    p.add_argument(
        "--session", help="the session of every line (default: each line's session_id, which is then required)"
    )
    p.add_argument("--batch", type=_batch, default=DEFAULT_BATCH, help=f"messages per append (default {DEFAULT_BATCH})")
    p.add_argument("--json", action="store_true", help="print a JSON summary: imported, namespace, sessions, seconds")
    p.set_defaults(run=_run)
