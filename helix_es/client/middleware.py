"""Write-path middleware: `Callable[[Memory], Memory]`, composed outermost-first, found by name."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence

from helix_es.client.protocol import Memory
from helix_es.model.batch import check_batch
from helix_es.model.errors import ConfigError
from helix_es.model.events import Position
from helix_es.model.message import Message

Middleware = Callable[[Memory], Memory]
_registry: dict[str, Callable[[], Middleware]] = {}


def register(name: str, factory: Callable[[], Middleware]) -> None:
    """Make a middleware factory available to YAML `memory_middleware: [name]`."""
    _registry[name] = factory


def chain(*middleware: Middleware) -> Middleware:
    """`chain(a, b, c)(m)` is `a(b(c(m)))`: `a` sees every call first."""

    def wrap(memory: Memory) -> Memory:
        for mw in reversed(middleware):
            memory = mw(memory)
        return memory

    return wrap


async def add_many(
    memory: Memory, messages: Iterable[Message], *, idempotency_keys: Sequence[str | None] | None = None
) -> list[Position]:
    """`memory.add_many(...)`: how a middleware passes a batch on. A memory without it (a custom one) gets
    each message's `add` in turn, once every message is checked (a bad one: nothing is written)."""
    method: Callable[..., Awaitable[list[Position]]] | None = getattr(memory, "add_many", None)
    if callable(method):
        return await method(messages, idempotency_keys=idempotency_keys)
    batch, keys = check_batch(messages, idempotency_keys)
    return [await memory.add(m, idempotency_key=k) for m, k in zip(batch, keys, strict=True)]


# Built-ins that register themselves when their module is imported: imported when first named.
_BUILTIN_MODULES = {"redaction": "helix_es.client.redaction"}


def build_chain(names: Iterable[str], provided: Mapping[str, Callable[[], Middleware]] | None = None) -> Middleware:
    """The chain YAML `memory_middleware` names. `provided` are the factories of the caller's runtime
    (`encryption`, over its key provider): they come first, since they hold what it shares."""
    own = provided or {}
    found = []
    for i, name in enumerate(names):
        if name not in own and name not in _registry and name in _BUILTIN_MODULES:
            importlib.import_module(_BUILTIN_MODULES[name])
        factory = own.get(name) or _registry.get(name)
        if factory is None:
            known = sorted({*_registry, *_BUILTIN_MODULES, *own})
            raise ConfigError(f"memory_middleware[{i}]", f"unknown middleware {name!r}; known: {known}")
        try:
            found.append(factory())
        except ConfigError as exc:
            # A factory knows what is wrong (a missing env key), not where it was named: add that.
            raise ConfigError(f"memory_middleware[{i}]", f"{name}: {exc}") from exc
    return chain(*found)


class LoggingMemory:
    """Logs every add/get/search/clear at debug level through stdlib logging."""

    def __init__(self, inner: Memory, logger: logging.Logger | None = None) -> None:
        self.inner = inner
        self.log = logger or logging.getLogger("helix_es.memory")

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)

    async def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
        position = await self.inner.add(message, idempotency_key=idempotency_key)
        self.log.debug("add role=%s chars=%d -> %s", message.role, len(message.content), position)
        return position

    async def add_many(
        self, messages: Iterable[Message], *, idempotency_keys: Sequence[str | None] | None = None
    ) -> list[Position]:
        positions = await add_many(self.inner, messages, idempotency_keys=idempotency_keys)
        self.log.debug("add_many %d messages -> %s", len(positions), positions[-1:] or None)
        return positions

    async def get(self) -> list[Message]:
        messages = await self.inner.get()
        self.log.debug("get -> %d messages", len(messages))
        return messages

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        hits = await self.inner.search(query, limit)
        self.log.debug("search %r limit=%d -> %d hits", query, limit, len(hits))
        return hits

    async def clear(self, *, idempotency_key: str | None = None) -> Position:
        position = await self.inner.clear(idempotency_key=idempotency_key)
        self.log.debug("clear -> %s", position)
        return position


def logging_middleware(logger: logging.Logger | None = None) -> Middleware:
    return lambda memory: LoggingMemory(memory, logger)


register("logging", logging_middleware)
