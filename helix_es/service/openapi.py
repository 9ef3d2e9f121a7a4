"""The service's OpenAPI 3.1 document, written as data (tests check it lists every route the app serves,
and fuzz the server from it: what it admits, and every status and answer the server gives).

It is as strict as the server: a message's rules by role (a tool message names its call, only an
empty assistant message with tool calls has no content), the session id's and the idempotency
key's characters (the server's own `str.isprintable`, so the pattern is built from it), a
non-empty `q`; and it lists every status each route answers.
"""

from __future__ import annotations

import functools
from typing import Any

from helix_es._version import __version__
from helix_es.model.events import MAX_KEY_LENGTH
from helix_es.model.names import MAX_SESSION_ID
from helix_es.service.openapi_erasures import ERASURE_SCHEMAS, erasure_paths
from helix_es.service.openapi_facts import FACTS_SCHEMAS, facts_paths
from helix_es.service.openapi_parts import (
    AFTER,
    BODY_ERRORS,
    LIMITS,
    NAMESPACE,
    NS,
    POSITION,
    READ_ERRORS,
    V1_ERRORS,
    error,
    operation,
    positions_response,
    ref,
    response,
    strings,
)
from helix_es.service.requests import MAX_BATCH


@functools.cache
def _refused(extra: str = "") -> str:
    """The characters up to U+FFFF that `str.isprintable` refuses, and `extra`, as the inside of a regex
    class (as \\uXXXX, which Python's and ECMA-262's regexes read alike). Past U+FFFF the pattern
    admits everything: listing those ranges makes generating from it a hundred times slower."""
    parts, start = [], None
    for code in range(0x10001):
        bad = code < 0x10000 and (not chr(code).isprintable() or chr(code) in extra)
        if bad and start is None:
            start = code
        elif not bad and start is not None:
            end = code - 1
            parts.append(f"\\u{start:04x}" if end == start else f"\\u{start:04x}-\\u{end:04x}")
            start = None
    return "".join(parts)


def _session_id() -> dict[str, Any]:
    refused = _refused("{}")
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_SESSION_ID,
        "pattern": f"^ *[^ {refused}][^{refused}]*$",
        "description": "Printable text (Python's str.isprintable) without braces, not only spaces. In a path, "
        "percent-encoded: `/` as %2F, `.` and `..` as %2E and %2E%2E.",
    }


# A header's value reaches the server as Latin-1 text, stripped: its printable characters but space
# and braces are these, and it holds one at least.
_HEADER_TEXT = "\\u0021-\\u007a\\u007c\\u007e\\u00a1-\\u00ac\\u00ae-\\u00ff"


def _header_text(more: str = "") -> str:
    return f"^ *[{_HEADER_TEXT}{more}][ {_HEADER_TEXT}{more}]*$"


HEADER_SESSION_ID = {
    "type": "string",
    "maxLength": MAX_SESSION_ID,
    "pattern": _header_text(),
    "description": "Printable Latin-1 without braces, not only spaces.",
}
IDEMPOTENCY_KEY = {"type": "string", "maxLength": MAX_KEY_LENGTH, "pattern": _header_text("\\u007b\\u007d")}


def _session_ops(params: list[dict[str, Any]], *, search_only: bool = False) -> dict[str, dict[str, Any]]:
    positions = positions_response()
    messages = response(ref("Messages"), "the messages")
    search = operation(
        "messages that match q, best first",
        [
            *params,
            {"name": "q", "in": "query", "required": True, "schema": strings(empty=False)},
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
            },
            AFTER,
        ],
        ("200", messages),
        READ_ERRORS,
    )
    if search_only:
        return {"get": search}
    idempotency = {
        "name": "Idempotency-Key",
        "in": "header",
        "required": False,
        "description": "A retry with the same key in the session shows once; in a batch the i-th message after the "
        "first gets <key>#<i>.",
        "schema": IDEMPOTENCY_KEY,
    }
    body = {"anyOf": [ref("Message"), ref("Batch")]}
    return {
        "post": operation(
            "add one message, or several",
            [*params, idempotency],
            ("201", positions),
            BODY_ERRORS,
            requestBody={"required": True, "content": {"application/json": {"schema": body}}},
            description=LIMITS,
        ),
        "get": operation(
            "what the view returns now (read-your-writes)", [*params, AFTER], ("200", messages), READ_ERRORS
        ),
        "delete": operation("clear the memory (the log keeps the history)", [*params, idempotency], ("200", positions)),
    }


