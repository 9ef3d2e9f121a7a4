"""helix-es: an event-sourced memory store for LLM agents."""

__version__ = "0.1.0"

from typing import TYPE_CHECKING

from helix_es.client.middleware import chain, register
from helix_es.client.sessions import MemoryHolder, SessionMemoryManager  # imports helix_es.memory only when used
from helix_es.config import Config, load_config
from helix_es.model.errors import (
    ConfigError,
    ConsistencyTimeout,
    EventTooLarge,
    HelixError,
    InvalidInput,
    InvalidMessage,
    LogCorrupted,
    UnknownSchema,
)
from helix_es.model.events import Event, MemoryCleared, MessageAdded, Position, Record, SessionErased
from helix_es.model.message import Message, ToolCall

if TYPE_CHECKING:
    from helix_es.client.audit import audit
    from helix_es.client.erasure import forget
    from helix_es.client.memory import Memory, ViewMemory, open_memory

_LAZY = {"Memory", "ViewMemory", "open_memory"}


def __getattr__(name: str) -> object:
    # The client pulls in projectors (the shared folds), which import helix_es: load it on first use.
    if name in _LAZY:
        from helix_es.client import memory

        return getattr(memory, name)
    if name == "audit":  # it folds views with projectors too: imported on first use
        from helix_es.client.audit import audit

        return audit
    if name == "forget":  # crypto-shredding erasure (helix_es.erasure); loads the client too
        from helix_es.client.erasure import forget

        return forget
    raise AttributeError(f"module 'helix_es' has no attribute {name!r}")


__all__ = [
    "Config",
    "ConfigError",
    "ConsistencyTimeout",
    "Event",
    "EventTooLarge",
    "HelixError",
    "InvalidInput",
    "InvalidMessage",
    "LogCorrupted",
    "Memory",
    "MemoryCleared",
    "MemoryHolder",
    "Message",
    "MessageAdded",
    "Position",
    "Record",
    "SessionErased",
    "SessionMemoryManager",
    "ToolCall",
    "UnknownSchema",
    "ViewMemory",
    "audit",
    "chain",
    "forget",
    "load_config",
    "open_memory",
    "register",
]
