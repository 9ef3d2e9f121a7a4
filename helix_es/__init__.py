"""helix-es: an event-sourced memory store for LLM agents."""

from helix_es._version import __version__ as __version__
from helix_es.client.memory import ViewMemory
from helix_es.client.middleware import chain, register
from helix_es.client.open import open_memory
from helix_es.client.protocol import Memory
from helix_es.client.sessions import MemoryHolder, SessionMemoryManager
from helix_es.config import Config, load_config
from helix_es.history.audit import audit
from helix_es.history.erasure import forget
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
from helix_es.model.facts import Fact
from helix_es.model.message import Message, ToolCall
from helix_es.model.recall import RecallHit

__all__ = [
    "Config",
    "ConfigError",
    "ConsistencyTimeout",
    "Event",
    "EventTooLarge",
    "Fact",
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
    "RecallHit",
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
