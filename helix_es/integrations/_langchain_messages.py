"""LangChain messages <-> helix `Message`, exact both ways, for any adapter that speaks LangChain's types.

The mapping (this module alone knows LangChain's message fields):

- `HumanMessage`, `AIMessage`, `SystemMessage`, `ToolMessage`: roles `user`, `assistant`,
  `system`, `tool`; their `...MessageChunk` classes the same roles, `langchain.type` naming the class.
- `content`: text as it is; a list of content blocks as its JSON text, with `langchain.content: json`.
- `name`: `name`.
- `AIMessage.tool_calls[i]` (`id`, `name`, `args`): `ToolCall(id, name, arguments=json.dumps(args))`.
- `ToolMessage.tool_call_id`: `tool_call_id`.
- every other field not at its default (`id`, `additional_kwargs`, `response_metadata`,
  `invalid_tool_calls`, `usage_metadata`, `artifact`, `status`, a chunk's `tool_call_chunks` and
  `chunk_position`, an empty `name`): `langchain.fields`, one JSON object of them.

So `Message.metadata` holds at most three keys, all written only when needed: `langchain.type`,
`langchain.content` and `langchain.fields`. List content stays in `content` (as JSON text), not in
metadata, so the encryption and redaction middleware cover it as they cover text (a list that
redaction left unreadable as JSON comes back as the text); metadata is
never encrypted, so what `langchain.fields` holds (model names, token counts, provider extras)
is stored in the clear.

Messages other programs wrote come back too: metadata keys that are not `langchain.*` (such as
the summary view's `helix.summary`) appear under `response_metadata["helix_metadata"]`, and are
metadata again when such a message is written back. Tool call arguments that are not a JSON
object come back as an `invalid_tool_calls` entry, as LangChain reports a model's bad call.

`FunctionMessage`, `ChatMessage`, `RemoveMessage`, subclasses of the message classes and
anything else raise `UnsupportedMessage` naming the type; a tool call without an id raises it
too (a tool message answers its call by id). Nothing is written then.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    HumanMessageChunk,
    SystemMessage,
    SystemMessageChunk,
    ToolMessage,
    ToolMessageChunk,
)

from helix_es.model.errors import InvalidMessage
from helix_es.model.message import Message, Role, ToolCall

__all__ = ["CONTENT_KEY", "FIELDS_KEY", "TYPE_KEY", "UnsupportedMessage", "from_helix", "to_helix", "to_helix_all"]

TYPE_KEY = "langchain.type"  # a chunk's class name
CONTENT_KEY = "langchain.content"  # "json": `content` is the JSON text of a list of content blocks
FIELDS_KEY = "langchain.fields"  # JSON object: the fields that have no place in Message, when not at their default
FOREIGN_KEY = "helix_metadata"  # in response_metadata: metadata keys of messages other programs wrote

ROLES: dict[type[BaseMessage], Role] = {
    HumanMessage: "user",
    AIMessage: "assistant",
    SystemMessage: "system",
    ToolMessage: "tool",
    HumanMessageChunk: "user",
    AIMessageChunk: "assistant",
    SystemMessageChunk: "system",
    ToolMessageChunk: "tool",
}
CLASSES: dict[str, type[BaseMessage]] = {"user": HumanMessage, "assistant": AIMessage, "system": SystemMessage}
CLASSES["tool"] = ToolMessage
CHUNKS: dict[str, type[BaseMessage]] = {
    c.__name__: c for c in (HumanMessageChunk, AIMessageChunk, SystemMessageChunk, ToolMessageChunk)
}
MAPPED = frozenset(("type", "content", "name", "tool_calls", "tool_call_id"))  # fields with a place in Message


class UnsupportedMessage(InvalidMessage):
    """A LangChain message helix-es cannot store exactly; `field` names the culprit, and nothing was written."""


def to_helix(message: BaseMessage) -> Message:
    """The helix `Message` of a LangChain message (raises `UnsupportedMessage` or `InvalidMessage`)."""
    cls = type(message)
    role = ROLES.get(cls)
    if role is None:
        kind = f"{cls.__module__}.{cls.__qualname__}"
        raise UnsupportedMessage(
            "message",
            f"{kind} cannot be stored: use HumanMessage, AIMessage, SystemMessage or ToolMessage (or their chunks)",
        )
    metadata: dict[str, str] = {}
    extra: dict[str, Any] = {}
    for field, info in cls.model_fields.items():
        if field in MAPPED:
            continue
        value = getattr(message, field)
        if value != info.get_default(call_default_factory=True):
            extra[field] = value
    foreign = extra.get("response_metadata", {}).get(FOREIGN_KEY)
    if isinstance(foreign, Mapping) and all(isinstance(k, str) and isinstance(v, str) for k, v in foreign.items()):
        metadata.update(foreign)  # read from helix, written back: metadata again
        rest = {k: v for k, v in extra["response_metadata"].items() if k != FOREIGN_KEY}
        if rest:
            extra["response_metadata"] = rest
        else:
            del extra["response_metadata"]
    content = message.content
    if isinstance(content, str):
        text = content
    else:
        text = _json(content, "content")
        metadata[CONTENT_KEY] = "json"
    name = message.name
    if name == "":  # helix names are never empty
        extra["name"], name = "", None
    if cls in CHUNKS.values():
        metadata[TYPE_KEY] = cls.__name__
    if extra:
        metadata[FIELDS_KEY] = _json(extra, ", ".join(sorted(extra)))
    calls: tuple[ToolCall, ...] = ()
    if isinstance(message, AIMessage):
        calls = tuple(_tool_call(i, call) for i, call in enumerate(message.tool_calls))
    tool_call_id = message.tool_call_id if isinstance(message, ToolMessage) else None
    return Message(role, text, name=name, tool_calls=calls, tool_call_id=tool_call_id, metadata=metadata)


def to_helix_all(messages: Iterable[BaseMessage]) -> list[Message]:
    """Every message mapped before any is written: one that cannot be raises, naming its place."""
    out = []
    for i, message in enumerate(messages):
        try:
            out.append(to_helix(message))
        except InvalidMessage as exc:
            raise type(exc)(f"messages[{i}].{exc.field}", exc.problem) from None
    return out


def from_helix(message: Message) -> BaseMessage:
    """The LangChain message of a helix `Message`: the one `to_helix` was given, field for field."""
    metadata = dict(message.metadata)
    kind = metadata.pop(TYPE_KEY, None)
    blocks = metadata.pop(CONTENT_KEY, None) == "json"
    fields = metadata.pop(FIELDS_KEY, None)
    cls = CHUNKS.get(kind or "")
    if cls is None or ROLES[cls] != message.role:
        cls = CLASSES[message.role]
    content: Any = message.content
    if blocks:
        try:
            parsed = json.loads(content)
        except ValueError:  # not ours after all (the redaction middleware may rewrite text)
            parsed = None
        if isinstance(parsed, list):
            content = parsed
    kwargs: dict[str, Any] = {"content": content}
    if fields:
        try:
            extra = json.loads(fields)
        except ValueError:
            extra = None
        if isinstance(extra, dict):
            kwargs.update((k, v) for k, v in extra.items() if k in cls.model_fields and k not in MAPPED - {"name"})
    if message.name is not None:
        kwargs["name"] = message.name
    if message.tool_calls and issubclass(cls, AIMessage):
        good, bad = [], []
        for call in message.tool_calls:
            try:
                args = json.loads(call.arguments)
            except ValueError:
                args = None
            if isinstance(args, dict):
                good.append({"name": call.name, "args": args, "id": call.id, "type": "tool_call"})
            else:
                problem = "arguments are not a JSON object"
                bad.append({"name": call.name, "args": call.arguments, "id": call.id, "error": problem})
        kwargs["tool_calls"] = good
        if bad:
            kwargs["invalid_tool_calls"] = [*kwargs.get("invalid_tool_calls", []), *bad]
    if message.tool_call_id is not None:
        kwargs["tool_call_id"] = message.tool_call_id
    if metadata:  # keys other programs wrote
        kwargs["response_metadata"] = {**kwargs.get("response_metadata", {}), FOREIGN_KEY: metadata}
    return cls(**kwargs)


def _tool_call(i: int, call: Mapping[str, Any]) -> ToolCall:
    where = f"tool_calls[{i}]"
    if not call.get("id"):
        raise UnsupportedMessage(f"{where}.id", "a tool call needs an id: the tool message answers it by that id")
    arguments = _json(call.get("args", {}), f"{where}.args")
    return ToolCall(call["id"], call["name"], arguments)


def _json(value: object, where: str) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise UnsupportedMessage(where, f"cannot be stored as JSON ({exc})") from None
