"""The facts routes of the OpenAPI document (`service.facts`): read a namespace's facts, assert one, retract one."""

from __future__ import annotations

from typing import Any

from helix_es.service.openapi_parts import (
    AFTER,
    BODY_ERRORS,
    NS,
    POSITION,
    READ_ERRORS,
    operation,
    positions_response,
    ref,
    response,
    strings,
)

MAX_TEXT = 1000  # a subject, predicate, value or filter (helix_es.model.facts)
TIME = {"type": "string", "format": "date-time"}


def _text(description: str) -> dict[str, Any]:
    return {**strings(empty=False), "maxLength": MAX_TEXT, "description": description}


def _param(name: str, where: str, schema: dict[str, Any], description: str, required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": where, "required": required, "schema": schema, "description": description}


TEXT = {**strings(empty=False), "maxLength": MAX_TEXT}


def facts_paths() -> dict[str, Any]:
    read = operation(
        "the namespace's facts from its facts view: those holding at as_of as the memory knew them at known_as_of "
        "(both default to now); with history, every fact of the subject and predicate",
        [
            NS,
            _param("subject", "query", TEXT, "only this subject (any case)"),
            _param("predicate", "query", TEXT, "only this predicate (lives_in, likes, ...)"),
            _param("as_of", "query", TIME, "valid time, with an offset: what held in the world then (default now)"),
            _param("known_as_of", "query", TIME, "known time, with an offset: as the memory knew it then"),
            _param(
                "history",
                "query",
                {"type": "boolean", "default": False},
                "every fact of the subject and predicate, superseded and retracted ones too",
            ),
            AFTER,
        ],
        ("200", response(ref("Facts"), "the facts, by subject and predicate, each in valid-time order")),
        READ_ERRORS,
        description="A memory without a facts view is a 422 naming `memory`. The corrections of this API are "
        "events of the namespace's session `facts`: send the X-Helix-After of one to read it on any replica.",
    )
    state = operation(
        "a person asserts a fact (FactAsserted): it outranks what the model drew from earlier turns",
        [NS],
        ("201", positions_response()),
        BODY_ERRORS,
        requestBody={"required": True, "content": {"application/json": {"schema": ref("Assert")}}},
    )
    retract = operation(
        "take a fact back (FactRetracted): the model saying it again from earlier turns cannot revive it",
        [
            NS,
            _param("fact_id", "path", TEXT, "a fact's id, as GET lists it", required=True),
            _param("reason", "query", TEXT, "why, kept on the log (no personal data)"),
        ],
        ("200", positions_response()),
        description="An id no fact of the namespace has is a 422 naming `fact_id`.",
    )
    return {
        "/v1/{namespace}/facts": {"get": read, "post": state},
        "/v1/{namespace}/facts/{fact_id}": {"delete": retract},
    }


FACTS_SCHEMAS: dict[str, Any] = {
    "Assert": {
        "type": "object",
        "required": ["subject", "predicate", "value"],
        "additionalProperties": False,
        "properties": {
            "subject": _text("who or what the fact is about, not only spaces"),
            "predicate": _text("lower snake_case once stored: `works at` is `works_at`"),
            "value": _text("the value"),
            "valid_from": {
                **TIME,
                "type": ["string", "null"],
                "description": "when it began to hold in the world, ISO-8601 with an offset (years 1-9999 in UTC); "
                "absent: now",
            },
        },
    },
    "Fact": {
        "type": "object",
        "required": [
            "id",
            "subject",
            "predicate",
            "value",
            "valid_from",
            "valid_to",
            "known_from",
            "known_to",
            "source",
            "model",
        ],
        "additionalProperties": False,
        "properties": {
            "id": {"type": "string"},
            "subject": {"type": "string"},
            "predicate": {"type": "string"},
            "value": {"type": "string"},
            "valid_from": {**TIME, "description": "when it began to hold in the world"},
            "valid_to": {**TIME, "type": ["string", "null"], "description": "when a newer value superseded it"},
            "known_from": {**TIME, "description": "when the memory learned it"},
            "known_to": {**TIME, "type": ["string", "null"], "description": "when it was retracted or cleared"},
            "source": {
                "type": "object",
                "required": ["session_id", "positions"],
                "additionalProperties": False,
                "properties": {
                    "session_id": {"type": "string"},
                    "positions": {"type": "array", "items": POSITION, "description": "the events it came from"},
                },
            },
            "model": {"type": ["string", "null"], "description": "the extractor's model; null: a person asserted it"},
        },
    },
    "Facts": {
        "type": "object",
        "required": ["facts"],
        "additionalProperties": False,
        "properties": {"facts": {"type": "array", "items": ref("Fact")}},
    },
}
