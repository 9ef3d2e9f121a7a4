"""Redaction middleware: secrets and personal data are replaced on `add`, before the event is written.

The log is append-only and kept forever, so anything that reaches it stays; redaction
therefore runs on the write path and is lossy by design (`get` returns the redacted text).
It applies to `content` and to tool call `arguments`, where only JSON string values (and
numbers that match, such as a card number) are replaced, so arguments stay valid JSON.
Role, name, ids and metadata are left alone. Put it outside encryption
(`memory_middleware: [redaction, encryption]`): it cannot read sealed text, and skips it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from helix_es.client.middleware import Middleware, add_many, register
from helix_es.client.protocol import Memory
from helix_es.model.batch import check_batch
from helix_es.model.errors import InvalidInput, InvalidMessage
from helix_es.model.events import Position
from helix_es.model.message import SEALED_PREFIX, Message, ToolCall

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Rule:
    """`pattern` finds candidates; `valid` (optional) confirms one (e.g. a Luhn check).

    If the pattern has a group named `secret`, only that group is replaced, so context such
    as `Bearer ` or `password=` stays readable.
    """

    name: str
    pattern: re.Pattern[str]
    valid: Callable[[str], bool] | None = None


def rule(name: str, pattern: str | re.Pattern[str], valid: Callable[[str], bool] | None = None) -> Rule:
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise InvalidInput("name", f"a redaction rule name must match [A-Za-z0-9_.-]+, got {name!r}")
    try:
        compiled = pattern if isinstance(pattern, re.Pattern) else re.compile(pattern)
    except re.error as exc:
        raise InvalidInput(f"patterns[{name!r}]", f"is not a valid regular expression: {exc}") from None
    return Rule(name, compiled, valid)


def luhn(text: str) -> bool:
    """True if the digits of `text` (13 to 19 of them) pass the Luhn checksum card numbers carry."""
    digits = [int(ch) for ch in text if ch.isdigit()]
    if not 13 <= len(digits) <= 19:
        return False
    total = 0
    for i, d in enumerate(reversed(digits)):
        if i % 2:
            d *= 2
            if d > 9:
                d -= 9
        total += d
    return total % 10 == 0


def _phone(text: str) -> bool:
    digits = sum(ch.isdigit() for ch in text)
    # Without a "+" or "(area)" a phone number needs 10 digits: dates like 2024-01-15 have 8.
    return 8 <= digits <= 15 if text.lstrip().startswith(("+", "(")) else 10 <= digits <= 15


_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"

# Order matters: tokens first (they contain digits and dots), then e-mail, cards, addresses, phones.
DEFAULT_RULES: tuple[Rule, ...] = (
    rule("bearer", r"(?i)\bbearer\s+(?P<secret>[A-Za-z0-9\-._~+/]{8,}=*)"),
    rule("jwt", r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]+"),
    rule("private_key", r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
    rule(
        "api_key",
        r"(?<![A-Za-z0-9_-])(?:"
        r"sk-[A-Za-z0-9_-]{16,}"  # OpenAI, Anthropic (sk-ant-...)
        r"|(?:sk|pk|rk)_(?:live|test)_[A-Za-z0-9]{16,}"  # Stripe
        r"|(?:AKIA|ASIA)[0-9A-Z]{16}"  # AWS access key ids
        r"|gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,}"  # GitHub
        r"|xox[abposr]-[A-Za-z0-9-]{10,}"  # Slack
        r"|AIza[0-9A-Za-z_-]{35}"  # Google
        r"|glpat-[A-Za-z0-9_-]{20,}"  # GitLab
        r")(?![A-Za-z0-9_-])",
    ),
    rule(
        "secret",
        r"(?i)\b(?:api[_-]?key|secret(?:[_-]?key)?|access[_-]?token|auth[_-]?token|token|password|passwd|pwd)"
        r"\b[\"']?\s*[:=]\s*[\"']?(?P<secret>[^\s\"',;&]{6,})",
    ),
    rule("email", r"(?<![\w.+-])[A-Za-z0-9._%+-]+@(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?\.)+[A-Za-z]{2,}\b"),
    rule("credit_card", r"(?<![\w-])(?:\d[ -]?){12,18}\d(?![\w-])", luhn),
    rule("ipv4", rf"(?<![\w.]){_OCTET}(?:\.{_OCTET}){{3}}(?![\w]|\.\d)"),
    rule(
        "phone",
        r"(?<![\w+])(?:"
        r"\+\d{7,15}"  # +4722334455
        r"|(?:\+\d{1,3}[ .-]?)?(?:\(\d{1,4}\)[ .-]?)?\d{2,4}(?:[ .-]\d{2,4}){1,4}"  # +1 (555) 123-4567
        r"|\(\d{1,4}\)[ .-]?\d{3,4}[ .-]?\d{3,4}"  # (555)123-4567
        r")(?![\w])",
        _phone,
    ),
)

# JSON object keys whose string values are secrets whatever they look like.
SECRET_KEYS = re.compile(
    r"(?i)^(?:.*[_-])?(?:password|passwd|pwd|secret|api[_-]?key|apikey|token|access[_-]?token|"
    r"refresh[_-]?token|authorization|auth|private[_-]?key|client[_-]?secret|credentials?)$"
)


class Redactor:
    """Replaces every match of its rules with `replacement` (`{name}` is the rule's name).

    `patterns` adds custom rules (name -> regex), applied before the built-in ones;
    `rules=()` turns the built-ins off. `secret_keys` (a regex, or None) names JSON keys in
    tool arguments whose string values are always redacted.
    """

    def __init__(
        self,
        patterns: Mapping[str, str | re.Pattern[str]] | Iterable[Rule] = (),
        *,
        rules: Iterable[Rule] = DEFAULT_RULES,
        replacement: str = "[REDACTED:{name}]",
        secret_keys: re.Pattern[str] | None = SECRET_KEYS,
    ) -> None:
        custom = [rule(n, p) for n, p in patterns.items()] if isinstance(patterns, Mapping) else list(patterns)
        self.rules: tuple[Rule, ...] = (*custom, *rules)
        if "{name}" not in replacement and "{" in replacement:
            raise InvalidInput("replacement", "may use {name} and no other placeholder")
        self.replacement = replacement
        self.secret_keys = secret_keys

    def _mark(self, name: str) -> str:
        return self.replacement.replace("{name}", name)

    def redact(self, text: str) -> str:
        """`text` with every match of every rule replaced, rules in order."""
        if text.startswith(SEALED_PREFIX):
            return text  # sealed by the encryption middleware: nothing to see
        for r in self.rules:
            text = r.pattern.sub(partial(self._replace, r), text)
        return text

    def _replace(self, r: Rule, match: re.Match[str]) -> str:
        whole = match.group(0)
        if r.valid is not None and not r.valid(whole):
            return whole
        if "secret" in r.pattern.groupindex and match.group("secret") is not None:
            start, end = match.span("secret")
            base = match.start()
            return whole[: start - base] + self._mark(r.name) + whole[end - base :]
        return self._mark(r.name)

    def redact_json(self, text: str) -> str:
        """Redact inside the string values (and matching numbers) of JSON text; the result is JSON text.
        Unchanged text comes back as it was, formatting included."""
        try:
            value = json.loads(text)
        except ValueError:
            return self.redact(text)  # not JSON: redact it as text rather than let a secret through
        redacted = self._walk(value, None)
        if redacted == value:
            return text
        return json.dumps(redacted, ensure_ascii=False)

    def _walk(self, value: Any, key: str | None) -> Any:
        if isinstance(value, str):
            if key is not None and self.secret_keys is not None and value and self.secret_keys.match(key):
                return self._mark("secret")
            return self.redact(value)
        if isinstance(value, bool) or value is None:
            return value
        if isinstance(value, int):  # a card number sent as a JSON number
            text = str(value)
            redacted = self.redact(text)
            return value if redacted == text else redacted
        if isinstance(value, list):
            return [self._walk(v, None) for v in value]
        if isinstance(value, dict):
            return {k: self._walk(v, k) for k, v in value.items()}
        return value

    def redact_message(self, message: Message) -> Message:
        content = self.redact(message.content)
        calls = tuple(ToolCall(c.id, c.name, self.redact_json(c.arguments)) for c in message.tool_calls)
        if content == message.content and calls == message.tool_calls:
            return message
        return replace(message, content=content, tool_calls=calls)


class RedactingMemory:
    """Redacts each message on `add`; reads pass through (what is stored is already redacted)."""

    def __init__(self, inner: Memory, redactor: Redactor) -> None:
        self.inner = inner
        self.redactor = redactor
        self._warned = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.inner, name)  # .namespace, .session_id, ... of the wrapped memory

    async def add(self, message: Message, *, idempotency_key: str | None = None) -> Position:
        if not isinstance(message, Message):
            raise InvalidMessage("message", f"must be a helix_es.Message, got {type(message).__name__}")
        if not self._warned and message.content.startswith(SEALED_PREFIX):
            self._warned = True
            log.warning("redaction sees encrypted text and cannot redact it: list redaction before encryption")
        return await self.inner.add(self.redactor.redact_message(message), idempotency_key=idempotency_key)

    async def add_many(
        self, messages: Iterable[Message], *, idempotency_keys: Sequence[str | None] | None = None
    ) -> list[Position]:
        batch, keys = check_batch(messages, idempotency_keys)  # redacting needs Messages: check them first
        redacted = [self.redactor.redact_message(m) for m in batch]
        return await add_many(self.inner, redacted, idempotency_keys=keys)

    async def get(self) -> list[Message]:
        return await self.inner.get()

    async def search(self, query: str, limit: int = 10) -> list[Message]:
        return await self.inner.search(query, limit)

    async def clear(self, *, idempotency_key: str | None = None) -> Position:
        return await self.inner.clear(idempotency_key=idempotency_key)


def redaction_middleware(redactor: Redactor | None = None) -> Middleware:
    """Redact with `redactor` (default: the built-in rules)."""
    chosen = redactor or Redactor()
    return lambda memory: RedactingMemory(memory, chosen)


register("redaction", redaction_middleware)
