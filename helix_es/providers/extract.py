"""Extractors for the facts view: a batch of one session's turns in, the facts they state out.

An `Extractor` names its `model` ("rules/v1", "openai/gpt-4o-mini"), extracts facts from a
batch of turns, and estimates what that would cost (`prompt_tokens`, for a dry run). What it
answers is recorded on the log as a `FactsExtracted` event, so a rebuild never asks it again.
Providers (YAML `extract:` on the view, `parse_extract`):

- `rules` (`helix_es.providers.extract_rules.RulesExtractor`): a few English patterns; free,
  offline, deterministic.
- `openai`: any OpenAI-compatible `POST {base_url}/chat/completions`, asked with `PROMPT` and
  `response_format: {"type": "json_object"}`. The answer's `choices[0].message.content` must be
  `{"facts": [{"subject": str, "predicate": str, "value": str, "valid_from": ISO-8601 | null}]}`;
  `parse_facts` checks it strictly. Anything else is an `ExtractionError` giving the reason, never
  a crash or a fact silently dropped; `retryable` tells a worker whether to try again later
  (no answer, 429, 5xx) or to dead-letter the batch (4xx, an answer that breaks the contract).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, date, datetime
from typing import Any

from helix_es.model.errors import ConfigError
from helix_es.model.fact_events import ExtractedFact
from helix_es.model.options import mapping, only_keys, seconds, text
from helix_es.model.tokens import estimate_tokens
from helix_es.providers.extract_rules import RulesExtractor
from helix_es.providers.extract_types import Extraction, ExtractionError, Extractor, Turn
from helix_es.providers.http import NOT_JSON, RETRY_STATUS, HttpError, bearer, request_json

__all__ = [
    "PROMPT",
    "Extraction",
    "ExtractionError",
    "Extractor",
    "OpenAIExtractor",
    "RulesExtractor",
    "Turn",
    "messages",
    "parse_extract",
    "parse_facts",
    "parse_valid_from",
    "prompt_sha256",
    "snake_case",
    "transcript",
]

MAX_FACTS = 200  # facts in one answer
MAX_CHARS = 1000  # characters of a subject, predicate or value

PROMPT = """\
You extract facts about people from a conversation, for a long-term memory.

A fact is one durable thing a turn states about a person: where they live, where they work, their \
job, what they like or dislike, the languages they speak, their pets, their name. Greetings, \
questions, plans, opinions about other things and what the assistant says about itself are not facts.

Answer with one JSON object and nothing else:
{"facts": [{"subject": "...", "predicate": "...", "value": "...", "valid_from": "YYYY-MM-DD" or null}]}

