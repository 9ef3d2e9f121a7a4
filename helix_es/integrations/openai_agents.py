"""An OpenAI Agents SDK `Session` whose history is a helix-es memory (extra `openai-agents`).

```python
from agents import Agent, Runner
from helix_es.integrations.openai_agents import HelixSession

async with HelixSession("chat-42", config) as session:
    result = await Runner.run(agent, "hi", session=session)
```

Each SDK item (a `TResponseInputItem` dict) is one helix `Message`, so every other view of the
session means something: a message item keeps its role (`developer` is `system`) and its text
(a part list's text parts, joined by newlines); a `function_call` is an assistant message with
that tool call, its `function_call_output` a tool message answering it; `reasoning` is an
assistant message with the reasoning summary's text; any other kind, including kinds added to
the SDK later, an assistant message with its text, if it has one. The item itself is kept as
JSON text in `Message.metadata[ITEM]` and read back from there, so `get_items` returns exactly
what `add_items` was given (as JSON round-trips it, like `SQLiteSession`). A message that other
code added to the session without that key is read as the items it stands for.

`pop_item` reads the newest item and appends a `MessageRetracted` (`helix_es.client.memory.retract`):
the log keeps both, and `helix-es audit` shows what was retracted. Reads are read-your-writes.

The config is any helix-es config (`open_memory`'s forms, embedded or Kafka). The conversation
view is the one to use: it holds the whole session. With a window (sliding-window,
token-window, smart, summary, a capped conversation) `get_items` returns only what the window
holds, `pop_item` returns None once the window is empty even if older items are on the log, and
smart and summary views show their own system messages as `system` items. A composite merges
its parts' answers and drops repeats of the same role and text, so equal items would be lost.
With the encryption middleware the item is sealed with the rest (it seals metadata values), so
`helix-es forget` shreds it. The redaction middleware is refused (`ConfigError`): it rewrites a
message's text but not its metadata, which holds the item whole.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from types import TracebackType
from typing import Any

from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from helix_es.client.memory import retract
from helix_es.client.open import open_memory
from helix_es.client.protocol import Memory
from helix_es.config import Config, load_config
from helix_es.model.errors import ConfigError, HelixError, InvalidInput
from helix_es.model.message import Message, ToolCall

__all__ = ["ITEM", "KIND", "HelixSession", "SessionClosed", "item_message", "message_items"]

ITEM = "helix.openai_agents.item"  # Message.metadata key: the SDK item, exactly, as JSON text
KIND = "helix.openai_agents.type"  # Message.metadata key: the item's type ("message" for role items)
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_KEYS = ("text", "refusal")  # where a content part keeps its text (input_text, output_text, refusal)
# Middleware that rewrite a message's text but leave metadata, and so the item, as it is.
_TEXT_MIDDLEWARE = ("redaction",)


class SessionClosed(HelixError, RuntimeError):
    """The session was closed (`aclose`): it reads and writes nothing more."""


def _clean(text: str) -> str:
    """Text every store holds: no NUL, valid UTF-8 (the exact item stays in the metadata)."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def _text(content: object) -> str:
    """The text of an item's content: a string, or a part list's text parts joined by newlines."""
    if isinstance(content, str):
        return _clean(content)
    if isinstance(content, list):
        parts = [p.get(k) for p in content if isinstance(p, Mapping) for k in _TEXT_KEYS]
        return _clean("\n".join(p for p in parts if isinstance(p, str)))
    return ""


def _arguments(arguments: object) -> str:
    """JSON text for a tool call's arguments: the model's own, or that text quoted when it is not JSON."""
    text = _clean(arguments) if isinstance(arguments, str) else json.dumps(arguments)
    try:
        json.loads(text)
    except ValueError:
        return json.dumps(text)
    return text


def item_message(item: object, field: str = "item") -> Message:
    """The helix message standing for one SDK item; `InvalidInput` naming `field` if it is no item."""
    if not isinstance(item, Mapping):
        raise InvalidInput(field, f"must be an item dict (a TResponseInputItem), got {type(item).__name__}")
    try:
        exact = json.dumps(item)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(field, f"must be JSON data, as the SDK's items are ({exc})") from None
    kind = item.get("type", "message")
    kind = kind if isinstance(kind, str) and kind else "message"
    meta = {ITEM: exact, KIND: _clean(kind)}
    call_id, role = item.get("call_id"), item.get("role")
    call_id = _clean(call_id) if isinstance(call_id, str) else ""
    if kind == "message" and isinstance(role, str) and role in _ROLES:
        return Message(_ROLES[role], _text(item.get("content")), metadata=meta)  # type: ignore[arg-type]
    if kind == "function_call" and call_id and isinstance(item.get("name"), str):
        call = ToolCall(call_id, _clean(item["name"]) or "function", _arguments(item.get("arguments", "{}")))
        return Message("assistant", tool_calls=(call,), metadata=meta)
    if kind == "function_call_output" and call_id:
        output = item.get("output")
        text = _text(output) if isinstance(output, str | list) else json.dumps(output)
        return Message("tool", text, tool_call_id=call_id, metadata=meta)
    if kind == "reasoning":
        return Message("assistant", _text(item.get("summary")) or _text(item.get("content")), metadata=meta)
    text = item.get("text", item.get("content", ""))  # a kind this version does not know: its text, if any
    return Message("assistant", _text(text), metadata=meta)


