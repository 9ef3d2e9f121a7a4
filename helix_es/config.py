"""Configuration: the seed's YAML as written, plus one `log:` key. Errors name the key."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

import yaml

from helix_es.log.kind import EMBEDDED, LogKind, log_kind
from helix_es.log.port import MAX_EVENT_BYTES
from helix_es.model import names
from helix_es.model import options as check
from helix_es.model.errors import ConfigError
from helix_es.model.message import DEFAULT_MAX_CONTENT_BYTES
from helix_es.model.options import only_keys as only_keys
from helix_es.model.times import parse_ttl
from helix_es.providers.summarise import SUMMARISER_KEYS as SUMMARISER_KEYS
from helix_es.providers.summarise import Summariser
from helix_es.providers.summarise import parse_summariser as parse_summariser
from helix_es.stores import registry
from helix_es.views.base import IndexView, View
from helix_es.views.facts import Facts
from helix_es.views.forgetting import Forget, parse_forget
from helix_es.views.long_term import LongTerm, check_table
from helix_es.views.options import COMPACTING, DEFAULT_STORES, VIEW_KEYS, VIEW_TYPES
from helix_es.views.vector import Vector

STORES = tuple(registry.KINDS)
COMMON_KEYS = {
    "type", "store", "namespace", "redis_url", "dsn", "postgres_dsn", "consistency",
    "read_timeout", "session_id", "session_id_header", "ttl", "file_path", "max_content_bytes", "forget",
}  # fmt: skip
COMPOSITE_KEYS = {
    "type",
    "backends",
    "namespace",
    "consistency",
    "read_timeout",
    "session_id",
    "session_id_header",
    "max_content_bytes",
}
# parts inherit them
SHARED_KEYS = ("namespace", "consistency", "read_timeout", "session_id", "session_id_header", "max_content_bytes")


@dataclass(frozen=True)
class LogConfig:
    type: Literal["embedded", "kafka"] = "embedded"
    bootstrap_servers: str = "127.0.0.1:9092"
    topic_prefix: str = names.DEFAULT_TOPIC_PREFIX
    partitions: int = 6
    replication_factor: int = 1
    path: str = ".helix/log"
    fsync: bool = True
    # New topics' min.insync.replicas; None: 2 from replication_factor 3 up, else 1.
    min_insync_replicas: int | None = None

    @property
    def kind(self) -> LogKind:
        """What `type` means: the one place that decides it (`helix_es.log.kind`)."""
        return log_kind(self.type)


LOG_KEYS = {f.name for f in fields(LogConfig)}  # the `log:` keys are its fields


@dataclass(frozen=True)
class MemoryConfig:
    type: str
    view: View | IndexView | Composite
    store: str = "memory"
    namespace: str = "default"
    redis_url: str | None = None
    postgres_dsn: str | None = None
    consistency: Literal["read-your-writes", "eventual"] = "read-your-writes"
    read_timeout: float = 5.0
    session_id: str | None = None
    session_id_header: str | None = None
    summariser: Summariser | None = None  # summary views only
    file_path: str | None = None  # store: file: the JSON export; the log lives beside it
    max_content_bytes: int = DEFAULT_MAX_CONTENT_BYTES  # largest content (and tool arguments) an add may write
    namespaces: tuple[str, ...] = ()  # projectors: all the namespaces (or globs) of agents sharing this view
    forget: Forget | None = None  # the view's forgetting policy (`helix_es.views.forgetting`)
    compact_at_tokens: int | None = None  # conversation and windows: compact once the view holds more tokens

    @property
    def served(self) -> tuple[str, ...]:
        """The namespaces (names or globs) a projector of this view folds: only these, never the rest."""
        return self.namespaces or (self.namespace,)

    @property
    def parts(self) -> tuple[MemoryConfig, ...]:
        """Every view this memory folds: a composite's parts, a long-term view's recall index beside its
        rows; a plain memory is its own one part."""
        if isinstance(self.view, Composite):
            return tuple(p for part in self.view.parts for p in part.parts)
        return (self, self.index) if self.index is not None else (self,)

    @property
    def index(self) -> MemoryConfig | None:
        """A long-term view's recall index (`search: hybrid | vector | keyword`), a vector view in its store."""
        view = self.view
        if isinstance(view, LongTerm) and view.index is not None:
            return replace(self, type="vector", view=view.index, forget=None)  # the owner's policy covers it
        return None


