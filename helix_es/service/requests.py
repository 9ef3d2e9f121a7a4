"""What every /v1 request goes through before a handler acts: the key, the namespace, the session,
the body and the query, each refused with the status and field it deserves, before anything is
read or written.

The order is fixed: no or unknown key (401), a namespace that is not a name (422), a key without
the namespace (403), then the session id and the rest (422).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request

from helix_es.history.subject_scan import check_subject
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Position
from helix_es.model.message import Message
from helix_es.service.errors import ApiError
from helix_es.service.keys import Grant, Keys
from helix_es.service.messages import message_from
from helix_es.service.pool import check_namespace, check_session

AFTER = "X-Helix-After"  # the consistency token: a write's position, for reads on any replica
IDEMPOTENCY = "Idempotency-Key"
DEFAULT_SESSION_HEADER = "X-Session-ID"
MAX_BATCH = 1000  # messages in one POST
MAX_DEPTH = 32  # arrays and objects within each other in a body; a message needs 4
_OTHER_BYTES = bytes(b for b in range(256) if b not in b'"[]{}')
_STRING = re.compile(rb'"[^"]*"')
_ascii = json.encoder.encode_basestring_ascii  # json.dumps's own string encoder (C)


@dataclass(frozen=True)
class Call:
    """A request that may go on: who asks, for which namespace and session."""

    grant: Grant
    namespace: str
    session_id: str | None


def authorize(request: Request, keys: Keys) -> Grant:
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    challenge = {"WWW-Authenticate": 'Bearer realm="helix-es"'}
    if scheme.lower() != "bearer" or not presented.strip():
        raise ApiError(401, "send the API key as Authorization: Bearer <key>", "Authorization", challenge)
    grant = keys.grant(presented.strip())
    if grant is None:
        raise ApiError(401, "unknown API key", "Authorization", challenge)
    return grant


def call(request: Request, keys: Keys, topic_prefix: str, *, session_header: str | None, admin: bool = False) -> Call:
    """Check a /v1 request's key and namespace, and its session: from the path, else from the
    `session_header` when given (the header form), else none (namespace-wide routes)."""
    grant = authorize(request, keys)
    namespace = check_namespace(request.path_params["namespace"], topic_prefix)
    if not grant.allows(namespace):
        raise ApiError(403, f"this key may not use namespace {namespace!r}", "namespace")
    if admin and not grant.admin:
        raise ApiError(403, 'only an admin key may do this (keys file: {"namespaces": [...], "admin": true})')
    session_id = request.path_params.get("session_id")
    if session_id is not None:
        return Call(grant, namespace, check_session(session_id))
    if session_header is None:
        return Call(grant, namespace, None)
    found = request.headers.getlist(session_header)
    if not found:
        raise InvalidInput(session_header, "missing: it names the session (or use /v1/{namespace}/sessions/{id}/...)")
    if len(set(found)) > 1:
        raise InvalidInput(session_header, f"appears {len(found)} times with different values")
    return Call(grant, namespace, check_session(found[0].strip(), session_header))


async def read_json(request: Request, limit: int, *, optional: bool = False) -> Any:
    """The body as JSON, at most `limit` bytes (413 past it, read no further); None if empty and `optional`."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise ApiError(413, f"the body is {declared} bytes, over this server's {limit} (--max-body)", "body")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise ApiError(413, f"the body is over this server's {limit} bytes (--max-body)", "body")
    if not body and optional:
        return None
    _check_depth(body)
    try:
        return json.loads(body)
    except ValueError as exc:
        raise ApiError(400, f"the body is not JSON: {exc}", "body") from None


