"""Bad input, case by case, against the real Kafka log and the embedded one.

Each case must raise a typed error (an `InvalidInput`: `InvalidMessage`, `ConfigError`, `EventTooLarge`,
all `ValueError`s) whose `field` names the culprit and whose text names the problem, and must write
nothing: every case reads the log's end (Kafka: the end offset of every partition of every topic under
this module's own topic prefix, dead-letter topics included; embedded: the size of every file in the log
directory) before and after. Before each bad input a good message is written, so the log is live around
it; the last test reads the log back and finds those good messages and nothing else.

Unit checks of single fields stay in test_message.py and test_config.py; this is the end-to-end matrix.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient

import helix_es.config as configuration
from helix_es import ConfigError, EventTooLarge, InvalidMessage, Memory, Message, ToolCall, open_memory
from helix_es.log.kafka import KafkaLog
from helix_es.model.errors import HelixError, InvalidInput
from helix_es.model.events import MessageAdded
from tests.conftest import unique


class Harness:
    """One log (Kafka under a topic prefix of its own, or an embedded directory) and a memory kept open on it."""

    def __init__(self, kind: str, log: dict[str, Any], store: dict[str, Any], path: Path | None) -> None:
        self.kind, self.log, self.store, self.path = kind, log, store, path
        self.namespace = unique("bad")
        self.prefix = log["topic_prefix"]
        self.mem: Any = None
        self.good: list[str] = []  # contents of the good messages written, in order
        self.kafka: KafkaLog | None = None
        self.admin: Any = None
        self.consumer: Any = None

    def config(
        self, memory: dict[str, Any] | None = None, log: dict[str, Any] | None = None, **doc: Any
    ) -> dict[str, Any]:
        base = {"type": "conversation", "namespace": self.namespace, "read_timeout": 30, **self.store}
        return {"log": {**self.log, **(log or {})}, "memory": {**base, **(memory or {})}, **doc}

    def yaml(self, memory_yaml: str) -> str:
        """A YAML document with this harness's log and the given (bad) memory section."""
        return f"log: {json.dumps(self.log)}\n{memory_yaml}"

    async def snapshot(self) -> dict[str, int]:
        """Where the log ends: any write anywhere under this prefix (or directory) changes it."""
        if self.path is not None:
            return {
                str(p.relative_to(self.path)): p.stat().st_size
                for p in sorted(self.path.rglob("*"))
                if p.is_file() and not p.name.endswith(".lock")
            }
        from aiokafka import AIOKafkaConsumer, TopicPartition

        assert self.kafka is not None and self.admin is not None
        topics = sorted(t for t in await self.admin.list_topics() if t.startswith(self.prefix))
        tps = [TopicPartition(t, p) for t in topics for p in await self.kafka.partitions_of(t)]
        if self.consumer is None:
            self.consumer = AIOKafkaConsumer(bootstrap_servers=self.log["bootstrap_servers"], enable_auto_commit=False)
            await self.consumer.start()
        ends = await self.consumer.end_offsets(tps) if tps else {}
        return {f"{tp.topic}[{tp.partition}]": end for tp, end in ends.items()}


@pytest.fixture(scope="module", params=["kafka", "embedded"])
async def harness(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Harness]:
    prefix = unique("bad")
    if request.param == "kafka":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        log = {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 2, "topic_prefix": prefix}
        h = Harness("kafka", log, {"store": "redis", "redis_url": request.getfixturevalue("redis_url")}, None)
        h.kafka = KafkaLog(bootstrap, topic_prefix=prefix)
        h.admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await h.admin.start()
    else:
        path = tmp_path_factory.mktemp("bad-input") / "log"
        h = Harness(
            "embedded",
            {"type": "embedded", "path": str(path), "fsync": False, "topic_prefix": prefix},
            {"store": "memory"},
            path,
        )
    async with open_memory(h.config(), session_id="keeper") as mem:
        h.mem = mem
        empty = await h.snapshot()
        await h.mem.add(Message("system", "the log is open"))
        h.good.append("the log is open")
        assert await h.snapshot() != empty, "the snapshot must see a write"
        yield h
    if h.kafka is not None:
        await h.kafka.close()
        await h.admin.close()
        if h.consumer is not None:
            await h.consumer.stop()


