"""The service's OpenAPI 3.1 document, written as data (tests check it lists every route the app serves)."""

from __future__ import annotations

from typing import Any

from helix_es._version import __version__

NS = {
    "name": "namespace",
    "in": "path",
    "required": True,
    "schema": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,200}$"},
}
SID = {"name": "session_id", "in": "path", "required": True, "schema": {"type": "string", "maxLength": 512}}
AFTER = {
    "name": "X-Helix-After",
    "in": "header",
    "required": False,
    "description": "The X-Helix-After of a write: the read waits until the view has applied it (504 if not in time).",
    "schema": {"type": "string"},
}
IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "description": "A retry with the same key in the session shows once; in a batch the i-th message after the "
    "first gets <key>#<i>.",
    "schema": {"type": "string"},
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def _json(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


ERRORS = {
    "400": _json(_ref("Error"), "the body is not JSON, or nests arrays and objects deeper than 32"),
    "401": _json(_ref("Error"), "no or unknown API key"),
    "403": _json(_ref("Error"), "the key may not use this namespace"),
    "413": _json(_ref("Error"), "the body is over --max-body (default 1 MiB)"),
    "422": _json(_ref("Error"), "bad input; `field` names it"),
    "503": _json(_ref("Error"), "the log or a store failed"),
}


def _op(summary: str, params: list[dict[str, Any]], ok: tuple[str, dict[str, Any]], **more: Any) -> dict[str, Any]:
    return {
        "summary": summary,
        "parameters": params,
        "security": [{"bearer": []}],
        "responses": {ok[0]: ok[1], **ERRORS},
        **more,
    }


def _session_ops(params: list[dict[str, Any]], *, search_only: bool = False) -> dict[str, dict[str, Any]]:
    positions = _json(_ref("Positions"), "where the events landed on the log")
    positions["headers"] = {"X-Helix-After": {"schema": {"type": "string"}, "description": "the consistency token"}}
    messages = _json(_ref("Messages"), "the messages")
    search = _op(
        "messages that match q, best first",
        [
            *params,
            {"name": "q", "in": "query", "required": True, "schema": {"type": "string"}},
            {
                "name": "limit",
                "in": "query",
                "schema": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 10},
            },
            AFTER,
        ],
        ("200", messages),
    )
    if search_only:
        return {"get": search}
    body = {
        "oneOf": [
            _ref("Message"),
            {
                "type": "object",
                "properties": {"messages": {"type": "array", "items": _ref("Message")}},
                "required": ["messages"],
            },
        ]
    }
    return {
        "post": _op(
            "add one message, or several",
            [*params, IDEMPOTENCY],
            ("201", positions),
            requestBody={"required": True, "content": {"application/json": {"schema": body}}},
        ),
        "get": _op("what the view returns now (read-your-writes)", [*params, AFTER], ("200", messages)),
        "delete": _op("clear the memory (the log keeps the history)", [*params, IDEMPOTENCY], ("200", positions)),
    }


def _plain(summary: str, media: str = "application/json") -> dict[str, Any]:
    return {"get": {"summary": summary, "responses": {"200": {"description": summary, "content": {media: {}}}}}}


def document(session_header: str) -> dict[str, Any]:
    header = {"name": session_header, "in": "header", "required": True, "schema": {"type": "string"}}
    messages = _session_ops([NS, SID])
    audit = _op(
        "the session's history from the log; with as_of or offset, each view at that cut (helix-es audit --json)",
        [
            NS,
            SID,
            {
                "name": "as_of",
                "in": "query",
                "schema": {"type": "string"},
                "description": "ISO-8601, now, -10m, 2h ago",
            },
            {"name": "offset", "in": "query", "schema": {"type": "integer", "minimum": 0}},
            {"name": "view", "in": "query", "schema": {"type": "string"}},
        ],
        ("200", _json({"type": "object"}, "the audit report")),
    )
    forget = _op(
        "erase the session by crypto-shredding (admin keys only)",
        [NS, SID],
        ("200", _json({"type": "object"}, "what was erased (helix-es forget --json)")),
        requestBody={"required": False, "content": {"application/json": {"schema": _ref("Forget")}}},
    )
    forget["responses"]["409"] = _json(_ref("Error"), "the session cannot be shredded; nothing changed")
    sessions = _op(
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
        ("200", _json(_ref("Sessions"), "a page of sessions")),
    )
    namespaces = _op("the namespaces on the log that this key may use", [], ("200", _json(_ref("Namespaces"), "them")))
    return {
        "openapi": "3.1.0",
        "info": {"title": "helix-es memory service", "version": __version__},
        "paths": {
            "/v1/{namespace}/sessions/{session_id}/messages": messages,
            "/v1/{namespace}/sessions/{session_id}/search": _session_ops([NS, SID], search_only=True),
            "/v1/{namespace}/sessions/{session_id}/audit": {"get": audit},
            "/v1/{namespace}/sessions/{session_id}/forget": {"post": forget},
            "/v1/{namespace}/sessions": {"get": sessions},
            "/v1/namespaces": {"get": namespaces},
            "/v1/{namespace}/messages": _session_ops([NS, header]),
            "/v1/{namespace}/search": _session_ops([NS, header], search_only=True),
            "/healthz": _plain("the process is alive"),
            "/readyz": _plain("200 when the log and stores answer and the lag is under --lag-bound, else 503"),
            "/metrics": _plain("Prometheus metrics", "text/plain"),
            "/openapi.json": _plain("this document"),
            "/ui/": _plain("the web console", "text/html"),
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": SCHEMAS,
        },
    }


_TEXT = {"type": "string"}
SCHEMAS: dict[str, Any] = {
    "Message": {
        "type": "object",
        "required": ["role"],
        "additionalProperties": False,
        "properties": {
            "role": {"enum": ["system", "user", "assistant", "tool"]},
            "content": _TEXT,
            "name": _TEXT,
            "tool_calls": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["id", "name"],
                    "properties": {
                        "id": _TEXT,
                        "name": _TEXT,
                        "arguments": {"type": "string", "description": "JSON text"},
                    },
                },
            },
            "tool_call_id": _TEXT,
            "metadata": {"type": "object", "additionalProperties": _TEXT},
        },
    },
    "Messages": {
        "type": "object",
        "properties": {
            "namespace": _TEXT,
            "session_id": _TEXT,
            "messages": {"type": "array", "items": _ref("Message")},
        },
    },
    "Positions": {
        "type": "object",
        "properties": {
            "positions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {"topic": _TEXT, "partition": {"type": "integer"}, "offset": {"type": "integer"}},
                },
            }
        },
    },
    "Sessions": {
        "type": "object",
        "properties": {
            "namespace": _TEXT,
            "sessions": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "session_id": _TEXT,
                        "events": {"type": "integer"},
                        "first_time": {"type": "string", "format": "date-time"},
                        "last_time": {"type": "string", "format": "date-time"},
                    },
                },
            },
            "total": {"type": "integer", "description": "sessions that match q, on every page"},
            "next": {"type": ["string", "null"], "description": "pass as after= for the next page"},
        },
    },
    "Namespaces": {"type": "object", "properties": {"namespaces": {"type": "array", "items": _TEXT}}},
    "Forget": {
        "type": "object",
        "properties": {"reason": _TEXT, "allow_unshreddable": {"type": "boolean", "default": False}},
    },
    "Error": {"type": "object", "required": ["error"], "properties": {"error": _TEXT, "field": _TEXT}},
}
