"""The chat message an agent adds to memory, validated once at the edge."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from helix_es.model.errors import InvalidInput, InvalidMessage

Role = Literal["system", "user", "assistant", "tool"]
ROLES: frozenset[str] = frozenset(("system", "user", "assistant", "tool"))


def check_text(
    value: object, path: str, *, optional: bool = False, empty: bool = True, error: type[InvalidInput] = InvalidMessage
) -> None:
    """`value` is text every store can hold: a str of valid UTF-8 without NUL (not empty unless `empty`)."""
    if value is None and optional:
        return
    if not isinstance(value, str):
        raise error(path, f"must be a string, got {type(value).__name__}")
    if not empty and not value:
        raise error(path, "must not be empty")
    if not value.isascii():  # ASCII is valid UTF-8: no copy to find out (projectors check every message)
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise error(path, f"is not valid UTF-8 text ({exc.reason})") from None
    if "\x00" in value:  # PostgreSQL text and jsonb cannot hold it; refuse it everywhere alike
        raise error(path, "contains a NUL character (\\x00)")


# The encryption middleware's envelope of a sealed field (helix_es.client.encryption):
# `helix-enc:v1:<key id>:<base64(12-byte nonce | ciphertext | 16-byte tag)>`.
SEALED_PREFIX = "helix-enc:v1:"
SEALED_OVERHEAD = 12 + 16  # bytes of nonce and tag around the ciphertext, which is as long as the text


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A call the assistant asked a tool to make; `arguments` is JSON text."""

    id: str
    name: str
    arguments: str = "{}"

    def check(self, path: str = "tool_call") -> None:
        check_text(self.id, f"{path}.id", empty=False)
        check_text(self.name, f"{path}.name", empty=False)
        check_text(self.arguments, f"{path}.arguments")
        try:
            json.loads(self.arguments, parse_constant=_not_json)
        except ValueError as exc:
            raise InvalidMessage(f"{path}.arguments", f"is not JSON text ({exc})") from None


def check_occurred_at(value: object, path: str = "occurred_at") -> None:
    """`value` is a timezone-aware datetime (a naive one would say a different moment on every machine)."""
    if not isinstance(value, datetime):
        raise InvalidMessage(path, f"must be a timezone-aware datetime, got {type(value).__name__}")
    if value.utcoffset() is None:
        raise InvalidMessage(path, "must be timezone-aware (a naive datetime is ambiguous): give its offset")
    try:
        value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00+01:00 is in year 0 in UTC
        raise InvalidMessage(path, f"{value.isoformat()} is outside years 1-9999 in UTC") from None


def _not_json(word: str) -> object:
    # Python's json reads NaN and Infinity; JSON has no such words, and other readers refuse them.
    raise ValueError(f"{word} is not a JSON value")


def _tool_calls(value: object) -> tuple[ToolCall, ...]:
    if value is None:
        return ()
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, Iterable):
        raise InvalidMessage("tool_calls", "must be a list of tool calls")
    calls = []
    for i, item in enumerate(value):
        if isinstance(item, Mapping):
            unknown = set(item) - {"id", "name", "arguments"}
            if unknown:
                raise InvalidMessage(f"tool_calls[{i}]", f"unknown keys {sorted(unknown)}")
            item = ToolCall(item.get("id"), item.get("name"), item.get("arguments", "{}"))  # type: ignore[arg-type]
        if not isinstance(item, ToolCall):
            raise InvalidMessage(f"tool_calls[{i}]", "must be a ToolCall or a mapping")
        calls.append(item)
    return tuple(calls)