- subject: the person the fact is about, by name as the turn's speaker name says ("Caroline"); \
"user" for a user turn without a name. Facts a speaker states about someone else they name take \
that person's name.
- predicate: lower snake_case. Use these where they fit: name, lives_in, works_at, job_title, \
likes, dislikes, speaks, has_pet; another short snake_case verb phrase otherwise.
- value: short, as the turn says it ("Porto", "Acme Corp", "nurse", "hiking", "Spanish", \
"dog named Biscuit").
- valid_from: the date the turn says the fact became true ("since March 2024" is 2024-03-01, \
"in 2021" is 2021-01-01, "last month" counts from the turn's date), else the date and time of the \
turn that states it, as listed.
- Only facts stated in the turns: no guesses, nothing from general knowledge. No facts: {"facts": []}.
- A changed fact is a new fact ("I moved to Lisbon" is lives_in Lisbon); something the person \
stopped liking is dislikes.
"""
"""The system prompt of `OpenAIExtractor`; what a fact is, and the JSON to answer. Its SHA-256 is part
of every `FactsExtracted.prompt_sha256`, so a change of this text shows on the log."""


# --- the answer: {"facts": [...]}, checked strictly ------------------------------------------------

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_NOT_WORD = re.compile(r"[\W_]+")
_REDUCED_DATE = re.compile(r"(\d{4})(?:-(\d{2}))?")  # ISO-8601 reduced precision: a year, or year and month


def snake_case(predicate: str) -> str:
    """`Lives In`, `livesIn`, `lives-in` -> `lives_in`."""
    return _NOT_WORD.sub("_", _CAMEL.sub("_", predicate.strip())).strip("_").lower()


def _got(value: Any) -> str:
    shown = repr(value) if not isinstance(value, (dict, list)) else json.dumps(value)[:60]
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _string(item: Mapping[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where}.{key}: must be a non-empty string, got {_got(value)}")
    if len(value.strip()) > MAX_CHARS:
        raise ValueError(f"{where}.{key}: {len(value.strip())} characters, at most {MAX_CHARS}")
    return value.strip()


def parse_valid_from(value: Any, where: str = "valid_from") -> datetime | None:
    """null, or an ISO-8601 date or date-time in UTC: naive means UTC, a date is its midnight, a year
    (`2021`) or month (`2024-03`) its first day. ValueError naming `where` for anything else."""
    if value is None:
        return None
    if isinstance(value, str) and value.strip():
        raw = value.strip()
        try:
            reduced = _REDUCED_DATE.fullmatch(raw)
            if reduced:
                day = date(int(reduced.group(1)), int(reduced.group(2) or 1), 1)
                return datetime(day.year, day.month, day.day, tzinfo=UTC)
            if len(raw) == 10:
                day = date.fromisoformat(raw)
                return datetime(day.year, day.month, day.day, tzinfo=UTC)
            at = datetime.fromisoformat(raw)
            return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)
        except (ValueError, OverflowError):
            pass
    raise ValueError(f"{where}: must be null or an ISO-8601 date or date-time, got {_got(value)}")


def parse_facts(content: Any) -> tuple[ExtractedFact, ...]:
    """`choices[0].message.content` to facts; ValueError saying exactly what breaks the contract."""
    if not isinstance(content, str):
        raise ValueError(f"choices[0].message.content: must be a string, got {_got(content)}")
    try:
        answer = json.loads(content)
    except ValueError as exc:
        raise ValueError(f"content: not JSON ({exc}): {_got(content)}") from None
    if not isinstance(answer, dict):
        raise ValueError(f"content: must be a JSON object, got {type(answer).__name__}")
    if "facts" not in answer:
        raise ValueError(f'content: no "facts" key, got keys {sorted(answer)[:10]}')
    items = answer["facts"]
    if not isinstance(items, list):
        raise ValueError(f"facts: must be a list, got {type(items).__name__}")
    if len(items) > MAX_FACTS:
        raise ValueError(f"facts: {len(items)} facts, at most {MAX_FACTS}")
    facts = []
    for i, item in enumerate(items):
        where = f"facts[{i}]"
        if not isinstance(item, dict):
            raise ValueError(f"{where}: must be an object, got {type(item).__name__}")
        subject, raw_predicate, value = (_string(item, k, where) for k in ("subject", "predicate", "value"))
        predicate = snake_case(raw_predicate)
        if not predicate:
            raise ValueError(f"{where}.predicate: must hold a letter or digit, got {raw_predicate!r}")
        valid_from = parse_valid_from(item.get("valid_from"), f"{where}.valid_from")
        facts.append(ExtractedFact(subject, predicate, value, valid_from))
    return tuple(facts)


# --- openai: any OpenAI-compatible chat completions API --------------------------------------------


def _said(turn: Turn) -> str:
    return turn.said_at.astimezone(UTC).isoformat(timespec="seconds")


def transcript(turns: Sequence[Turn]) -> str:
    """The user message: the turns numbered, each with its date, speaker and text (more lines indented)."""
    lines = [f"Turns ({len(turns)}):"]
    for n, turn in enumerate(turns, 1):
        speaker = f"{turn.name} ({turn.role})" if turn.name else turn.role
        body = turn.content.replace("\r\n", "\n").replace("\n", "\n   ")
        lines.append(f"{n}. [{_said(turn)}] {speaker}: {body}")
    return "\n".join(lines)


def messages(turns: Sequence[Turn]) -> list[dict[str, str]]:
    """The chat messages `OpenAIExtractor` sends for `turns`: `PROMPT`, then the transcript."""
    return [{"role": "system", "content": PROMPT}, {"role": "user", "content": transcript(turns)}]


def prompt_sha256(sent: Sequence[Mapping[str, str]]) -> str:
    """SHA-256 of the messages as canonical JSON (sorted keys, no spaces, UTF-8)."""
    canonical = json.dumps(list(sent), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


def _count(usage: Any, key: str) -> int | None:
    value = usage.get(key) if isinstance(usage, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class OpenAIExtractor:
    """`POST {base_url}/chat/completions` once a batch, in a thread; `request_json` retries 429 and 5xx.

    `api_key_env` names the variable holding the key, read at each call (None: no key is sent,
    as a local server wants)."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        *,
        timeout: float = 60.0,
        temperature: float = 0.0,
        retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.name = model
        self.model = f"openai/{model}"
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.temperature = temperature
        self.retries = retries
        self.backoff = backoff

    def prompt_tokens(self, session_id: str, turns: Sequence[Turn]) -> int:
        if not turns:
            return 0
        return sum(4 + estimate_tokens(m["content"]) for m in messages(turns)) + 3  # as OpenAI counts a chat

    def _headers(self) -> dict[str, str]:
        if self.api_key_env is None:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise ExtractionError(
                self.model,
                f"${self.api_key_env} is not set (extract.api_key_env names it)",
                retryable=False,
                hint=f"export {self.api_key_env}=<your key> where the worker runs, or drop api_key_env "
                "for a server that needs no key; then replay the batch",
            )
        return bearer(key)

    def _error(self, exc: HttpError) -> ExtractionError:
        if exc.status is None:
            if exc.detail.startswith(NOT_JSON):
                return ExtractionError(self.model, f"{self.url} answered: {exc.detail}", retryable=False)
            return ExtractionError(self.model, f"cannot reach {self.url}: {exc.detail}", retryable=True)
        retryable = exc.status in RETRY_STATUS or exc.status >= 500
        hint = ""
        if exc.status in (401, 403):
            hint = (
                f"check the key in ${self.api_key_env}"
                if self.api_key_env
                else "this server wants a key: set extract.api_key_env to the variable that holds it"
            )
        elif exc.status == 404:
            hint = f"check extract.base_url ({self.base_url}) and extract.model ({self.name})"
        reason = f"{self.url} answered HTTP {exc.status}: {exc.detail}"
        return ExtractionError(self.model, reason, retryable=retryable, status=exc.status, hint=hint)

    def _ask(self, sent: list[dict[str, str]]) -> Any:
        headers = self._headers()
        body = {
            "model": self.name,
            "temperature": self.temperature,
            "response_format": {"type": "json_object"},
            "messages": sent,
        }
        try:
            return request_json(
                self.url, body, headers=headers, timeout=self.timeout, retries=self.retries, backoff=self.backoff
            )
        except HttpError as exc:
            raise self._error(exc) from None

    async def extract(self, session_id: str, turns: Sequence[Turn]) -> Extraction:
        if not turns:
            return Extraction((), self.model, "")
        # The prompt, the call and the answer's checks all in a thread: the loop serves adds meanwhile.
        return await asyncio.to_thread(self._extract, list(turns))

    def _extract(self, turns: list[Turn]) -> Extraction:
        sent = messages(turns)
        answer = self._ask(sent)
        try:
            choice = answer["choices"][0]
            content = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            reason = f"the answer has no choices[0].message.content: {_got(answer)}"
            raise ExtractionError(self.model, reason, retryable=False) from None
        try:
            facts = parse_facts(content)
        except ValueError as exc:
            reason = str(exc)
            if isinstance(choice, dict) and choice.get("finish_reason") == "length":
                reason += " (finish_reason length: the answer was cut off; send fewer turns a batch)"
            raise ExtractionError(self.model, reason, retryable=False) from None
        usage = answer.get("usage") if isinstance(answer, dict) else None
        return Extraction(
            facts, self.model, prompt_sha256(sent), _count(usage, "prompt_tokens"), _count(usage, "completion_tokens")
        )


# --- configuration: `extract: {provider: openai | rules, ...}` -------------------------------------

OPENAI_KEYS = frozenset({"provider", "base_url", "model", "api_key_env", "timeout", "temperature"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse_extract(raw: Any, where: str) -> Extractor:
    """YAML `extract:` to an extractor; a bad key or value is a `ConfigError` naming its path (`where.key`).

    `{provider: rules}` (the default when `provider` is left out), or `{provider: openai, base_url,
    model, api_key_env, timeout, temperature}` with base_url and model required."""
    raw = mapping(raw, where)
    only_keys(raw, OPENAI_KEYS, where, "extract")
    provider = raw.get("provider", "rules")
    if provider == "rules":
        extra = sorted(set(raw) - {"provider"})
        if extra:
            raise ConfigError(f"{where}.{extra[0]}", "is an option of the openai provider, not rules")
        return RulesExtractor()
    if provider != "openai":
        raise ConfigError(f"{where}.provider", f"must be openai or rules, got {provider!r}")
    for key in ("base_url", "model"):
        if key not in raw:
            raise ConfigError(f"{where}.{key}", "is required for provider openai")
    base_url = text(raw["base_url"], f"{where}.base_url")
    if not re.match(r"https?://[^/\s]+", base_url):
        raise ConfigError(f"{where}.base_url", f"must be an http(s) URL, got {base_url!r}")
    model = text(raw["model"], f"{where}.model")
    key_env = raw.get("api_key_env")
    if key_env is not None and (not isinstance(key_env, str) or not _ENV_NAME.fullmatch(key_env)):
        raise ConfigError(f"{where}.api_key_env", f"must name an environment variable, got {key_env!r}")
    timeout = seconds(raw["timeout"], f"{where}.timeout") if "timeout" in raw else 60.0
    temperature = raw.get("temperature", 0.0)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)) or not 0 <= temperature <= 2:
        raise ConfigError(f"{where}.temperature", f"must be a number from 0 to 2, got {temperature!r}")
    return OpenAIExtractor(base_url, model.strip(), key_env, timeout=timeout, temperature=float(temperature))