Action = Callable[[Harness], Awaitable[object]]


@dataclass(frozen=True)
class Bad:
    id: str
    run: Action
    error: type[InvalidInput]
    field: str
    words: str  # the problem, as the message says it


def message(**kwargs: Any) -> Action:
    """Build the message and add it, as an agent would, on the memory kept open."""

    async def run(h: Harness) -> object:
        return await h.mem.add(Message(**kwargs))

    return run


def adding(value: Callable[[], object], memory: dict[str, Any] | None = None) -> Action:
    """Add `value()` through a memory opened with `memory` overrides (a size limit, say)."""

    async def run(h: Harness) -> object:
        async with open_memory(h.config(memory), session_id=unique("s")) as mem:
            return await mem.add(value())  # type: ignore[arg-type]

    return run


def opening(
    memory: dict[str, Any] | None = None, log: dict[str, Any] | None = None, session_id: object = "s-opened", **doc: Any
) -> Action:
    """Open a memory with a bad config or session id; were it accepted, a good add would write."""

    async def run(h: Harness) -> object:
        async with open_memory(h.config(memory, log, **doc), session_id=session_id) as mem:  # type: ignore[arg-type]
            return await mem.add(Message("user", "must never be written"))

    return run


def without_env(var: str, action: Action) -> Action:
    """The environment names this deployment's services and wins over the file: take it away."""

    async def run(h: Harness) -> object:
        saved = os.environ.pop(var, None)
        try:
            return await action(h)
        finally:
            if saved is not None:
                os.environ[var] = saved

    return run


def yaml_doc(memory_yaml: str) -> Action:
    async def run(h: Harness) -> object:
        async with open_memory(h.yaml(memory_yaml), session_id="s-yaml") as mem:
            return await mem.add(Message("user", "must never be written"))

    return run


def searching(query: object, limit: object = 5) -> Action:
    async def run(h: Harness) -> object:
        return await h.mem.search(query, limit)

    return run


def keyed(op: str, key: object) -> Action:
    """`add` (a good message) or `clear` with a bad idempotency key, on the memory kept open."""

    async def run(h: Harness) -> object:
        if op == "clear":
            return await h.mem.clear(idempotency_key=key)
        return await h.mem.add(Message("user", "must never be written"), idempotency_key=key)

    return run


def long_term(table: object) -> Action:
    return opening(
        {"type": "long-term", "store": "postgres", "dsn": "postgresql://helix@127.0.0.1:1/none", "table": table}
    )


SURROGATE = "half an emoji \ud83d"
CALL = {"id": "c1", "name": "weather", "arguments": '{"city": "Oslo"}'}
LIMIT = {"max_content_bytes": 1024}

