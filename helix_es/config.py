"""Configuration: the seed's YAML as written, plus one `log:` key. Errors name the key."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from helix_es import names
from helix_es.errors import ConfigError
from helix_es.views import IndexView, View
from helix_es.views.conversation import Conversation
from helix_es.views.sliding_window import SlidingWindow

ViewFactory = Callable[[Mapping[str, Any], str], View | IndexView]


def _int(options: Mapping[str, Any], key: str, where: str, default: int) -> int:
    value = options.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{where}.{key}", f"must be a whole number, got {value!r}")
    return value


def _sliding_window(options: Mapping[str, Any], where: str) -> View:
    size = _int(options, "window_size", where, 30)
    if size < 1:
        raise ConfigError(f"{where}.window_size", f"must be >= 1, got {size}")
    return SlidingWindow(size)


VIEW_TYPES: dict[str, ViewFactory] = {
    "conversation": lambda options, where: Conversation(),
    "sliding-window": _sliding_window,
}
VIEW_KEYS: dict[str, set[str]] = {"conversation": set(), "sliding-window": {"window_size"}}

STORES = ("memory", "redis", "postgres")
COMMON_KEYS = {
    "type", "store", "namespace", "redis_url", "dsn", "postgres_dsn", "consistency",
    "read_timeout", "session_id", "session_id_header", "ttl",
}  # fmt: skip
LOG_KEYS = {"type", "bootstrap_servers", "topic_prefix", "partitions", "replication_factor", "path", "fsync"}


@dataclass(frozen=True)
class LogConfig:
    type: Literal["embedded", "kafka"] = "embedded"
    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = names.DEFAULT_TOPIC_PREFIX
    partitions: int = 6
    replication_factor: int = 1
    path: str = ".helix/log"
    fsync: bool = True


@dataclass(frozen=True)
class MemoryConfig:
    type: str
    view: View | IndexView
    store: str = "memory"
    namespace: str = "default"
    redis_url: str | None = None
    postgres_dsn: str | None = None
    consistency: Literal["read-your-writes", "eventual"] = "read-your-writes"
    read_timeout: float = 5.0
    session_id: str | None = None
    session_id_header: str | None = None


@dataclass(frozen=True)
class Config:
    memory: MemoryConfig
    log: LogConfig = field(default_factory=LogConfig)
    middleware: tuple[str, ...] = ()


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(where, f"must be a mapping, got {type(value).__name__}")
    return value


def _read_source(source: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    text = str(source)
    if isinstance(source, os.PathLike) or ("\n" not in text and Path(text).is_file()):
        where = text
        text = Path(text).read_text()
    else:
        where = "<yaml>"
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(where, f"is not valid YAML: {exc}") from None
    if isinstance(doc, str) and "\n" not in text:
        raise ConfigError("config", f"{text!r} is neither a file nor a YAML mapping")
    return _mapping(doc, where)


def load_config(source: Mapping[str, Any] | str | os.PathLike[str], *, agent: str | None = None) -> Config:
    """Read a dict, YAML text or a path: a whole `agents:` document or one `memory:` mapping."""
    doc = _read_source(source)
    middleware: Any = doc.get("memory_middleware", ())
    where = "memory"
    if "agents" in doc:
        agents = doc["agents"]
        if not isinstance(agents, list) or not agents:
            raise ConfigError("agents", "must be a non-empty list")
        picked = [a for a in agents if isinstance(a, Mapping) and (agent is None or a.get("id") == agent)]
        if not picked:
            raise ConfigError("agents", f"no agent with id {agent!r}")
        index = agents.index(picked[0])
        entry = picked[0]
        where = f"agents[{index}].memory"
        memory = _mapping(entry.get("memory", {"type": "conversation"}), where)
        middleware = entry.get("memory_middleware", middleware)
        if "namespace" not in memory and isinstance(entry.get("id"), str):
            memory = {**memory, "namespace": entry["id"]}  # the agent id scopes its memory
    elif "memory" in doc:
        memory = _mapping(doc["memory"], "memory")
    elif "type" in doc:
        memory, where = doc, "memory"
    else:
        raise ConfigError("memory", "missing: give a `memory:` mapping or an `agents:` list")
    if not isinstance(middleware, (list, tuple)) or not all(isinstance(m, str) for m in middleware):
        raise ConfigError("memory_middleware", "must be a list of middleware names")
    log = parse_log(doc.get("log"), "log")
    return Config(memory=parse_memory(memory, where, log), log=log, middleware=tuple(middleware))


def parse_log(raw: Any, where: str) -> LogConfig:
    if raw is None:
        return LogConfig()
    raw = _mapping(raw, where)
    unknown = set(raw) - LOG_KEYS
    if unknown:
        raise ConfigError(f"{where}.{sorted(unknown)[0]}", f"unknown key; known: {sorted(LOG_KEYS)}")
    kind = raw.get("type", "embedded")
    if kind not in ("embedded", "kafka"):
        raise ConfigError(f"{where}.type", f"must be kafka or embedded, got {kind!r}")
    default = LogConfig()
    bootstrap = raw.get("bootstrap_servers") or os.environ.get("HELIX_KAFKA_BOOTSTRAP") or default.bootstrap_servers
    prefix = raw.get("topic_prefix", default.topic_prefix)
    if not isinstance(prefix, str) or not names.NAMESPACE_RE.fullmatch(prefix):
        raise ConfigError(f"{where}.topic_prefix", f"must match [A-Za-z0-9._-]+, got {prefix!r}")
    partitions = _int(raw, "partitions", where, default.partitions)
    replication = _int(raw, "replication_factor", where, default.replication_factor)
    if partitions < 1 or replication < 1:
        raise ConfigError(f"{where}.partitions", "partitions and replication_factor must be >= 1")
    fsync = raw.get("fsync", True)
    if not isinstance(fsync, bool):
        raise ConfigError(f"{where}.fsync", f"must be true or false, got {fsync!r}")
    return LogConfig(kind, str(bootstrap), prefix, partitions, replication, str(raw.get("path", default.path)), fsync)


def parse_memory(raw: Mapping[str, Any], where: str, log: LogConfig | None = None) -> MemoryConfig:
    kind = raw.get("type", "conversation")
    if kind not in VIEW_TYPES:
        raise ConfigError(f"{where}.type", f"unknown memory type {kind!r}; known: {sorted(VIEW_TYPES)}")
    unknown = set(raw) - COMMON_KEYS - VIEW_KEYS[kind]
    if unknown:
        raise ConfigError(f"{where}.{sorted(unknown)[0]}", f"is not a key of a {kind} memory")
    view = VIEW_TYPES[kind](raw, where)
    store = raw.get("store", "memory")
    if store not in STORES:
        raise ConfigError(f"{where}.store", f"must be one of {list(STORES)}, got {store!r}")
    if log is not None and log.type == "kafka" and store == "memory":
        raise ConfigError(
            f"{where}.store",
            "memory views live in one process, but a Kafka log is projected by separate workers; "
            "use store: redis or postgres with log: kafka",
        )
    namespace = names.check_namespace(raw.get("namespace", "default"), f"{where}.namespace", ConfigError)
    consistency = raw.get("consistency", "read-your-writes")
    if consistency not in ("read-your-writes", "eventual"):
        raise ConfigError(f"{where}.consistency", f"must be read-your-writes or eventual, got {consistency!r}")
    timeout = raw.get("read_timeout", 5.0)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ConfigError(f"{where}.read_timeout", f"must be a positive number of seconds, got {timeout!r}")
    session_id = raw.get("session_id")
    if session_id is not None:
        names.check_session_id(session_id, f"{where}.session_id", ConfigError)
    redis_url = raw.get("redis_url") or os.environ.get("HELIX_REDIS_URL")
    dsn = raw.get("dsn") or raw.get("postgres_dsn") or os.environ.get("HELIX_POSTGRES_DSN")
    if store == "redis" and not redis_url:
        raise ConfigError(f"{where}.redis_url", "store: redis needs redis_url (or HELIX_REDIS_URL)")
    if store == "postgres" and not dsn:
        raise ConfigError(f"{where}.dsn", "store: postgres needs dsn (or HELIX_POSTGRES_DSN)")
    return MemoryConfig(
        type=kind,
        view=view,
        store=store,
        namespace=namespace,
        redis_url=redis_url,
        postgres_dsn=dsn,
        consistency=consistency,
        read_timeout=float(timeout),
        session_id=session_id,
        session_id_header=raw.get("session_id_header"),
    )