def message_items(message: Message) -> list[TResponseInputItem]:
    """The SDK items a helix message stands for: the one it was made from, else what it says."""
    exact = message.metadata.get(ITEM)
    if exact is not None:
        item: TResponseInputItem = json.loads(exact)
        return [item]
    out: list[Any] = []
    if message.role == "tool":
        out.append({"type": "function_call_output", "call_id": message.tool_call_id, "output": message.content})
        return out
    if message.content or not message.tool_calls:
        out.append({"role": message.role, "content": message.content})
    for c in message.tool_calls:
        out.append({"type": "function_call", "call_id": c.id, "name": c.name, "arguments": c.arguments})
    return out


class HelixSession:
    """The SDK's `Session` protocol over one helix-es session: `session_id`, `session_settings`,
    `get_items(limit)`, `add_items`, `pop_item`, `clear_session`.

    The memory opens on first use; `aclose()` (or leaving `async with`) releases it. Calls on one
    session run one at a time. Two processes popping the same session at once may both take back
    an item each, and return the same one.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        config: Mapping[str, Any] | str | os.PathLike[str] | Config,
        *,
        agent: str | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        if isinstance(session_settings, Mapping):
            session_settings = SessionSettings(**session_settings)
        self.session_settings = session_settings if session_settings is not None else SessionSettings()
        self._config = config
        self._agent = agent
        self._stack: AsyncExitStack | None = None
        self._memory: Memory | None = None
        self._closed = False
        self._lock = asyncio.Lock()

    async def memory(self) -> Memory:
        """The helix memory behind the session (opened on first use)."""
        if self._closed:
            raise SessionClosed(f"HelixSession {self.session_id!r} is closed")
        if self._memory is None:
            cfg = self._config if isinstance(self._config, Config) else load_config(self._config, agent=self._agent)
            for i, name in enumerate(cfg.middleware):
                if name in _TEXT_MIDDLEWARE:
                    raise ConfigError(
                        f"memory_middleware[{i}]",
                        f"{name} does not cover Message.metadata, where HelixSession keeps each item whole: "
                        "the item's text would reach the log as it is",
                    )
            stack = AsyncExitStack()
            self._memory = await stack.enter_async_context(open_memory(cfg, session_id=self.session_id))
            self._stack = stack
        return self._memory

    async def _items(self) -> list[TResponseInputItem]:
        memory = await self.memory()
        return [item for m in await memory.get() for item in message_items(m)]

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with `limit` (else `session_settings.limit`) the newest
        that many (0: none; a negative limit: all, as `SQLiteSession`)."""
        settings = self.session_settings
        wanted = limit if limit is not None or settings is None else settings.limit
        async with self._lock:
            items = await self._items()
        if wanted is None or wanted < 0:
            return items
        return items[-wanted:] if wanted else []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """One `MessageAdded` per item, in order. Every item is checked first: a bad one
        (`InvalidInput` naming `items[i]`) writes none."""
        if self._closed:
            raise SessionClosed(f"HelixSession {self.session_id!r} is closed")
        if isinstance(items, Mapping) or not isinstance(items, Sequence):
            raise InvalidInput("items", f"must be a list of items, got {type(items).__name__}")
        messages = [item_message(item, f"items[{i}]") for i, item in enumerate(items)]
        if not messages:
            return
        async with self._lock:
            memory = await self.memory()
            for m in messages:
                await memory.add(m)

    async def pop_item(self) -> TResponseInputItem | None:
        """The newest item, taken back by a `MessageRetracted` event; None when there is none."""
        async with self._lock:
            items = await self._items()
            if not items:
                return None
            await retract(await self.memory(), reason="openai-agents pop_item")
            return items[-1]

    async def clear_session(self) -> None:
        """A `MemoryCleared` event: the session's views are empty, its history stays on the log."""
        async with self._lock:
            await (await self.memory()).clear()

    async def aclose(self) -> None:
        """Release the memory (its log and store connections); the session is unusable after."""
        self._closed = True
        stack, self._stack, self._memory = self._stack, None, None
        if stack is not None:
            await stack.aclose()

    async def __aenter__(self) -> HelixSession:
        await self.memory()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