@dataclass(frozen=True)
class Composite:
    """`type: composite`: one event feeds every part; get/search merge them, deduplicated."""

    parts: tuple[MemoryConfig, ...]
    name = "composite"


@dataclass(frozen=True)
class Config:
    memory: MemoryConfig
    log: LogConfig = field(default_factory=LogConfig)
    middleware: tuple[str, ...] = ()


class _UniqueKeyLoader(yaml.SafeLoader):
    """safe_load, but a key given twice in one mapping is an error (YAML's rule; PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` merges; the keys it brings may repeat
                continue
            key = self.construct_object(key_node, deep=True)
            if isinstance(key, (str, int, float, bool)) or key is None:
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def read_source(source: Mapping[str, Any] | str | os.PathLike[str]) -> Mapping[str, Any]:
    if isinstance(source, Mapping):
        return source
    text = str(source)
    if isinstance(source, os.PathLike) or ("\n" not in text and Path(text).is_file()):
        where = text
        text = Path(text).read_text()
    else:
        where = "<yaml>"
    try:
        doc = yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader: no arbitrary objects
    except yaml.YAMLError as exc:
        raise ConfigError(where, f"is not valid YAML: {exc}") from None
    if isinstance(doc, str) and "\n" not in text:
        raise ConfigError("config", f"{text!r} is neither a file nor a YAML mapping")
    return check.mapping(doc, where)


def load_configs(source: Mapping[str, Any] | str | os.PathLike[str]) -> list[Config]:
    """Every agent's memory in a document (one for a plain `memory:` mapping): what projectors serve."""
    doc = read_source(source)
    agents = doc.get("agents")
    if isinstance(agents, list) and agents:
        return [load_config(doc, agent=i) for i in range(len(agents))]
    return [load_config(doc)]