CASES = [
    # roles
    Bad("role-unknown", message(role="robot", content="hi"), InvalidMessage, "role", "must be one of"),
    Bad("role-empty", message(role="", content="hi"), InvalidMessage, "role", "got ''"),
    Bad("role-none", message(role=None, content="hi"), InvalidMessage, "role", "got None"),
    Bad("role-wrong-case", message(role="User", content="hi"), InvalidMessage, "role", "got 'User'"),
    # text fields
    Bad("content-not-a-string", message(role="user", content=42), InvalidMessage, "content", "must be a string"),
    Bad("content-none", message(role="user", content=None), InvalidMessage, "content", "got NoneType"),
    Bad("content-lone-surrogate", message(role="user", content=SURROGATE), InvalidMessage, "content", "UTF-8"),
    Bad("content-nul", message(role="user", content="a\x00b"), InvalidMessage, "content", "NUL"),
    Bad("name-empty", message(role="user", content="hi", name=""), InvalidMessage, "name", "must not be empty"),
    Bad("name-lone-surrogate", message(role="user", content="hi", name="\udc80"), InvalidMessage, "name", "UTF-8"),
    # occurred_at
    Bad(
        "occurred-at-naive",
        message(role="user", content="hi", occurred_at=datetime(2024, 5, 1, 12)),
        InvalidMessage,
        "occurred_at",
        "timezone-aware",
    ),
    Bad(
        "occurred-at-text",
        message(role="user", content="hi", occurred_at="2024-05-01T12:00:00Z"),
        InvalidMessage,
        "occurred_at",
        "got str",
    ),
    Bad(
        "occurred-at-year-0",
        message(role="user", content="hi", occurred_at=datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=1)))),
        InvalidMessage,
        "occurred_at",
        "outside years 1-9999",
    ),
    # metadata
    Bad(
        "metadata-int-value",
        message(role="user", content="hi", metadata={"k": 1}),
        InvalidMessage,
        "metadata['k']",
        "must be a string, got int",
    ),
    Bad(
        "metadata-int-key",
        message(role="user", content="hi", metadata={1: "v"}),
        InvalidMessage,
        "metadata key",
        "must be a string, got int",
    ),
    Bad(
        "metadata-nested",
        message(role="user", content="hi", metadata={"k": {"deep": "v"}}),
        InvalidMessage,
        "metadata['k']",
        "got dict",
    ),
    Bad(
        "metadata-list",
        message(role="user", content="hi", metadata=["k"]),
        InvalidMessage,
        "metadata",
        "mapping of str to str",
    ),
    Bad(
        "metadata-surrogate",
        message(role="user", content="hi", metadata={"k": SURROGATE}),
        InvalidMessage,
        "metadata['k']",
        "UTF-8",
    ),
    # tool calls
    Bad(
        "tool-calls-on-user",
        message(role="user", content="hi", tool_calls=[CALL]),
        InvalidMessage,
        "tool_calls",
        "only assistant messages",
    ),
    Bad(
        "tool-calls-a-string",
        message(role="assistant", tool_calls="weather(Oslo)"),
        InvalidMessage,
        "tool_calls",
        "must be a list",
    ),
    Bad(
        "tool-call-not-a-call",
        message(role="assistant", tool_calls=[3]),
        InvalidMessage,
        "tool_calls[0]",
        "ToolCall or a mapping",
    ),
    Bad(
        "tool-call-no-id",
        message(role="assistant", tool_calls=[{"name": "weather"}]),
        InvalidMessage,
        "tool_calls[0].id",
        "got NoneType",
    ),
    Bad(
        "tool-call-unknown-key",
        message(role="assistant", tool_calls=[{**CALL, "type": "function"}]),
        InvalidMessage,
        "tool_calls[0]",
        "unknown keys ['type']",
    ),
    Bad(
        "tool-args-not-json",
        message(role="assistant", tool_calls=[{**CALL, "arguments": "{city: Oslo"}]),
        InvalidMessage,
        "tool_calls[0].arguments",
        "is not JSON text",
    ),
    Bad(
        "tool-args-nan",
        message(role="assistant", tool_calls=[{**CALL, "arguments": '{"t": NaN}'}]),
        InvalidMessage,
        "tool_calls[0].arguments",
        "NaN is not a JSON value",
    ),
    Bad(
        "tool-args-a-dict",
        message(role="assistant", tool_calls=[{**CALL, "arguments": {"city": "Oslo"}}]),
        InvalidMessage,
        "tool_calls[0].arguments",
        "must be a string, got dict",
    ),
    Bad(
        "tool-call-ids-repeat",
        message(role="assistant", tool_calls=[CALL, {**CALL, "name": "other"}]),
        InvalidMessage,
        "tool_calls[1].id",
        "repeats 'c1'",
    ),
    Bad(
        "tool-result-without-call-id",
        message(role="tool", content="-3"),
        InvalidMessage,
        "tool_call_id",
        "must name the tool call",
    ),
    Bad(
        "call-id-on-user",
        message(role="user", content="hi", tool_call_id="c1"),
        InvalidMessage,
        "tool_call_id",
        "only tool messages",
    ),
    Bad(
        "add-a-dict",
        adding(lambda: {"role": "user", "content": "hi"}),
        InvalidMessage,
        "message",
        "must be a helix_es.Message, got dict",
    ),
    Bad("add-none", adding(lambda: None), InvalidMessage, "message", "got NoneType"),
    # idempotency keys
    Bad("add-key-an-int", keyed("add", 7), InvalidInput, "idempotency_key", "must be a string or None, got int"),
    Bad("add-key-empty", keyed("add", ""), InvalidInput, "idempotency_key", "1-255 printable characters"),
    Bad("add-key-too-long", keyed("add", "k" * 256), InvalidInput, "idempotency_key", "1-255 printable"),
    Bad("add-key-newline", keyed("add", "a\nb"), InvalidInput, "idempotency_key", "printable characters"),
    Bad("clear-key-bytes", keyed("clear", b"k"), InvalidInput, "idempotency_key", "got bytes"),
    Bad("clear-key-nul", keyed("clear", "k\x00"), InvalidInput, "idempotency_key", "printable characters"),
    # sizes of what is written
    Bad(
        "content-over-configured-max",
        adding(lambda: Message("user", "x" * 1025), LIMIT),
        InvalidMessage,
        "content",
        "1025 bytes of UTF-8, over the limit of 1024 (memory.max_content_bytes)",
    ),
    Bad(
        "content-over-max-in-bytes-not-chars",
        adding(lambda: Message("user", "😀" * 300), LIMIT),
        InvalidMessage,
        "content",
        "1200 bytes",
    ),
    Bad(
        "tool-args-over-configured-max",
        adding(lambda: Message("assistant", "", tool_calls=[ToolCall("c1", "f", json.dumps("y" * 2000))]), LIMIT),
        InvalidMessage,
        "tool_calls[0].arguments",
        "over the limit of 1024",
    ),
    Bad(
        "content-over-default-max",
        adding(lambda: Message("user", "z" * 600_000)),
        InvalidMessage,
        "content",
        "over the limit of 524288",
    ),
    Bad(
        "event-over-log-limit",
        adding(lambda: Message("user", "x" * 850_000, metadata={"m": "y" * 60_000}), {"max_content_bytes": 900_000}),
        EventTooLarge,
        "event",
        "over the 900000 limit",
    ),
    # session ids
    Bad("session-id-empty", opening(session_id=""), InvalidInput, "session_id", "give session_id="),
    Bad("session-id-oversized", opening(session_id="s" * 513), InvalidInput, "session_id", "longer than 512"),
    Bad("session-id-braces", opening(session_id="a{b}c"), InvalidInput, "session_id", "without braces"),
    Bad("session-id-newline", opening(session_id="alice\nbob"), InvalidInput, "session_id", "printable"),
    Bad("session-id-blank", opening(session_id="   "), InvalidInput, "session_id", "must not be blank"),
    Bad("session-id-not-text", opening(session_id=42), InvalidInput, "session_id", "non-empty string"),
    Bad(
        "session-id-in-config",
        opening({"session_id": "x}y"}, session_id=None),
        ConfigError,
        "memory.session_id",
        "braces",
    ),
    # namespaces
    Bad("namespace-space", opening({"namespace": "has space"}), ConfigError, "memory.namespace", "A-Za-z0-9._-"),
    Bad("namespace-empty", opening({"namespace": ""}), ConfigError, "memory.namespace", "got ''"),
    Bad("namespace-oversized", opening({"namespace": "n" * 201}), ConfigError, "memory.namespace", "{1,200}"),
    Bad("namespace-path", opening({"namespace": "../../etc/passwd"}), ConfigError, "memory.namespace", "got '../"),
    Bad(
        "namespace-injection",
        opening({"namespace": "ns'; DROP TABLE agent_memory;--"}),
        ConfigError,
        "memory.namespace",
        "A-Za-z0-9._-",
    ),
    Bad("namespace-not-text", opening({"namespace": 7}), ConfigError, "memory.namespace", "got 7"),
    # A glob is for projectors (one view over many namespaces); a client opens one namespace.
    Bad(
        "namespace-glob", opening({"namespace": "tenant-*"}), ConfigError, "memory.namespace", "one concrete namespace"
    ),
    Bad("namespace-star", opening({"namespace": "*"}), ConfigError, "memory.namespace", "one concrete namespace"),
    Bad("namespace-glob-range", opening({"namespace": "t[z-a]"}), ConfigError, "memory.namespace", "not a usable glob"),
    Bad("namespace-glob-chars", opening({"namespace": "t*/x"}), ConfigError, "memory.namespace", "glob (*, ?, [...])"),
    Bad(
        "topic-name-too-long",
        opening({"namespace": "n" * 200}, {"topic_prefix": "p" * 60}),
        ConfigError,
        "memory.namespace",
        "over Kafka's 249",
    ),
    # search
    Bad("search-limit-zero", searching("oslo", 0), InvalidInput, "limit", ">= 1, got 0"),
    Bad("search-limit-negative", searching("oslo", -3), InvalidInput, "limit", "got -3"),
    Bad("search-query-not-text", searching(b"oslo"), InvalidInput, "query", "must be a string, got bytes"),
    Bad("search-query-surrogate", searching(SURROGATE), InvalidInput, "query", "UTF-8"),
    # YAML and unknown types
    Bad("yaml-unclosed", yaml_doc("memory: [unclosed\n"), ConfigError, "<yaml>", "not valid YAML"),
    Bad("yaml-tab-indent", yaml_doc("memory:\n\ttype: conversation\n"), ConfigError, "<yaml>", "not valid YAML"),
    Bad(
        "yaml-duplicate-key",
        yaml_doc("memory:\n  type: sliding-window\n  window_size: 5\n  window_size: 0\n"),
        ConfigError,
        "<yaml>",
        "found duplicate key 'window_size'",
    ),
    Bad(
        "yaml-python-object",
        yaml_doc("memory: !!python/object/apply:os.system [echo pwned]\n"),
        ConfigError,
        "<yaml>",
        "could not determine a constructor",
    ),
    Bad("yaml-mapping-then-list", yaml_doc("- memory\n- type\n"), ConfigError, "<yaml>", "not valid YAML"),
    Bad("type-unknown", opening({"type": "sliding-windw"}), ConfigError, "memory.type", "unknown memory type"),
    Bad("type-a-list", opening({"type": ["conversation"]}), ConfigError, "memory.type", "unknown memory type"),
    Bad("store-unknown", opening({"store": "mongo"}), ConfigError, "memory.store", "must be one of"),
    Bad("log-type-unknown", opening(log={"type": "pulsar"}), ConfigError, "log.type", "kafka or embedded"),
    Bad("key-unknown", opening({"windw_size": 3}), ConfigError, "memory.windw_size", "unknown key"),
    Bad(
        "middleware-unknown",
        opening(memory_middleware=["encrypt"]),
        ConfigError,
        "memory_middleware[0]",
        "unknown middleware 'encrypt'",
    ),
    Bad("agents-not-a-list", yaml_doc("agents: chat\n"), ConfigError, "agents", "must be a non-empty list"),
    Bad(
        "agents-window-zero",
        yaml_doc("agents:\n  - id: chat\n    memory: {type: sliding-window, window_size: 0}\n"),
        ConfigError,
        "agents[0].memory.window_size",
        ">= 1, got 0",
    ),
    Bad(
        "composite-part-window-zero",
        yaml_doc(
            "memory:\n  type: composite\n  backends:\n    - {type: sliding-window, window_size: 0}\n"
            "    - {type: conversation}\n"
        ),
        ConfigError,
        "memory.backends[0].window_size",
        ">= 1, got 0",
    ),
    Bad(
        "redis-url-not-a-url",
        without_env("HELIX_REDIS_URL", opening({"store": "redis", "redis_url": "localhost:6379"})),
        ConfigError,
        "memory.redis_url",
        "must be a URL redis://",
    ),
    # negative or zero sizes
    Bad(
        "window-zero",
        opening({"type": "sliding-window", "window_size": 0}),
        ConfigError,
        "memory.window_size",
        ">= 1, got 0",
    ),
    Bad(
        "window-negative",
        opening({"type": "sliding-window", "window_size": -5}),
        ConfigError,
        "memory.window_size",
        "got -5",
    ),
    Bad(
        "window-fraction",
        opening({"type": "sliding-window", "window_size": 2.5}),
        ConfigError,
        "memory.window_size",
        "whole number",
    ),
    Bad(
        "max-tokens-zero",
        opening({"type": "token-window", "max_tokens": 0}),
        ConfigError,
        "memory.max_tokens",
        ">= 1, got 0",
    ),
    Bad("max-length-zero", opening({"max_length": 0}), ConfigError, "memory.max_length", ">= 1, got 0"),
    Bad(
        "tool-pairs-unknown",
        opening({"type": "sliding-window", "tool_pairs": "together"}),
        ConfigError,
        "memory.tool_pairs",
        "whole, split, got 'together'",
    ),
    Bad(
        "tool-pairs-not-text",
        opening({"type": "summary", "tool_pairs": True}),
        ConfigError,
        "memory.tool_pairs",
        "whole, split, got True",
    ),
    Bad("partitions-zero", opening(log={"partitions": 0}), ConfigError, "log.partitions", ">= 1"),
    Bad(
        "read-timeout-nan",
        opening({"read_timeout": float("nan")}),
        ConfigError,
        "memory.read_timeout",
        "positive (finite)",
    ),
    Bad("max-content-zero", opening({"max_content_bytes": 0}), ConfigError, "memory.max_content_bytes", "got 0"),
    Bad(
        "max-content-over-event-limit",
        opening({"max_content_bytes": 2_000_000}),
        ConfigError,
        "memory.max_content_bytes",
        "event limit",
    ),
    Bad("ttl-zero", opening({"ttl": "0s"}), ConfigError, "memory.ttl", "at least 1ms"),
    Bad("top-k-zero", opening({"type": "vector", "top_k": 0}), ConfigError, "memory.top_k", ">= 1, got 0"),
    Bad(
        "summary-max-chars-zero",
        opening({"type": "summary", "summariser": {"max_chars": 0}}),
        ConfigError,
        "memory.summariser.max_chars",
        ">= 2, got 0",
    ),
    # SQL keywords and injection attempts as table names
    Bad("table-keyword", long_term("select"), ConfigError, "memory.table", "'select' is an SQL keyword"),
    Bad("table-keyword-upper", long_term("DROP"), ConfigError, "memory.table", "'DROP' is an SQL keyword"),
    Bad(
        "table-statement",
        long_term("agent_memory; DROP TABLE agent_memory;--"),
        ConfigError,
        "memory.table",
        "only letters, digits and underscores",
    ),
    Bad("table-quote", long_term("x' OR '1'='1"), ConfigError, "memory.table", "only letters"),
    Bad("table-double-quote", long_term('agent_memory" CASCADE; --'), ConfigError, "memory.table", "only letters"),
    Bad("table-too-long", long_term("t" * 64), ConfigError, "memory.table", "at most 63"),
    Bad("table-not-text", long_term(1), ConfigError, "memory.table", "got 1"),
]


