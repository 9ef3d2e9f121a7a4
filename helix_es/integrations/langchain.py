"""LangChain chat message history over any helix-es memory (extra `langchain`).

    from langchain_core.messages import AIMessage, HumanMessage
    from helix_es.integrations.langchain import HelixChatMessageHistory

    with HelixChatMessageHistory({"memory": {"type": "conversation"}}, session_id="u1") as history:
        history.add_messages([HumanMessage("hi"), AIMessage("hello")])
        history.messages  # [HumanMessage("hi"), AIMessage("hello")]

`messages`, `add_messages` and `clear` are sync (through `helix_es.sync`); `aget_messages`,
`aadd_messages` and `aclear` are async and never block the caller's loop. Both sides use one
memory, opened on first use, so a read sees every write made before it on either side (the
memory's read-your-writes). `close()`, or leaving `with` / `async with`, releases it.

What `messages` returns is what the memory's view holds: every message for `conversation`, the
window for `sliding-window` and the others, whose tool exchanges (an `AIMessage` with
`tool_calls` and its `ToolMessage`s) stay whole or go together. The mapping between LangChain
messages and helix messages, and the `Message.metadata` keys it uses, are in
`helix_es.integrations._langchain_messages`; a message it cannot store exactly raises
`UnsupportedMessage` and nothing of that call is written.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from helix_es.client.protocol import Memory
from helix_es.config import Config, load_config
from helix_es.integrations._langchain_messages import UnsupportedMessage, from_helix, to_helix_all
from helix_es.model.errors import InvalidInput
from helix_es.model.message import Message
from helix_es.sync import MemoryClosed, SyncMemory
from helix_es.sync import open_memory as open_sync

__all__ = ["HelixChatMessageHistory", "MemoryClosed", "UnsupportedMessage"]

T = TypeVar("T")


class HelixChatMessageHistory(BaseChatMessageHistory):
    """A LangChain `BaseChatMessageHistory` whose messages are events on a helix-es log."""

    def __init__(
        self,
        config: Mapping[str, Any] | str | os.PathLike[str] | Config,
        session_id: str | None = None,
        *,
        agent: str | None = None,
    ) -> None:
        """`config` in any form `helix_es.open_memory` takes; `session_id` unless the config names one.
        A bad config raises here; the memory itself opens on first use."""
        super().__init__()
        self.config = config if isinstance(config, Config) else load_config(config, agent=agent)
        sid = session_id or self.config.memory.session_id
        if sid is None:
            raise InvalidInput("session_id", "give session_id= or memory.session_id in the config")
        self.session_id = sid
        self._memory: SyncMemory | None = None
        self._writes: asyncio.Lock | None = None  # on helix-es's loop: one batch at a time, contiguous
        self._opening = threading.Lock()
        self._closed = False

    # -- sync -------------------------------------------------------------------------------------

    @property
    def messages(self) -> list[BaseMessage]:
        """The session's messages as its view holds them, oldest first."""
        return [from_helix(m) for m in self._open().get()]

    @messages.setter
    def messages(self, messages: Sequence[BaseMessage]) -> None:
        """Replace the history: a clear, then `messages` (checked first: a bad one changes nothing)."""
        converted = to_helix_all(messages)
        self._open().run(lambda memory: self._write(lambda: _replace(memory, converted)))

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Append `messages` in order. All are checked before the first is written."""
        converted = to_helix_all(messages)
        if converted:
            self._open().run(lambda memory: self._write(lambda: _add_all(memory, converted)))

    def clear(self) -> None:
        self._open().run(lambda memory: self._write(memory.clear))

    # -- async ------------------------------------------------------------------------------------

    async def aget_messages(self) -> list[BaseMessage]:
        memory = await self._aopen()
        return [from_helix(m) for m in await asyncio.wrap_future(memory.submit(lambda m: m.get()))]

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        converted = to_helix_all(messages)
        if converted:
            memory = await self._aopen()
            await asyncio.wrap_future(memory.submit(lambda m: self._write(lambda: _add_all(m, converted))))

    async def aclear(self) -> None:
        memory = await self._aopen()
        await asyncio.wrap_future(memory.submit(lambda m: self._write(m.clear)))

    # -- lifetime ---------------------------------------------------------------------------------

    def close(self) -> None:
        """Release the memory (its calls in flight finish first). Later calls raise `MemoryClosed`."""
        with self._opening:
            self._closed = True
            memory, self._memory = self._memory, None
        if memory is not None:
            memory.close()

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> HelixChatMessageHistory:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    async def __aenter__(self) -> HelixChatMessageHistory:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"HelixChatMessageHistory(namespace={self.config.memory.namespace!r}, session_id={self.session_id!r})"

    async def _write(self, write: Callable[[], Awaitable[T]]) -> T:
        """One write call at a time, on helix-es's loop: a batch from one thread is never interleaved
        with another's, so an AIMessage's tool calls and their ToolMessages stay next to each other."""
        if self._writes is None:
            self._writes = asyncio.Lock()
        async with self._writes:
            return await write()

    def _open(self) -> SyncMemory:
        memory = self._memory
        if memory is not None:
            return memory
        with self._opening:  # many threads' first calls: one opening
            if self._closed:
                raise MemoryClosed(f"{self!r} is closed; make another")
            if self._memory is None:
                self._memory = open_sync(self.config, session_id=self.session_id)
            return self._memory

    async def _aopen(self) -> SyncMemory:
        memory = self._memory
        if memory is not None:
            return memory
        # Opening connects to the log and stores: in a worker thread, so this loop keeps running.
        return await asyncio.get_running_loop().run_in_executor(None, self._open)


async def _add_all(memory: Memory, messages: list[Message]) -> None:
    for message in messages:
        await memory.add(message)


async def _replace(memory: Memory, messages: list[Message]) -> None:
    await memory.clear()
    await _add_all(memory, messages)