def load_config(source: Mapping[str, Any] | str | os.PathLike[str], *, agent: str | int | None = None) -> Config:
    """Read a dict, YAML text or a path: a whole `agents:` document or one `memory:` mapping.

    `agent` picks an agent by id (or by position); by default the first.
    """
    doc = read_source(source)
    middleware: Any = doc.get("memory_middleware", ())
    where = "memory"
    if "agents" in doc:
        agents = doc["agents"]
        if not isinstance(agents, list) or not agents:
            raise ConfigError("agents", "must be a non-empty list")
        for i, a in enumerate(agents):
            if not isinstance(a, Mapping):
                raise ConfigError(f"agents[{i}]", f"must be a mapping, got {type(a).__name__}")
            if "id" in a and (not isinstance(a["id"], str) or not a["id"]):
                raise ConfigError(f"agents[{i}].id", f"must be a non-empty string, got {a['id']!r}")
        if isinstance(agent, int):
            picked = agents[agent : agent + 1]
        else:
            picked = [a for a in agents if isinstance(a, Mapping) and (agent is None or a.get("id") == agent)]
        if not picked:
            raise ConfigError("agents", f"no agent with id {agent!r}")
        index = agent if isinstance(agent, int) else agents.index(picked[0])
        entry = check.mapping(picked[0], f"agents[{index}]")
        where = f"agents[{index}].memory"
        memory = check.mapping(entry.get("memory", {"type": "conversation"}), where)
        middleware = entry.get("memory_middleware", middleware)
        if "namespace" not in memory and isinstance(entry.get("id"), str):
            memory = {**memory, "namespace": entry["id"]}  # the agent id scopes its memory
    elif "memory" in doc:
        memory = check.mapping(doc["memory"], "memory")
    elif "type" in doc:
        memory, where = doc, "memory"
    else:
        raise ConfigError("memory", "missing: give a `memory:` mapping or an `agents:` list")
    if not isinstance(middleware, (list, tuple)) or not all(isinstance(m, str) for m in middleware):
        raise ConfigError("memory_middleware", "must be a list of middleware names")
    log = parse_log(doc.get("log"), "log")
    parsed = parse_memory(memory, where, log)
    if "encryption" in middleware:
        sealed = [p.view.name for p in parsed.parts if p.type == "summary"]
        if sealed:
            raise ConfigError(
                "memory_middleware",
                f"encryption seals every message, and the summary view {sealed[0]} would summarise ciphertext "
                "(its projector holds no key): use a window view with encryption, or drop encryption",
            )
    _served_by_kafka(parsed, log, where)
    longest = names.longest_topic(parsed.namespace, log.topic_prefix)
    if longest > names.MAX_TOPIC:
        raise ConfigError(
            f"{where}.namespace",
            f"with log.topic_prefix {log.topic_prefix!r} it names a topic of "
            f"{longest} characters, over Kafka's {names.MAX_TOPIC}: shorten the namespace or the prefix",
        )
    files = {p.file_path for p in parsed.parts if registry.kind(p.store).exported}
    if files:
        if doc.get("log") is not None and not log.kind.inline:
            raise ConfigError("log.type", "store: file keeps memory in local files; it needs the embedded log")
        if len(files) > 1:
            found = sorted(str(f) for f in files)
            raise ConfigError(where, f"the parts of one memory must share one file_path, got {found}")
        # The file store is the embedded log, kept in log/ beside its JSON exports.
        (path,) = files
        log = replace(log, type=EMBEDDED.name, path=str(Path(path).parent / "log"))  # type: ignore[arg-type]
    return Config(memory=parsed, log=log, middleware=tuple(middleware))


def _served_by_kafka(memory: MemoryConfig, log: LogConfig, where: str) -> None:
    """A namespace pattern is what projectors of a Kafka log serve; the embedded log has no projectors."""
    if names.is_pattern(memory.namespace) and not log.kind.groups:
        raise ConfigError(
            f"{where}.namespace", "a pattern is for projectors of a Kafka log; clients open one concrete namespace"
        )


# A document's mappings for the framework adapters, each a view of its own type beside the memories.
SECTIONS = {"store": "langgraph-store", "checkpoints": "langgraph-checkpoints"}
SECTION_NAMESPACES = {"checkpoints": "langgraph"}  # a mapping's namespace when it names none (else "default")
MEMORY_KEYS = ("agents", "memory", "type")  # a document names memories with one of these


def load_served(source: Mapping[str, Any] | str | os.PathLike[str]) -> list[Config]:
    """Everything a document asks projectors to fold: every agent's memory (or the `memory:` mapping)
    and each adapter mapping (`store:`, `checkpoints:`) it has."""
    doc = read_source(source)
    configs = load_configs(doc) if set(MEMORY_KEYS) & set(doc) else []
    configs += [load_section(doc, section, pattern=True) for section in SECTIONS if section in doc]
    if not configs:
        raise ConfigError("memory", f"missing: give a `memory:` mapping, an `agents:` list or {_sections()}")
    return configs


def _sections() -> str:
    return " or ".join(f"a `{s}:` mapping" for s in SECTIONS)


def sections_only(doc: Mapping[str, Any]) -> bool:
    """A document with adapter mappings only (`checkpoints:`, `store:`) and no memory."""
    return any(s in doc for s in SECTIONS) and not any(k in doc for k in MEMORY_KEYS)