def _check_depth(body: bytes | bytearray) -> None:
    """400 past `MAX_DEPTH`, found before parsing (the parser recurses once a level, and a deep
    enough body exhausts its stack) and in C but for the brackets themselves."""
    if body.count(b"[") + body.count(b"{") <= MAX_DEPTH:
        return  # cannot be deeper: nearly every body
    # Escaped backslashes and quotes out, then all but quotes and brackets: what is left of a string
    # is its brackets between two quotes, and goes too.
    if b"\\" in body:
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = body.translate(None, _OTHER_BYTES)
    depth = 0
    for bracket in _STRING.sub(b"", kept):  # a few bytes a message
        depth += 1 if bracket in b"[{" else -1
        if depth > MAX_DEPTH:
            raise ApiError(400, f"the body nests arrays and objects deeper than this server's {MAX_DEPTH}", "body")


def messages_in(body: Any) -> list[Message]:
    """One message object, or `{"messages": [...]}`; all are checked before any is written."""
    if isinstance(body, dict) and "messages" in body:
        if set(body) != {"messages"}:
            raise InvalidInput(sorted(set(body) - {"messages"})[0], 'send one message, or {"messages": [...]} alone')
        items = body["messages"]
        if not isinstance(items, list) or not items or len(items) > MAX_BATCH:
            raise InvalidInput("messages", f"must be a list of 1 to {MAX_BATCH} message objects")
        return [_message(item, f"messages[{i}].") for i, item in enumerate(items)]
    return [_message(body, "")]


def _message(item: Any, where: str) -> Message:
    if not isinstance(item, dict):
        raise InvalidInput(where.rstrip(".") or "body", 'must be a message object: {"role": ..., "content": ...}')
    return message_from(item, where)


def erasure(body: Any) -> tuple[str, bool]:
    """An erasure's body, `{"subject": "...", "dry_run": false}`: the subject (checked) and whether dry."""
    if not isinstance(body, dict) or "subject" not in body or set(body) - {"subject", "dry_run"}:
        raise InvalidInput("body", 'give {"subject": "<user id or name>", "dry_run": false}')
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise InvalidInput("dry_run", f"must be true or false, got {dry_run!r}")
    return check_subject(body["subject"]), dry_run


def idempotency_keys(request: Request, count: int) -> list[str | None]:
    """The `Idempotency-Key` for each of `count` writes: the key itself for the first, `<key>#<i>` for
    the i-th after it, so a retried batch repeats every key and a batch of one is a single write."""
    key = request.headers.get(IDEMPOTENCY)
    if key is None:
        return [None] * count
    if not key.strip():
        raise InvalidInput(IDEMPOTENCY, "must not be empty: leave the header out for a write without one")
    return [key if i == 0 else f"{key}#{i}" for i in range(count)]


def query_int(request: Request, name: str, default: int | None, low: int, high: int | None = None) -> int | None:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        upto = f" to {high}" if high is not None else " or more"
        raise InvalidInput(name, f"must be a whole number {low}{upto}, got {text!r}")
    return value


# -- the consistency token -----------------------------------------------------------------------------


def token(session_id: str, position: Position) -> str:
    """An opaque token for a write's position, bound to its session (offsets of one session's partition
    mean nothing for another session's view)."""
    # json.dumps([topic, partition, offset, session_id], separators=(",", ":")), put together directly
    raw = f"[{_ascii(position.topic)},{position.partition},{position.offset},{_ascii(session_id)}]"
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def after(request: Request, topic: str, session_id: str) -> Position | None:
    """The position an `X-Helix-After` token names, checked against the request's namespace and session
    (400 naming the header if not; `LogEnds.check` then checks it against the log)."""
    text = request.headers.get(AFTER)
    if text is None:
        return None
    try:
        raw = json.loads(base64.urlsafe_b64decode(text.strip() + "=" * (-len(text.strip()) % 4)))
        their_topic, partition, offset, their_session = raw
        valid = isinstance(partition, int) and isinstance(offset, int) and partition >= 0 and offset >= 0
    except (ValueError, TypeError, binascii.Error):
        valid = False
    if not valid:
        raise ApiError(400, "is not a token this service issued: send the X-Helix-After of a write's answer", AFTER)
    if (their_topic, their_session) != (topic, session_id):
        raise ApiError(
            400, "was issued for another session or namespace: send the token of this session's write", AFTER
        )
    return Position(their_topic, partition, offset)
