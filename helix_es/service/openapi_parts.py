"""The building blocks of the OpenAPI document (`openapi.py`, `openapi_facts.py`): the namespace, the
consistency token, responses, the errors every /v1 route may answer, an operation, text every store holds."""

from __future__ import annotations

from typing import Any

from helix_es.service.requests import MAX_DEPTH

NAMESPACE = {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,200}$"}
NS = {"name": "namespace", "in": "path", "required": True, "schema": NAMESPACE}
AFTER = {
    "name": "X-Helix-After",
    "in": "header",
    "required": False,
    "description": "The X-Helix-After of a write of this session: the read waits until the view has applied it "
    "(504 if not in time). A token no write of the session gave is a 400.",
    "schema": {"type": "string", "minLength": 1},
}
LIMITS = (
    f"A body is at most --max-body bytes (default 1 MiB; 413) and nests arrays and objects at most {MAX_DEPTH} "
    "deep (400)."
)


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def response(schema: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def error(description: str) -> dict[str, Any]:
    return response(ref("Error"), description)


# What every /v1 route may answer besides its own success.
V1_ERRORS = {
    "401": error("no or unknown API key"),
    "403": error("the key may not use this namespace (or forget or erase, without admin)"),
    "404": error("no such route: a path segment left unencoded (a session id's `/`)"),
    "422": error("bad input; `field` names it"),
    "503": error("the log or a store failed; retry"),
}
BODY_ERRORS = {
    "400": error(f"the body is not JSON, or nests arrays and objects deeper than {MAX_DEPTH}"),
    "413": error("the body is over --max-body (default 1 MiB)"),
}
READ_ERRORS = {
    "400": error("X-Helix-After is not a token of a write of this session"),
    "504": error("the view did not apply the awaited write within memory.read_timeout"),
}


def operation(
    summary: str, params: list[dict[str, Any]], ok: tuple[str, dict[str, Any]], *errors: dict[str, Any], **more: Any
) -> dict[str, Any]:
    responses = {ok[0]: ok[1], **V1_ERRORS}
    for extra in errors:
        responses.update(extra)
    return {"summary": summary, "parameters": params, "security": [{"bearer": []}], "responses": responses, **more}


def strings(*, empty: bool = True, null: bool = False) -> dict[str, Any]:
    """Text every store holds: no NUL, no lone surrogate."""
    text = {"type": ["string", "null"] if null else "string", "pattern": "^[^\\u0000\\ud800-\\udfff]*$"}
    return text if empty else {**text, "minLength": 1}


POSITION = {
    "type": "object",
    "required": ["topic", "partition", "offset"],
    "additionalProperties": False,
    "properties": {
        "topic": {"type": "string"},
        "partition": {"type": "integer", "minimum": 0},
        "offset": {"type": "integer", "minimum": 0},
    },
}


def positions_response() -> dict[str, Any]:
    """A write's answer: where its events landed, and the consistency token."""
    positions = response(ref("Positions"), "where the events landed on the log")
    positions["headers"] = {
        "X-Helix-After": {"required": True, "schema": {"type": "string"}, "description": "the consistency token"}
    }
    return positions
