"""The erasure route of the OpenAPI document (`service.erasures`): erase a person from a namespace."""

from __future__ import annotations

from typing import Any

from helix_es.history.subject_scan import MAX_SUBJECT
from helix_es.service.openapi_parts import BODY_ERRORS, NS, operation, ref, response, strings

_LIST = {"type": "array", "items": {"type": "string"}}


def erasure_paths() -> dict[str, Any]:
    receipt = ref("Receipt")
    erase = operation(
        "erase a person from every session and view of the namespace, with a verified receipt (admin keys only)",
        [NS],
        ("201", response(receipt, "the erasure's receipt, also recorded on the log (SubjectErased)")),
        {"200": response(receipt, "a dry run: what would go; nothing was written")},
        BODY_ERRORS,
        requestBody={"required": True, "content": {"application/json": {"schema": ref("Erasure")}}},
        description="The subject's own sessions (messages whose metadata.user_id is the subject, or facts about "
        "it) are crypto-shredded and dropped from every view; messages naming it in other sessions (whole word, "
        "any case) and facts about it leave every view; then every view and the log are checked. The answer is "
        "201 whatever the check found: read `verification.passed`. Running it again erases nothing more.",
    )
    return {"/v1/{namespace}/erasures": {"post": erase}}


ERASURE_SCHEMAS: dict[str, Any] = {
    "Erasure": {
        "type": "object",
        "required": ["subject"],
        "additionalProperties": False,
        "properties": {
            "subject": {
                **strings(empty=False),
                "maxLength": MAX_SUBJECT,
                "description": "the person: a user id (metadata.user_id) or a name; not blank",
            },
            "dry_run": {"type": "boolean", "default": False, "description": "list what would go; write nothing"},
        },
    },
    "Receipt": {
        "type": "object",
        "required": [
            "subject",
            "request",
            "namespace",
            "dry_run",
            "sessions",
            "shredded",
            "not_shredded",
            "key_ids",
            "messages",
            "facts",
            "views",
            "undecodable",
            "log",
            "verification",
        ],
        "properties": {
            "subject": {"type": "string"},
            "request": {"type": "string", "description": "the erasure's id"},
            "namespace": {"type": "string"},
            "dry_run": {"type": "boolean"},
            "sessions": {**_LIST, "description": "the subject's own sessions"},
            "shredded": _LIST,
            "not_shredded": {**_LIST, "description": "sessions the log keeps readable (no key of a key store)"},
            "key_ids": {**_LIST, "description": "data keys destroyed (a dry run: that would be)"},
            "messages": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "integer"}},
                "description": "per other session, the offsets of its messages naming the subject that leave",
            },
            "facts": {**_LIST, "description": "ids of facts about the subject that leave"},
            "views": {"type": "object", "additionalProperties": {"type": "object"}},
            "undecodable": {"type": "array", "items": {"type": "object"}},
            "log": {"type": "string", "description": "what the log keeps"},
            "verification": {
                "type": ["object", "null"],
                "required": ["passed", "scanned", "failures"],
                "properties": {
                    "passed": {"type": "boolean"},
                    "scanned": {"type": "object"},
                    "failures": _LIST,
                },
            },
        },
    },
}