def load_section(source: Mapping[str, Any] | str | os.PathLike[str], section: str, *, pattern: bool = False) -> Config:
    """A document's mapping for a framework adapter (`store:`, `checkpoints:`) as a memory of its view
    type (`SECTIONS`), with the document's `log:`. Its keys are a memory's (store, redis_url or dsn,
    namespace, consistency, read_timeout) and its view's (`index`, `encryption`). Its namespace is
    one concrete namespace (what a saver or store opens), or with `pattern` also a glob (`"*"`,
    `tenant-*`) for projectors of a Kafka log, as a memory's may be."""
    doc = read_source(source)
    view_type = SECTIONS[section]
    if section not in doc:
        raise ConfigError(section, f"missing: give a `{section}:` mapping (store, dsn or redis_url, namespace)")
    raw = check.mapping(doc[section], section)
    if "type" in raw:
        raise ConfigError(f"{section}.type", f"a `{section}:` mapping has no type (it is always {view_type})")
    log = parse_log(doc.get("log"), "log")
    defaults = {"namespace": SECTION_NAMESPACES.get(section, "default")}
    parsed = parse_memory({**defaults, **raw, "type": view_type}, section, log)
    if pattern:
        _served_by_kafka(parsed, log, section)
    else:
        names.concrete_namespace(parsed.namespace, f"{section}.namespace", ConfigError)
    return Config(memory=parsed, log=log)


def audit_config(source: Mapping[str, Any] | str | os.PathLike[str], *, agent: str | None = None) -> Config:
    """The config `helix-es audit` and `forget` read the log with: a document of adapter mappings only
    names the namespace of its first one (`checkpoints:` before `store:` when it has both)."""
    doc = read_source(source)
    if not sections_only(doc):
        return load_config(doc, agent=agent)
    first = next(s for s in ("checkpoints", *SECTIONS) if s in doc)
    section = load_section(doc, first, pattern=True)
    return replace(section, memory=parse_memory({"namespace": section.memory.namespace}, first))


def parse_log(raw: Any, where: str) -> LogConfig:
    if raw is None:
        return LogConfig()
    raw = check.mapping(raw, where)
    only_keys(raw, LOG_KEYS, where, "log")
    kind = raw.get("type", LogConfig.type)
    log_kind(kind, f"{where}.type")
    default = LogConfig()
    bootstrap = os.environ.get("HELIX_KAFKA_BOOTSTRAP") or raw.get("bootstrap_servers") or default.bootstrap_servers
    prefix = raw.get("topic_prefix", default.topic_prefix)
    if not isinstance(prefix, str) or not names.NAMESPACE_RE.fullmatch(prefix):
        raise ConfigError(f"{where}.topic_prefix", f"must match [A-Za-z0-9._-]+, got {prefix!r}")
    partitions = check.whole_number(raw, "partitions", where, default.partitions)
    replication = check.whole_number(raw, "replication_factor", where, default.replication_factor)
    if partitions < 1 or replication < 1:
        raise ConfigError(f"{where}.partitions", "partitions and replication_factor must be >= 1")
    insync = None
    if raw.get("min_insync_replicas") is not None:
        insync = check.whole_number(raw, "min_insync_replicas", where, 1)
        if not 1 <= insync <= replication:
            raise ConfigError(
                f"{where}.min_insync_replicas", f"must be 1 to replication_factor ({replication}), got {insync}"
            )
    fsync = raw.get("fsync", True)
    if not isinstance(fsync, bool):
        raise ConfigError(f"{where}.fsync", f"must be true or false, got {fsync!r}")
    check.text(bootstrap, f"{where}.bootstrap_servers")
    path = check.text(raw.get("path", default.path), f"{where}.path")
    return LogConfig(kind, bootstrap, prefix, partitions, replication, path, fsync, insync)