def _recall_op(params: list[dict[str, Any]]) -> dict[str, Any]:
    time = {"type": "string", "format": "date-time"}
    return {
        "get": operation(
            "the namespace's messages that best answer q, with score, session, position and time",
            [
                *params,
                {"name": "q", "in": "query", "required": True, "schema": strings(empty=False)},
                {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                {
                    "name": "session",
                    "in": "query",
                    "schema": {"type": "array", "items": strings(empty=False)},
                    "style": "form",
                    "explode": True,
                    "description": "only these sessions (repeat the parameter)",
                },
                {
                    "name": "where",
                    "in": "query",
                    "schema": {"type": "object", "additionalProperties": strings()},
                    "style": "deepObject",
                    "explode": True,
                    "description": "metadata equality: where[speaker]=Caroline",
                },
                {"name": "after", "in": "query", "schema": time, "description": "said after (ISO-8601, an offset)"},
                {"name": "before", "in": "query", "schema": time, "description": "said before"},
                {"name": "explain", "in": "query", "schema": {"type": "boolean", "default": False}},
                {"name": "mode", "in": "query", "schema": {"enum": ["hybrid", "vector", "keyword", "substring"]}},
                AFTER,
            ],
            ("200", response(ref("Hits"), "the hits, best first")),
            READ_ERRORS,
        )
    }


def _plain(summary: str, media: str = "application/json", more: dict[str, Any] | None = None) -> dict[str, Any]:
    ok = {"200": {"description": summary, "content": {media: {}}}}
    return {"get": {"summary": summary, "responses": {**ok, **(more or {})}}}


def document(session_header: str) -> dict[str, Any]:
    sid = {"name": "session_id", "in": "path", "required": True, "schema": ref("SessionId")}
    header = {"name": session_header, "in": "header", "required": True, "schema": HEADER_SESSION_ID}
    audit = operation(
        "the session's history from the log; with as_of or offset, each view at that cut (helix-es audit --json)",
        [
            NS,
            sid,
            {
                "name": "as_of",
                "in": "query",
                "schema": {"type": "string"},
                "description": "ISO-8601 in years 1-9999 (no zone means UTC), now, -10m, 2h ago",
            },
            {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
            {"name": "view", "in": "query", "schema": {"type": "string"}, "description": "one view of a composite"},
        ],
        ("200", response(ref("Audit"), "the audit report")),
    )
    forget = operation(
        "erase the session by crypto-shredding (admin keys only)",
        [NS, sid],
        ("200", response({"type": "object"}, "what was erased (helix-es forget --json)")),
        BODY_ERRORS,
        {"409": error("the session cannot be shredded; nothing changed")},
        requestBody={"required": False, "content": {"application/json": {"schema": ref("Forget")}}},
    )
    sessions = operation(
        "the namespace's sessions from the log, newest activity first, a page at a time",
        [
            NS,
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 100},
            },
            {
                "name": "after",
                "in": "query",
                "schema": {"type": "string"},
                "description": "the `next` of the page before",
            },
            {
                "name": "q",
                "in": "query",
                "schema": {"type": "string"},
                "description": "only sessions whose id holds this text (any case)",
            },
        ],
        ("200", response(ref("Sessions"), "a page of sessions")),
    )
    namespaces = {
        "summary": "the namespaces on the log that this key may use",
        "security": [{"bearer": []}],
        "responses": {"200": response(ref("Namespaces"), "them"), "401": V1_ERRORS["401"], "503": V1_ERRORS["503"]},
    }
    return {
        "openapi": "3.1.0",
        "info": {"title": "helix-es memory service", "version": __version__, "description": LIMITS},
        "paths": {
            "/v1/{namespace}/sessions/{session_id}/messages": _session_ops([NS, sid]),
            "/v1/{namespace}/sessions/{session_id}/search": _session_ops([NS, sid], search_only=True),
            "/v1/{namespace}/sessions/{session_id}/recall": _recall_op([NS, sid]),
            "/v1/{namespace}/sessions/{session_id}/audit": {"get": audit},
            "/v1/{namespace}/sessions/{session_id}/forget": {"post": forget},
            "/v1/{namespace}/sessions": {"get": sessions},
            "/v1/namespaces": {"get": namespaces},
            "/v1/{namespace}/messages": _session_ops([NS, header]),
            "/v1/{namespace}/search": _session_ops([NS, header], search_only=True),
            "/v1/{namespace}/recall": _recall_op([NS, header]),
            **facts_paths(),
            **erasure_paths(),
            "/healthz": _plain("the process is alive"),
            "/readyz": _plain(
                "200 when the log and stores answer and the lag is under --lag-bound, else 503",
                more={"503": {"description": "not ready: what failed", "content": {"application/json": {}}}},
            ),
            "/metrics": _plain("Prometheus metrics", "text/plain"),
            "/openapi.json": _plain("this document"),
            "/ui/": _plain("the web console", "text/html"),
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {**SCHEMAS, **FACTS_SCHEMAS, **ERASURE_SCHEMAS, "SessionId": _session_id()},
        },
    }


_OCCURRED_AT = {
    "type": ["string", "null"],
    "format": "date-time",
    "description": "when it was said (imports, backfills), ISO-8601 with an offset; absent: when it was added",
}
_NONE = {"type": ["array", "null"], "maxItems": 0}  # tool_calls where a message may carry none


