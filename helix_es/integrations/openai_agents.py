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

The memory lives on helix-es's own event loop (`helix_es.sync`), not on the caller's: a session is
used from any thread and any event loop (`Runner.run_sync` in worker threads, one `asyncio.run`
after another) as `SQLiteSession` is, and no asyncio object of one loop is ever awaited from another.

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
import dataclasses
import json
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from agents.items import TResponseInputItem
from agents.memory import SessionSettings

from helix_es.client.memory import retract
from helix_es.client.protocol import Memory
from helix_es.config import Config, load_config
from helix_es.model.errors import ConfigError, HelixError, InvalidInput
from helix_es.model.message import Message, ToolCall
from helix_es.sync import MemoryClosed, SyncMemory
from helix_es.sync import open_memory as open_sync

__all__ = ["ITEM", "KIND", "HelixSession", "SessionClosed", "item_message", "message_items"]

ITEM = "helix.openai_agents.item"  # Message.metadata key: the SDK item, exactly, as JSON text
KIND = "helix.openai_agents.type"  # Message.metadata key: the item's type ("message" for role items)
_ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
_TEXT_KEYS = ("text", "refusal")  # where a content part keeps its text (input_text, output_text, refusal)
# Middleware that rewrite a message's text but leave metadata, and so the item, as it is.
_TEXT_MIDDLEWARE = ("redaction",)
T = TypeVar("T")


class SessionClosed(HelixError, RuntimeError):
    """The session was closed (`close`, `aclose`): it reads and writes nothing more."""


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

    The memory opens on first use, on helix-es's own event loop (`helix_es.sync`), so one session
    serves any thread and any event loop, as `SQLiteSession` does: each call is handed to that
    loop and awaited, and calls on one session run there one at a time, whichever loop made them.
    `close()` (sync, as `SQLiteSession`'s), `aclose()` or leaving `async with` releases it. Two
    processes popping the same session at once may both take back an item each, and return the
    same one.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str,
        config: Mapping[str, Any] | str | os.PathLike[str] | Config,
        *,
        agent: str | None = None,
        session_settings: SessionSettings | Mapping[str, Any] | None = None,
    ) -> None:
        self.session_id = session_id
        self.session_settings = _settings(session_settings)
        self._config = config
        self._agent = agent
        self._memory: SyncMemory | None = None
        self._opening = threading.Lock()
        self._closed = False
        self._calls: asyncio.Lock | None = None  # made and used on helix-es's loop only

    async def memory(self) -> SyncMemory:
        """The helix memory behind the session (opened on first use): a `helix_es.sync` memory, so
        any thread or loop may use it (async code: `await asyncio.wrap_future(memory.submit(...))`)."""
        memory = self._memory
        if memory is None or self._closed:
            # Opening connects to the log and stores: in a worker thread, so this loop keeps running.
            memory = await asyncio.get_running_loop().run_in_executor(None, self._open)
        return memory

    def _open(self) -> SyncMemory:
        with self._opening:  # many threads' first calls: one opening
            if self._closed:
                raise self._closed_error()
            if self._memory is None:
                cfg = self._config if isinstance(self._config, Config) else load_config(self._config, agent=self._agent)
                for i, name in enumerate(cfg.middleware):
                    if name in _TEXT_MIDDLEWARE:
                        raise ConfigError(
                            f"memory_middleware[{i}]",
                            f"{name} does not cover Message.metadata, where HelixSession keeps each item whole: "
                            "the item's text would reach the log as it is",
                        )
                self._memory = open_sync(cfg, session_id=self.session_id)
            return self._memory

    async def _run(self, call: Callable[[Memory], Awaitable[T]]) -> T:
        """`call(memory)` on helix-es's loop, alone among this session's calls, awaited from this loop."""
        memory = await self.memory()
        try:
            return await asyncio.wrap_future(memory.submit(lambda m: self._alone(call, m)))
        except MemoryClosed:  # closed by another thread meanwhile
            raise self._closed_error() from None

    def _closed_error(self) -> SessionClosed:
        return SessionClosed(f"{type(self).__name__} is closed (session {self.session_id!r})")

    async def _alone(self, call: Callable[[Memory], Awaitable[T]], memory: Memory) -> T:
        if self._calls is None:
            self._calls = asyncio.Lock()
        async with self._calls:
            return await call(memory)

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items, oldest first; with `limit` (else `session_settings.limit`) the newest
        that many (0: none; a negative limit: all, as `SQLiteSession`)."""
        settings = self.session_settings
        wanted = limit if limit is not None or settings is None else settings.limit
        items = await self._run(_items)
        if wanted is None or wanted < 0:
            return items
        return items[-wanted:] if wanted else []

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """One `MessageAdded` per item, in order. Every item is checked first: a bad one
        (`InvalidInput` naming `items[i]`) writes none."""
        if self._closed:
            raise self._closed_error()
        if isinstance(items, Mapping) or not isinstance(items, Sequence):
            raise InvalidInput("items", f"must be a list of items, got {type(items).__name__}")
        messages = [item_message(item, f"items[{i}]") for i, item in enumerate(items)]
        if messages:
            await self._run(lambda memory: _add_all(memory, messages))

    async def pop_item(self) -> TResponseInputItem | None:
        """The newest item, taken back by a `MessageRetracted` event; None when there is none."""
        return await self._run(_pop)

    async def clear_session(self) -> None:
        """A `MemoryCleared` event: the session's views are empty, its history stays on the log."""
        await self._run(lambda memory: memory.clear())

    def close(self) -> None:
        """Release the memory (its calls in flight finish first); the session is unusable after.
        Closing again does nothing."""
        self._release()

    async def aclose(self) -> None:
        """`close()`, without blocking this loop."""
        await asyncio.get_running_loop().run_in_executor(None, self._release)

    def _release(self) -> None:  # close's work, whatever a subclass makes of close
        with self._opening:
            self._closed = True
            memory, self._memory = self._memory, None
        if memory is not None:
            memory.close()

    async def __aenter__(self) -> HelixSession:
        await self.memory()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _settings(given: SessionSettings | Mapping[str, Any] | None) -> SessionSettings:
    """`session_settings` as the SDK's sessions take it; `TypeError` naming a key it does not know."""
    if given is None:
        return SessionSettings()
    if isinstance(given, Mapping):
        unknown = sorted(set(given) - {f.name for f in dataclasses.fields(SessionSettings)})
        if unknown:
            raise TypeError(f"Unknown session settings: {', '.join(map(str, unknown))}")
        return SessionSettings(**given)
    return given


async def _items(memory: Memory) -> list[TResponseInputItem]:
    return [item for m in await memory.get() for item in message_items(m)]


async def _add_all(memory: Memory, messages: list[Message]) -> None:
    for m in messages:
        await memory.add(m)


async def _pop(memory: Memory) -> TResponseInputItem | None:
    items = await _items(memory)
    if not items:
        return None
    await retract(memory, reason="openai-agents pop_item")
    return items[-1]
