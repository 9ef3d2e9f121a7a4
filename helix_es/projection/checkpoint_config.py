"""The `checkpoints:` mapping: where a LangGraph checkpoint view lives, beside the optional `log:`.

```yaml
log: {type: kafka}
checkpoints: {store: postgres, dsn: postgresql://..., namespace: my-graph}
```
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from helix_es.config import (
    Config,
    LogConfig,
    _seconds,
    _url,
    load_config,
    only_keys,
    parse_log,
    parse_memory,
    read_source,
)
from helix_es.model import names
from helix_es.model.errors import ConfigError
from helix_es.stores import registry

CHECKPOINT_KEYS = frozenset({"store", "dsn", "postgres_dsn", "redis_url", "namespace", "read_timeout", "encryption"})
DEFAULT_NAMESPACE = "langgraph"
MEMORY_KEYS = ("agents", "memory", "type")  # a config names memories with one of these


@dataclass(frozen=True)
class CheckpointsConfig:
    store: str = "memory"
    namespace: str = DEFAULT_NAMESPACE
    redis_url: str | None = None
    dsn: str | None = None
    read_timeout: float = 5.0  # how long a read waits for the view to apply this saver's writes
    # Seal every value with the thread's data key (HELIX_KEY_STORE): `helix-es forget` can shred a thread.
    encryption: bool = False

    @property
    def location(self) -> str | None:
        kind = registry.kind(self.store, "checkpoints.store")
        return self.redis_url if kind.address == "redis_url" else self.dsn if kind.address == "dsn" else None


def parse_checkpoints(raw: Any, log: LogConfig, where: str = "checkpoints") -> CheckpointsConfig:
    if not isinstance(raw, Mapping):
        raise ConfigError(where, f"must be a mapping, got {type(raw).__name__}")
    only_keys(raw, CHECKPOINT_KEYS, where, "checkpoints")
    store = raw.get("store", "memory")
    kind = registry.kind(store, f"{where}.store") if isinstance(store, str) else None
    if kind is None or kind.checkpoints is None:
        offered = [k.name for k in registry.KINDS.values() if k.checkpoints is not None]
        raise ConfigError(f"{where}.store", f"must be one of {offered}, got {store!r}")
    if log.type == "kafka" and kind.in_process:
        raise ConfigError(f"{where}.store", "a Kafka log is projected by separate workers: use redis or postgres")
    namespace = names.check_namespace(raw.get("namespace", DEFAULT_NAMESPACE), f"{where}.namespace", ConfigError)
    redis_url = os.environ.get("HELIX_REDIS_URL") or raw.get("redis_url")
    dsn = os.environ.get("HELIX_POSTGRES_DSN") or raw.get("dsn") or raw.get("postgres_dsn")
    if kind.address == "redis_url":
        if not redis_url:
            raise ConfigError(f"{where}.redis_url", f"store: {store} needs redis_url (or HELIX_REDIS_URL)")
        _url(redis_url, f"{where}.redis_url", ("redis", "rediss", "unix"), "HELIX_REDIS_URL")
    if kind.address == "dsn":
        if not dsn:
            raise ConfigError(f"{where}.dsn", f"store: {store} needs dsn (or HELIX_POSTGRES_DSN)")
        _url(dsn, f"{where}.dsn", ("postgresql", "postgres"), "HELIX_POSTGRES_DSN")
    timeout = _seconds(raw.get("read_timeout", 5.0), f"{where}.read_timeout")
    encryption = raw.get("encryption", False)
    if not isinstance(encryption, bool):
        raise ConfigError(f"{where}.encryption", f"must be true or false, got {encryption!r}")
    return CheckpointsConfig(store, namespace, redis_url, dsn, timeout, encryption)


def load_checkpoints(source: Mapping[str, Any] | str | os.PathLike[str]) -> tuple[LogConfig, CheckpointsConfig | None]:
    """The log and the `checkpoints:` mapping of a config (None: it has none)."""
    doc = read_source(source)
    log = parse_log(doc.get("log"), "log")
    raw = doc.get("checkpoints")
    return log, None if raw is None else parse_checkpoints(raw, log)


def checkpoints_only(doc: Mapping[str, Any]) -> bool:
    """A config with a `checkpoints:` mapping and no memory."""
    return "checkpoints" in doc and not any(k in doc for k in MEMORY_KEYS)


def is_checkpoints_config(source: Mapping[str, Any] | str | os.PathLike[str]) -> bool:
    return checkpoints_only(read_source(source))


def audit_config(source: Mapping[str, Any] | str | os.PathLike[str], *, agent: str | None = None) -> Config:
    """The config `helix-es audit` and `forget` read the log with: a checkpoints-only config names its namespace."""
    doc = read_source(source)
    if not checkpoints_only(doc):
        return load_config(doc, agent=agent)
    log, checkpoints = load_checkpoints(doc)
    assert checkpoints is not None
    return Config(memory=parse_memory({"namespace": checkpoints.namespace}, "checkpoints"), log=log)
