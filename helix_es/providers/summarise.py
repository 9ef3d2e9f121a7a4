"""Summarisers for the summary view: an offline deterministic default, and an OpenAI-compatible model."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from helix_es.model.errors import ConfigError
from helix_es.model.message import Message
from helix_es.model.options import mapping, only_keys, seconds, whole_number
from helix_es.providers.http import HttpError, bearer, openai_base_url, post_json

_SENTENCE = re.compile(r"(?<=[.!?])\s")


class Summariser(Protocol):
    """Folds older messages into the running summary. Its output is recorded on the log."""

    @property
    def model(self) -> str: ...

    async def summarise(self, previous: str, messages: Sequence[Message]) -> str: ...


def _gist(message: Message, limit: int = 200) -> str:
    text = " ".join(message.content.split())
    if not text and message.tool_calls:
        text = "called " + ", ".join(f"{c.name}({c.arguments})" for c in message.tool_calls)
    first = _SENTENCE.split(text, maxsplit=1)[0]
    return first if len(first) <= limit else first[: limit - 1] + "…"


@dataclass(frozen=True)
class ExtractiveSummariser:
    """Offline and deterministic: the first sentence of each message, newest kept within `max_chars`."""

    max_chars: int = 4000
    model: str = "extractive"

    async def summarise(self, previous: str, messages: Sequence[Message]) -> str:
        lines = [previous] if previous else []
        lines += [f"{m.role}: {_gist(m)}" for m in messages]
        text = "\n".join(lines)
        return text if len(text) <= self.max_chars else "…" + text[-(self.max_chars - 1) :]


PROMPT = (
    "You maintain the running summary of a conversation between a user and an AI assistant. "
    "Rewrite the summary so it also covers the new messages. Keep every fact, name, number, "
    "decision and open question; drop pleasantries. Answer with the summary text only."
)


@dataclass(frozen=True)
class OpenAISummariser:
    """Any OpenAI-compatible chat completions API; the key comes from the environment."""

    model: str = "gpt-4o-mini"
    base_url: str | None = None  # like the official SDK: else $OPENAI_BASE_URL, else OpenAI's own
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0

    async def summarise(self, previous: str, messages: Sequence[Message]) -> str:
        base_url = openai_base_url(self.base_url)
        transcript = "\n".join(f"{m.role}: {m.content or _gist(m)}" for m in messages)
        user = f"Summary so far:\n{previous or '(none)'}\n\nNew messages:\n{transcript}"
        answer = await post_json(
            base_url + "/chat/completions",
            {
                "model": self.model,
                "temperature": 0,
                "messages": [{"role": "system", "content": PROMPT}, {"role": "user", "content": user}],
            },
            headers=bearer(os.environ.get(self.api_key_env)),
            timeout=self.timeout,
        )
        try:
            return str(answer["choices"][0]["message"]["content"]).strip()
        except (KeyError, IndexError, TypeError):
            raise HttpError(base_url, f"no choices[0].message.content in {str(answer)[:300]}") from None


SUMMARISER_KEYS = {"provider", "model", "base_url", "api_key_env", "max_chars", "timeout"}


def parse_summariser(raw: Any, where: str) -> Summariser:
    """`summariser: {provider: extractive | openai, model, base_url, api_key_env}`; extractive by default."""
    if raw is None:
        return ExtractiveSummariser()
    raw = mapping(raw, where)
    only_keys(raw, SUMMARISER_KEYS, where, "a summariser")
    provider = raw.get("provider", "extractive")
    if provider == "extractive":
        for k in ("model", "base_url", "api_key_env", "timeout"):
            if k in raw:
                raise ConfigError(f"{where}.{k}", "is an option of the openai provider, not extractive")
        max_chars = whole_number(raw, "max_chars", where, 4000)
        if max_chars < 2:
            raise ConfigError(f"{where}.max_chars", f"must be >= 2, got {max_chars}")
        return ExtractiveSummariser(max_chars=max_chars)
    if provider == "openai":
        if "max_chars" in raw:
            raise ConfigError(f"{where}.max_chars", "is an option of the extractive provider, not openai")
        texts = {k: raw[k] for k in ("model", "base_url", "api_key_env") if k in raw}
        for k, v in texts.items():
            if not isinstance(v, str) or not v:
                raise ConfigError(f"{where}.{k}", f"must be a non-empty string, got {v!r}")
        if "timeout" in raw:
            texts["timeout"] = seconds(raw["timeout"], f"{where}.timeout")
        return OpenAISummariser(**texts)
    raise ConfigError(f"{where}.provider", f"must be extractive or openai, got {provider!r}")