def parse_composite(raw: Mapping[str, Any], where: str, log: LogConfig | None) -> MemoryConfig:
    only_keys(raw, COMPOSITE_KEYS, where, "a composite memory")
    backends = raw.get("backends")
    if not isinstance(backends, list) or not backends:
        raise ConfigError(f"{where}.backends", "must be a non-empty list of memory mappings")
    shared = {k: raw[k] for k in SHARED_KEYS if k in raw}
    parts = []
    for i, part in enumerate(backends):
        here = f"{where}.backends[{i}]"
        part = check.mapping(part, here)
        if part.get("type") == "composite":
            raise ConfigError(f"{here}.type", "a composite cannot contain a composite")
        clash = sorted(set(part) & set(SHARED_KEYS))
        if clash:
            raise ConfigError(f"{here}.{clash[0]}", "set it on the composite: its parts share one log and session")
        parts.append(parse_memory({**part, **shared}, here, log))
    base = parse_memory({"type": "conversation", **shared}, where)
    return replace(base, type="composite", view=Composite(tuple(parts)), store="composite")


def _long_term_in(view: LongTerm, raw: Mapping[str, Any], store: Any, where: str) -> LongTerm:
    """The long-term view as its store kind has it: a `table:` only if the kind has tables, its address alone."""
    found = registry.KINDS.get(store) if isinstance(store, str) else None
    if "table" in raw and (found is None or not found.tables):
        stores = " or ".join(registry.offering("tables"))
        raise ConfigError(f"{where}.table", f"only a {stores} long-term memory has a table, not store: {store}")
    if view.index is not None and (found is None or found.vectors is None):
        stores = " or ".join(registry.offering("vectors"))
        raise ConfigError(
            f"{where}.search",
            f"search: {view.index.search} keeps a recall index, which lives in {stores}; store: {store} has "
            "no search index (a Redis without search modules): use one of those stores, or search: substring",
        )
    address = found.address if found is not None else None
    return replace(
        view,
        table=check_table(raw["table"], f"{where}.table") if "table" in raw else view.table,
        dsn=view.dsn if address == "dsn" else None,
        redis_url=view.redis_url if address == "redis_url" else None,
    )


