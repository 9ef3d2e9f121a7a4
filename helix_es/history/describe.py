"""One line of text for people about a message, an id or a piece of text (audit, its CLI)."""

from __future__ import annotations

import json
import re

from helix_es.model.message import Message


def quote(text: str) -> str:
    """Text JSON-quoted (unicode kept): control characters and quotes stay inert on a terminal."""
    return json.dumps(text, ensure_ascii=False)


_PLAIN = re.compile(r"[\w.:/@+-]+")


def word(text: str) -> str:
    """A name or id as it is when it is one plain word, else JSON-quoted."""
    return text if _PLAIN.fullmatch(text) else quote(text)


def describe_message(m: Message) -> str:
    """A message on one line, for people; text is JSON-quoted so control characters stay inert."""
    out = m.role + (f" ({word(m.name)})" if m.name else "") + ":"
    if m.content or not m.tool_calls:
        out += f" {quote(m.content)}"
    if m.tool_calls:
        args = (c.arguments if c.arguments.isprintable() else quote(c.arguments) for c in m.tool_calls)
        out += " calls " + ", ".join(
            f"{word(c.name)}({a}) id {word(c.id)}" for c, a in zip(m.tool_calls, args, strict=True)
        )
    if m.tool_call_id:
        out += f" answering {word(m.tool_call_id)}"
    if m.metadata:
        out += " " + json.dumps(dict(m.metadata), ensure_ascii=False)
    return out