@dataclass(frozen=True, slots=True)
class Message:
    """One turn of a conversation. Invalid input raises `InvalidMessage` naming the field."""

    role: Role
    content: str = ""
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    metadata: Mapping[str, str] = field(default_factory=dict, hash=False)
    # When it was said, for imports and backfills; None means at the event's time (`occurred_at or timestamp`).
    # Kept in UTC: the log holds µs past the epoch, so a message equals itself read back.
    occurred_at: datetime | None = None
    # Token estimate, filled on first use (`helix_es.tokens`): windows re-count what they hold on every add.
    _tokens: int | None = field(default=None, init=False, repr=False, compare=False, hash=False)
    # `to_json`, kept on first use: the service answers every get with the window's messages as JSON,
    # and a view hands out the same decoded messages (`decode_json`) get after get.
    _json: str | None = field(default=None, init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", _tool_calls(self.tool_calls))
        self.check()
        object.__setattr__(self, "metadata", dict(self.metadata))
        if self.occurred_at is not None and self.occurred_at.tzinfo is not UTC:
            object.__setattr__(self, "occurred_at", self.occurred_at.astimezone(UTC))

    def check(self) -> None:
        """The rules `Message()` enforces. A projector runs them on messages decoded from others' records,
        without building the message again."""
        if self.role not in ROLES:
            raise InvalidMessage("role", f"must be one of {sorted(ROLES)}, got {self.role!r}")
        check_text(self.content, "content")
        check_text(self.name, "name", optional=True, empty=False)
        ids: set[str] = set()
        for i, call in enumerate(self.tool_calls):
            call.check(f"tool_calls[{i}]")
            if call.id in ids:  # a tool message could not say which of them it answers
                raise InvalidMessage(f"tool_calls[{i}].id", f"repeats {call.id!r}: each tool call needs its own id")
            ids.add(call.id)
        if self.tool_calls and self.role != "assistant":
            raise InvalidMessage("tool_calls", f"only assistant messages carry tool calls, not {self.role}")
        check_text(self.tool_call_id, "tool_call_id", optional=True, empty=False)
        if self.role == "tool" and self.tool_call_id is None:
            raise InvalidMessage("tool_call_id", "a tool message must name the tool call it answers")
        if self.role != "tool" and self.tool_call_id is not None:
            raise InvalidMessage("tool_call_id", f"only tool messages answer a tool call, not {self.role}")
        if not isinstance(self.metadata, Mapping):
            raise InvalidMessage("metadata", "must be a mapping of str to str")
        for key, val in self.metadata.items():
            check_text(key, "metadata key", empty=False)
            check_text(val, f"metadata[{key!r}]")
        if self.occurred_at is not None:
            check_occurred_at(self.occurred_at)

    def to_record(self) -> dict[str, Any]:
        """The Avro record form (also the JSON form stored in views)."""
        return {
            "role": self.role,
            "content": self.content,
            "name": self.name,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls],
            "tool_call_id": self.tool_call_id,
            "metadata": dict(self.metadata),
            "occurred_at": self.occurred_at,
        }

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Message:
        """Trusted decode of a record this library wrote: skips validation."""
        msg = object.__new__(cls)
        setattr_ = object.__setattr__
        setattr_(msg, "role", record["role"])
        setattr_(msg, "content", record.get("content", ""))
        setattr_(msg, "name", record.get("name"))
        calls = record.get("tool_calls")
        setattr_(msg, "tool_calls", tuple(ToolCall(c["id"], c["name"], c["arguments"]) for c in calls) if calls else ())
        setattr_(msg, "tool_call_id", record.get("tool_call_id"))
        setattr_(msg, "metadata", record.get("metadata") or {})
        at = record.get("occurred_at")
        setattr_(msg, "occurred_at", datetime.fromisoformat(at) if isinstance(at, str) else at)  # JSON: ISO text
        setattr_(msg, "_tokens", None)
        setattr_(msg, "_json", None)
        return msg

    def to_json(self) -> str:
        """Compact JSON, leaving out empty optional fields; readable by other programs."""
        text = self._json
        if text is None:
            try:
                text = self._fast_json()
            except TypeError:  # a field that is not text (a Message built around validation): json decides
                text = self._slow_json()
            object.__setattr__(self, "_json", text)
        return text

    def _fast_json(self) -> str:
        # json.dumps(..., ensure_ascii=False, separators=(",", ":")) byte for byte, assembled with the
        # same string encoder: 3-4x faster, and every view write encodes each message it appends.
        e = _encode_str
        if (
            self.name is None
            and not self.tool_calls
            and self.tool_call_id is None
            and not self.metadata
            and self.occurred_at is None
        ):
            return f'{{"role":{e(self.role)},"content":{e(self.content)}}}'  # most messages: one string made
        parts = ['{"role":', e(self.role), ',"content":', e(self.content)]
        if self.name is not None:
            parts += [',"name":', e(self.name)]
        if self.tool_calls:
            calls = ",".join(
                f'{{"id":{e(c.id)},"name":{e(c.name)},"arguments":{e(c.arguments)}}}' for c in self.tool_calls
            )
            parts += [',"tool_calls":[', calls, "]"]
        if self.tool_call_id is not None:
            parts += [',"tool_call_id":', e(self.tool_call_id)]
        if self.metadata:
            parts += [',"metadata":{', ",".join(e(k) + ":" + e(v) for k, v in self.metadata.items()), "}"]
        if self.occurred_at is not None:
            parts += [',"occurred_at":', e(self.occurred_at.isoformat())]
        parts.append("}")
        return "".join(parts)

    def _slow_json(self) -> str:
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        if self.occurred_at is not None:
            out["occurred_at"] = self.occurred_at.isoformat()
        return json.dumps(out, ensure_ascii=False, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Message:
        return cls.from_record(json.loads(text))


_encode_str = json.encoder.encode_basestring  # json.dumps(ensure_ascii=False)'s own string encoder (C)

# Process-wide by nature: frozen messages keyed by their own JSON, nothing to open or close, any loop.
_decoded: dict[str | bytes, Message] = {}
_CACHE_ENTRIES = 50_000
_CACHE_ITEM_BYTES = 4096


def decode_json(text: str | bytes) -> Message:
    """`Message.from_json` with a bounded cache: views re-read the same stored messages on every get."""
    msg = _decoded.get(text)
    if msg is None:
        msg = Message.from_json(text)
        if len(text) <= _CACHE_ITEM_BYTES:  # big tool outputs are not worth the memory
            if len(_decoded) >= _CACHE_ENTRIES:
                _decoded.clear()
            _decoded[text] = msg
    return msg


DEFAULT_MAX_CONTENT_BYTES = 512 * 1024  # memory.max_content_bytes: well inside the log's 900,000-byte event limit


def check_size(message: Message, limit: int, key: str = "memory.max_content_bytes") -> None:
    """`content` and each tool call's `arguments` hold at most `limit` bytes of UTF-8, as written to the log
    (after middleware: encryption makes text about 4/3 longer)."""
    fields = [("content", message.content)]
    fields += [(f"tool_calls[{i}].arguments", c.arguments) for i, c in enumerate(message.tool_calls)]
    for path, text in fields:
        if len(text) * 4 > limit:  # below that it fits whatever the characters; else count
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > limit:
                raise InvalidMessage(path, f"is {size} bytes of UTF-8, over the limit of {limit} ({key})")
