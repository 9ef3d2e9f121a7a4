"""Messages as other programs send them (JSON objects), checked before anything is written.

The JSON form is `Message.to_json`'s: `role`, `content`, and optional `name`, `tool_calls` (`id`,
`name`, `arguments` as JSON text), `tool_call_id`, `metadata` (string to string), `occurred_at`
(ISO-8601 with an offset: when it was said, if not now; given back in UTC). The REST service
and the MCP server build messages here, so both refuse the same input with the same field names.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from helix_es.model.errors import InvalidInput
from helix_es.model.message import Message

FIELDS = ("role", "content", "name", "tool_calls", "tool_call_id", "metadata", "occurred_at")


def occurred_at_from(value: object, field: str = "occurred_at") -> datetime | None:
    """An `occurred_at` given as ISO-8601 text with an offset (`2024-05-01T12:00:00Z`); None if absent.
    A time without an offset is refused: it would mean another moment on another machine."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(field, f"must be ISO-8601 text with an offset, got {type(value).__name__}")
    try:
        at = datetime.fromisoformat(value.strip())
    except ValueError:
        raise InvalidInput(field, f"cannot read {value!r} as ISO-8601 (like 2024-05-01T12:00:00Z)") from None
    if at.utcoffset() is None:
        raise InvalidInput(field, f"{value!r} has no offset: add Z or +HH:MM")
    return at


def message_from(fields: Mapping[str, Any], where: str = "") -> Message:
    """A checked `Message` from its JSON fields; `InvalidInput` naming the field (`where` prefixes it:
    `messages[2].`). Empty content is refused but for an assistant message that carries tool calls."""
    try:
        unknown = sorted(set(fields) - set(FIELDS))
        if unknown:
            raise InvalidInput(unknown[0], f"is not a message field (fields: {', '.join(FIELDS)})")
        role, content = fields.get("role"), fields.get("content", "")
        if not isinstance(role, str):
            raise InvalidInput("role", f"must be one of assistant, system, tool, user, got {role!r}")
        if not isinstance(content, str):
            raise InvalidInput("content", f"must be text, got {type(content).__name__}")
        if not content and not fields.get("tool_calls"):
            raise InvalidInput("content", "must not be empty (only an assistant message with tool_calls may be)")
        metadata = fields.get("metadata") or {}
        if not isinstance(metadata, Mapping):
            raise InvalidInput("metadata", "must be an object of strings")
        return Message(
            role,  # type: ignore[arg-type]  # Message checks it is a role
            content,
            name=fields.get("name"),
            tool_calls=fields.get("tool_calls") or (),
            tool_call_id=fields.get("tool_call_id"),
            metadata=metadata,
            occurred_at=occurred_at_from(fields.get("occurred_at")),
        )
    except InvalidInput as exc:
        raise InvalidInput(f"{where}{exc.field}", exc.problem) from None


def message_json(message: Message) -> dict[str, Any]:
    """The JSON object of a message (empty optional fields left out)."""
    out: dict[str, Any] = json.loads(message.to_json())
    return out


def messages_body(namespace: str, session_id: str | None, messages: Sequence[Message]) -> bytes:
    """`{"namespace", "session_id", "messages": [...]}` as JSON bytes, each message's own `to_json`
    text spliced in (not decoded and encoded again: the most-called answer of the REST service)."""
    head = json.dumps({"namespace": namespace, "session_id": session_id}, ensure_ascii=False, separators=(",", ":"))
    return f'{head[:-1]},"messages":[{",".join([m.to_json() for m in messages])}]}}'.encode()