def _message(roles: list[str], required: list[str], **fields: dict[str, Any]) -> dict[str, Any]:
    properties = {
        "role": {"enum": roles},
        "content": strings(empty=False),
        "name": strings(empty=False, null=True),
        "tool_calls": _NONE,
        "tool_call_id": {"type": "null"},
        "metadata": {
            "type": ["object", "null"],
            "propertyNames": strings(empty=False),
            "additionalProperties": strings(),
        },
        "occurred_at": _OCCURRED_AT,
    }
    return {
        "type": "object",
        "required": ["role", *required],
        "additionalProperties": False,
        "properties": {**properties, **fields},
    }


_TOOL_CALL = {
    "type": "object",
    "required": ["id", "name"],
    "additionalProperties": False,
    "properties": {
        "id": strings(empty=False),
        "name": strings(empty=False),
        "arguments": strings() | {"contentMediaType": "application/json", "default": "{}"},
    },
}
_TOOL_CALLS = {
    "type": "array",
    "minItems": 1,
    "items": _TOOL_CALL,
    "description": "each call with its own id",
}

SCHEMAS: dict[str, Any] = {
    "Message": {
        "description": "A turn. A tool message names the call it answers; only an assistant message carries tool "
        "calls, and may then have empty content.",
        "anyOf": [
            _message(["system", "user"], ["content"]),
            _message(["tool"], ["content", "tool_call_id"], tool_call_id=strings(empty=False)),
            _message(["assistant"], ["content"], tool_calls={**_TOOL_CALLS, "type": ["array", "null"], "minItems": 0}),
            _message(["assistant"], ["tool_calls"], content=strings(), tool_calls=_TOOL_CALLS),
        ],
    },
    "Batch": {
        "type": "object",
        "required": ["messages"],
        "additionalProperties": False,
        "properties": {"messages": {"type": "array", "minItems": 1, "maxItems": MAX_BATCH, "items": ref("Message")}},
    },
    "Stored": {
        "type": "object",
        "required": ["role", "content"],
        "properties": {
            "role": {"enum": ["system", "user", "assistant", "tool"]},
            "content": {"type": "string"},
            "name": {"type": "string"},
            "tool_calls": {"type": "array", "items": _TOOL_CALL},
            "tool_call_id": {"type": "string"},
            "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
            "occurred_at": {"type": "string", "format": "date-time", "description": "when it was said, in UTC"},
        },
    },
    "Messages": {
        "type": "object",
        "required": ["namespace", "session_id", "messages"],
        "additionalProperties": False,
        "properties": {
            "namespace": NAMESPACE,
            "session_id": {"type": "string"},
            "messages": {"type": "array", "items": ref("Stored")},
        },
    },
    "Hits": {
        "type": "object",
        "required": ["namespace", "session_id", "hits"],
        "additionalProperties": False,
        "properties": {
            "namespace": NAMESPACE,
            "session_id": {"type": "string"},
            "hits": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["message", "score", "session_id", "position", "occurred_at"],
                    "additionalProperties": False,
                    "properties": {
                        "message": ref("Stored"),
                        "score": {"type": "number"},
                        "session_id": {"type": "string"},
                        "position": POSITION,
                        "occurred_at": {"type": "string", "format": "date-time"},
                        "explain": {"type": "object", "description": "what each ranker gave the hit"},
                    },
                },
            },
        },
    },
    "Positions": {
        "type": "object",
        "required": ["positions"],
        "additionalProperties": False,
        "properties": {
            "positions": {
                "type": "array",
                "minItems": 1,
                "items": POSITION,
            }
        },
    },
    "Sessions": {
        "type": "object",
        "required": ["namespace", "sessions", "total", "next"],
        "additionalProperties": False,
        "properties": {
            "namespace": NAMESPACE,
            "sessions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["session_id", "events", "first_time", "last_time"],
                    "additionalProperties": False,
                    "properties": {
                        "session_id": {"type": "string"},
                        "events": {"type": "integer", "minimum": 1},
                        "first_time": {"type": "string", "format": "date-time"},
                        "last_time": {"type": "string", "format": "date-time"},
                    },
                },
            },
            "total": {"type": "integer", "minimum": 0, "description": "sessions that match q, on every page"},
            "next": {"type": ["string", "null"], "description": "pass as after= for the next page"},
        },
    },
    "Namespaces": {
        "type": "object",
        "required": ["namespaces"],
        "additionalProperties": False,
        "properties": {"namespaces": {"type": "array", "items": NAMESPACE}},
    },
    "Audit": {
        "type": "object",
        "required": ["namespace", "session_id", "topic", "cut", "events", "views"],
        "properties": {
            "namespace": NAMESPACE,
            "session_id": {"type": "string"},
            "topic": {"type": "string"},
            "cut": {"type": ["object", "null"]},
            "events": {"type": "array", "items": {"type": "object"}},
            "views": {"type": ["object", "null"], "additionalProperties": {"type": "array", "items": ref("Stored")}},
        },
    },
    "Forget": {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "reason": {"type": ["string", "null"]},
            "allow_unshreddable": {"type": "boolean", "default": False},
        },
    },
    "Error": {
        "type": "object",
        "required": ["error"],
        "additionalProperties": False,
        "properties": {"error": {"type": "string"}, "field": {"type": "string"}},
    },
}