def family(field: str) -> str:
    """The key or argument a case's field names, without its path: `tool_calls[0].id` -> `tool_calls`."""
    return re.split(r"[.\[ ]", field, maxsplit=1)[0]


def test_the_matrix_covers_every_input_it_claims() -> None:
    """Derived from the code where it can be: a new Message field, a new Memory method taking input,
    or a new size key without a case here fails this test."""
    assert len(CASES) >= 30 and len({c.id for c in CASES}) == len(CASES)
    fields = {c.field for c in CASES}
    builders = Counter(c.run.__qualname__.split(".")[0] for c in CASES)  # message, adding, opening, ...
    # Every field of a Message (as its constructor takes them) has a bad value, added as an agent adds.
    message_fields = {f.name for f in dataclasses.fields(Message) if f.init}
    assert message_fields == {"role", "content", "name", "tool_calls", "tool_call_id", "metadata", "occurred_at"}
    assert message_fields <= {family(c.field) for c in CASES if c.error is InvalidMessage}
    # Every public entry point that takes input: the Memory methods with arguments (add, search, clear's
    # key) and open_memory (its session_id, the config as a mapping and as YAML text).
    takes_input = {
        name
        for name, fn in inspect.getmembers(Memory, inspect.isfunction)
        if not name.startswith("_") and len(inspect.signature(fn).parameters) > 1
    }
    assert takes_input == {"add", "search", "clear"}, "a new Memory method taking input needs cases here"
    keyed_ops = {c.id.split("-")[0] for c in CASES if c.field == "idempotency_key"}
    assert keyed_ops == {"add", "clear"}  # both writes take a key
    assert builders["message"] >= 20 and builders["adding"] >= 5  # add: each Message rule, the argument, sizes
    assert {family(c.field) for c in CASES if c.run.__qualname__.startswith("searching")} == {"query", "limit"}
    assert builders["opening"] >= 20 and builders["yaml_doc"] >= 5
    assert {"session_id", "message", "event"} <= fields
    # Every section of a config document, and every part a memory config nests.
    sections = {family(c.field) for c in CASES if c.error is ConfigError}
    assert {"log", "memory", "agents", "memory_middleware", "<yaml>"} <= sections
    assert {
        "memory.type",
        "memory.store",
        "memory.namespace",
        "memory.table",
        "memory.redis_url",
        "memory.session_id",
    } <= fields
    assert any(f.startswith("agents[0].memory.") for f in fields)
    assert any(f.startswith("memory.backends[") for f in fields)
    # Every size or duration a config takes has a zero, negative or otherwise impossible value, and
    # each names a key the config really knows (a misspelt key would only test "unknown key").
    sizes = {
        "memory.window_size",
        "memory.max_tokens",
        "memory.max_length",
        "memory.max_content_bytes",
        "memory.read_timeout",
        "memory.ttl",
        "memory.top_k",
        "memory.summariser.max_chars",
        "log.partitions",
    }
    assert sizes <= fields
    assert "memory.tool_pairs" in fields  # and the one choice of how windows cut tool exchanges
    known = set(configuration.COMMON_KEYS | configuration.COMPOSITE_KEYS).union(*configuration.VIEW_KEYS.values())
    for c in CASES:
        if c.error is ConfigError and c.field.startswith("memory.") and c.words != "unknown key":
            assert family(c.field[len("memory.") :]) in known, c.id
        if c.field.startswith("log."):
            assert c.field[len("log.") :] in configuration.LOG_KEYS, c.id
        if c.field.startswith("memory.summariser."):
            assert c.field.rsplit(".", 1)[1] in configuration.SUMMARISER_KEYS, c.id


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
async def test_bad_input_is_refused_by_name_and_writes_nothing(harness: Harness, case: Bad) -> None:
    good = f"good before {case.id}"
    await harness.mem.add(Message("user", good))  # the log is live around every bad input
    harness.good.append(good)
    before = await harness.snapshot()
    assert before, "the good message is on the log"
    with pytest.raises(InvalidInput) as caught:
        await case.run(harness)
    error = caught.value
    assert isinstance(error, case.error), f"{type(error).__name__}: {error}"
    assert isinstance(error, ValueError) and isinstance(error, HelixError)
    assert error.field == case.field, str(error)
    assert str(error).startswith(f"{case.field}: ")
    assert case.words in str(error), str(error)
    assert await harness.snapshot() == before, f"{case.id} wrote to the log"


async def test_the_log_holds_the_good_messages_and_nothing_else(harness: Harness) -> None:
    log = harness.mem.backend.log
    assert await log.namespaces() == [harness.namespace]
    records = [r async for r in log.read(harness.namespace)]
    assert {r.event.session_id for r in records} == {"keeper"}
    assert all(isinstance(r.event.payload, MessageAdded) for r in records)
    assert [r.event.payload.message.content for r in records] == harness.good  # type: ignore[union-attr]