def parse_memory(raw: Mapping[str, Any], where: str, log: LogConfig | None = None) -> MemoryConfig:
    kind = raw.get("type", "conversation")
    if kind == "composite":
        return parse_composite(raw, where, log)
    if not isinstance(kind, str) or kind not in VIEW_TYPES:
        raise ConfigError(f"{where}.type", f"unknown memory type {kind!r}; known: {sorted(VIEW_TYPES)}")
    only_keys(raw, COMMON_KEYS | VIEW_KEYS[kind], where, f"a {kind} memory")
    view = VIEW_TYPES[kind](raw, where)
    store = raw.get("store", DEFAULT_STORES.get(kind, "memory"))
    if isinstance(view, LongTerm):
        view = _long_term_in(view, raw, store, where)
    adapter = view.adapter if isinstance(view, IndexView) else None
    if adapter is not None and (store not in registry.KINDS or getattr(registry.KINDS[store], adapter) is None):
        stores = " or ".join(registry.offering(adapter))
        raise ConfigError(f"{where}.store", f"a {kind} memory lives in {stores}, got {store!r}")
    ttl = parse_ttl(raw.get("ttl"), f"{where}.ttl")
    if ttl is not None and hasattr(view, "ttl"):  # views that carry it to their store (Redis expires keys)
        view = replace(view, ttl=ttl)  # type: ignore[type-var]
    store_kind = registry.kind(store, f"{where}.store")
    if log is not None and log.kind.projected_apart and store_kind.in_process:
        raise ConfigError(
            f"{where}.store",
            f"{store} views live in one process, but a Kafka log is projected by separate workers; "
            "use store: redis or postgres with log: kafka",
        )
    file_path = raw.get("file_path")
    if store_kind.exported:
        file_path = file_path or ".helix/memory/agent.json"
        if not isinstance(file_path, str) or not file_path.endswith(".json"):
            raise ConfigError(f"{where}.file_path", f"must be a path ending in .json, got {file_path!r}")
    elif file_path is not None:
        raise ConfigError(
            f"{where}.file_path", f"only store: {' or '.join(registry.offering('exported'))} uses file_path"
        )
    # A glob (`tenant-*`) lets one projector config serve many namespaces; clients refuse it (open_memory).
    namespace = names.check_namespace_pattern(raw.get("namespace", "default"), f"{where}.namespace", ConfigError)
    consistency = raw.get("consistency", "read-your-writes")
    if consistency not in ("read-your-writes", "eventual"):
        raise ConfigError(f"{where}.consistency", f"must be read-your-writes or eventual, got {consistency!r}")
    timeout = check.seconds(raw.get("read_timeout", 5.0), f"{where}.read_timeout")
    session_id = raw.get("session_id")
    if session_id is not None:
        names.check_session_id(session_id, f"{where}.session_id", ConfigError)
    header = raw.get("session_id_header")
    if header is not None:
        check.text(header, f"{where}.session_id_header")
    max_content = check.whole_number(raw, "max_content_bytes", where, DEFAULT_MAX_CONTENT_BYTES)
    if not 1 <= max_content <= MAX_EVENT_BYTES:
        raise ConfigError(
            f"{where}.max_content_bytes",
            f"must be from 1 to {MAX_EVENT_BYTES} (the log's event limit), got {max_content}",
        )
    # The environment names this deployment's services: it wins over addresses in a shared file.
    redis_url = os.environ.get("HELIX_REDIS_URL") or raw.get("redis_url")
    dsn = os.environ.get("HELIX_POSTGRES_DSN") or raw.get("dsn") or raw.get("postgres_dsn")
    if store_kind.address == "redis_url" and not redis_url:
        raise ConfigError(f"{where}.redis_url", f"store: {store} needs redis_url (or HELIX_REDIS_URL)")
    if store_kind.address == "dsn" and not dsn:
        raise ConfigError(f"{where}.dsn", f"store: {store} needs dsn (or HELIX_POSTGRES_DSN)")
    if redis_url is not None:
        check.url(redis_url, f"{where}.redis_url", ("redis", "rediss", "unix"), "HELIX_REDIS_URL")
    if dsn is not None:
        check.url(dsn, f"{where}.dsn", ("postgresql", "postgres"), "HELIX_POSTGRES_DSN")
    return MemoryConfig(
        type=kind,
        view=view,
        store=store,
        namespace=namespace,
        redis_url=redis_url,
        postgres_dsn=dsn,
        consistency=consistency,
        read_timeout=timeout,
        session_id=session_id,
        session_id_header=raw.get("session_id_header"),
        summariser=parse_summariser(raw.get("summariser"), f"{where}.summariser")
        if kind == "summary" or kind in COMPACTING
        else None,
        compact_at_tokens=_compact_at(raw, where),
        file_path=file_path,
        max_content_bytes=max_content,
        forget=_forget_of(view, raw.get("forget"), f"{where}.forget"),
    )


def _compact_at(raw: Mapping[str, Any], where: str) -> int | None:
    if raw.get("compact_at_tokens") is None:
        return None
    tokens = check.whole_number(raw, "compact_at_tokens", where, 0)
    if tokens < 1:
        raise ConfigError(f"{where}.compact_at_tokens", f"must be a whole number >= 1, got {tokens}")
    return tokens


def _forget_of(view: View | IndexView, raw: object, where: str) -> Forget | None:
    """The view's `forget:` policy; the LangGraph adapters' views refuse it (their TTLs sweep them)."""
    policy = parse_forget(raw, where)
    if policy is not None and not isinstance(view, View | LongTerm | Vector | Facts):
        raise ConfigError(
            where,
            f"a {view.kind} view has no forgetting policy: forget: applies to session, long-term, vector and facts"
            " views (a LangGraph store's items expire by their TTL: HelixStore.sweep_ttl)",
        )
    return policy
