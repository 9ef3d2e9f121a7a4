"""Extractors: the rules' patterns, OpenAIExtractor against the stand-in model (real HTTP), parse_extract."""

from __future__ import annotations

import hashlib
import json
import os
import socket
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from helix_es.model.errors import ConfigError, InvalidInput
from helix_es.model.fact_events import ExtractedFact
from helix_es.model.positions import Position
from helix_es.providers.extract import (
    PROMPT,
    ExtractionError,
    OpenAIExtractor,
    Turn,
    messages,
    parse_extract,
    parse_facts,
    parse_valid_from,
    prompt_sha256,
    snake_case,
    transcript,
)
from helix_es.providers.extract_rules import RULES_SHA256, RulesExtractor, rule_facts
from tests.model_server import ModelServer, transcript_turns

SAID = datetime(2025, 6, 2, 9, 30, tzinfo=UTC)


def turn(content: str, name: str | None = None, role: str = "user", n: int = 0, said_at: datetime = SAID) -> Turn:
    return Turn(f"e{n}", Position("helix.ns", 0, n), said_at, role, name, content)


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


# --- rules ------------------------------------------------------------------------------------------

RULES = [
    ("My name is Caroline.", [("name", "Caroline", None)]),
    ("Hi, I'm called Priya Sharma!", [("name", "Priya Sharma", None)]),
    ("I live in Porto now.", [("lives_in", "Porto", None)]),
    ("I moved to Lisbon since March 2024", [("lives_in", "Lisbon", "2024-03-01")]),
    ("I've moved to Kyoto in 2021.", [("lives_in", "Kyoto", "2021-01-01")]),
    ("We relocated to the Netherlands as of 2025-09-01", [("lives_in", "the Netherlands", "2025-09-01")]),
    ("I've been living in Toronto since Jan 2020, and I love it.", [("lives_in", "Toronto", "2020-01-01")]),
    ("I moved to a new apartment.", []),  # a place is capitalised
    ("I work at Acme Corp these days.", [("works_at", "Acme Corp", None)]),
    ("I work for the city's transit office", [("works_at", "the city's transit office", None)]),
    ("I joined Globex in 2023!", [("works_at", "Globex", "2023-01-01")]),
    ("I started at Initech as of 2025-09-01.", [("works_at", "Initech", "2025-09-01")]),
    ("I'm a nurse.", [("job_title", "nurse", None)]),
    (
        "I'm now an architect at Foster and Partners",
        [("job_title", "architect", None), ("works_at", "Foster and Partners", None)],
    ),
    ("I work as a high school chemistry teacher", [("job_title", "high school chemistry teacher", None)]),
    ("I'm a bit tired today. I'm a huge fan of it.", []),
    ("I like hiking.", [("likes", "hiking", None)]),
    ("I really love jazz, hiking and cooking too", [("likes", v, None) for v in ("jazz", "hiking", "cooking")]),
    ("I enjoy long walks these days", [("likes", "long walks", None)]),
    ("I love it here. I love how you put it.", []),
    ("I don't like olives.", [("dislikes", "olives", None)]),
    ("I hate rain!", [("dislikes", "rain", None)]),
    ("I no longer like coffee since 2024", [("dislikes", "coffee", "2024-01-01")]),
    ("I'm not into board games anymore.", [("dislikes", "board games", None)]),
    ("I speak English and a little Spanish.", [("speaks", "English", None), ("speaks", "Spanish", None)]),
    ("I speak to my boss every day.", []),
    ("I have a dog named Biscuit.", [("has_pet", "dog named Biscuit", None)]),
    ("We adopted a beagle puppy called Pepper in May 2022", [("has_pet", "beagle puppy named Pepper", "2022-05-01")]),
    ("I'd like to book a table. I would like coffee.", []),
    (
        "Since 2021 I have lived in Porto, but I now live in Kyoto",  # the date is another clause's
        [("lives_in", "Kyoto", None)],
    ),
    ("I work at Acme, and I moved to Porto in 2021", [("works_at", "Acme", None), ("lives_in", "Porto", "2021-01-01")]),
    (
        "I work at St. Mary's hospital. I moved to Oslo",
        [("works_at", "St. Mary's hospital", None), ("lives_in", "Oslo", None)],
    ),
    ("I moved to Bergen as of 2025-13-45", [("lives_in", "Bergen", None)]),  # no such day: no date
    ("I\u2019m a pastry chef", [("job_title", "pastry chef", None)]),
]


@pytest.mark.parametrize(("text", "expected"), RULES, ids=[r[0][:40] for r in RULES])
def test_each_rule_finds_its_fact_and_date(text: str, expected: list[tuple[str, str, str | None]]) -> None:
    got = rule_facts(text, "user")
    assert got == tuple(ExtractedFact("user", p, v, day(d) if d else None) for p, v, d in expected)


async def test_rules_read_user_turns_and_named_speakers_with_their_names_as_subjects() -> None:
    texts = [
        ("I live in Oslo.", None, "user"),
        ("I live in Bergen. I moved to Kyoto in 2021.", "Melanie", "user"),
        ("I live in the cloud and I'm a helpful assistant.", None, "assistant"),
        ("I'm a retired teacher.", "Grandpa Joe", "assistant"),  # a named speaker
        ("I live in Narnia.", None, "system"),
        ("I live in Narnia.", "search", "tool"),
    ]
    turns = [turn(text, name, role, n, SAID + timedelta(minutes=n)) for n, (text, name, role) in enumerate(texts)]
    extractor = RulesExtractor()
    got = await extractor.extract("s-1", turns)
    assert got.facts == (  # a fact with no date of its own holds since its turn
        ExtractedFact("user", "lives_in", "Oslo", SAID),
        ExtractedFact("Melanie", "lives_in", "Bergen", SAID + timedelta(minutes=1)),
        ExtractedFact("Melanie", "lives_in", "Kyoto", day("2021-01-01")),
        ExtractedFact("Grandpa Joe", "job_title", "retired teacher", SAID + timedelta(minutes=3)),
    )
    assert (got.model, got.prompt_sha256, got.prompt_tokens, got.completion_tokens) == (
        "rules/v1",
        RULES_SHA256,
        None,
        None,
    )
    assert extractor.prompt_tokens("s-1", turns) == 0 and len(RULES_SHA256) == 64
    assert await extractor.extract("s-2", turns) == got  # deterministic


def test_a_turn_said_at_a_naive_time_is_refused() -> None:
    with pytest.raises(InvalidInput, match="said_at: must be timezone-aware"):
        Turn("e", Position("t", 0, 0), datetime(2025, 1, 1), "user", None, "hi")


# --- the answer's contract --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("2024-03-01", "2024-03-01T00:00:00+00:00"),
        ("2024-03-01T10:00:00", "2024-03-01T10:00:00+00:00"),  # naive: UTC
        ("2024-03-01T10:00:00+02:00", "2024-03-01T08:00:00+00:00"),
        ("2024-03-01T10:00:00Z", "2024-03-01T10:00:00+00:00"),
        ("2024-03", "2024-03-01T00:00:00+00:00"),  # reduced precision: the month's first day
        ("2024", "2024-01-01T00:00:00+00:00"),
        (None, None),
    ],
)
def test_valid_from_is_an_iso_date_or_date_time_in_utc(raw: str | None, expected: str | None) -> None:
    got = parse_valid_from(raw)
    assert (got.isoformat() if got else None) == expected


def test_predicates_become_lower_snake_case_and_strings_are_stripped() -> None:
    assert [snake_case(p) for p in ("Lives In", "worksAt", "job-title", " HAS_PET ")] == [
        "lives_in",
        "works_at",
        "job_title",
        "has_pet",
    ]
    content = json.dumps({"facts": [{"subject": " Ana ", "predicate": "Lives In", "value": " Porto. "}], "note": 1})
    assert parse_facts(content) == (ExtractedFact("Ana", "lives_in", "Porto."),)  # other keys are ignored


def _fact(**change: Any) -> dict[str, Any]:
    return {"subject": "user", "predicate": "likes", "value": "tea", "valid_from": None} | change


BAD = [
    ("I live in Oslo", "content: not JSON (Expecting value: line 1 column 1 (char 0)): 'I live in Oslo'"),
    ("[]", "content: must be a JSON object, got list"),
    ('{"fact": []}', "content: no \"facts\" key, got keys ['fact']"),
    ('{"facts": {}}', "facts: must be a list, got dict"),
    ('{"facts": ["tea"]}', "facts[0]: must be an object, got str"),
    (json.dumps({"facts": [_fact(), _fact(), _fact(value=3)]}), "facts[2].value: must be a non-empty string, got 3"),
    (json.dumps({"facts": [_fact(subject="  ")]}), "facts[0].subject: must be a non-empty string, got '  '"),
    (
        json.dumps({"facts": [{"subject": "a", "value": "b"}]}),
        "facts[0].predicate: must be a non-empty string, got None",
    ),
    (json.dumps({"facts": [_fact(predicate="!!!")]}), "facts[0].predicate: must hold a letter or digit, got '!!!'"),
    (
        json.dumps({"facts": [_fact(valid_from="last May")]}),
        "facts[0].valid_from: must be null or an ISO-8601 date or date-time, got 'last May'",
    ),
    (
        json.dumps({"facts": [_fact(), _fact(valid_from=2024)]}),
        "facts[1].valid_from: must be null or an ISO-8601 date or date-time, got 2024",
    ),
    (
        json.dumps({"facts": [_fact(valid_from="2024-02-30")]}),
        "facts[0].valid_from: must be null or an ISO-8601 date or date-time, got '2024-02-30'",
    ),
    (json.dumps({"facts": [_fact()] * 201}), "facts: 201 facts, at most 200"),
    (json.dumps({"facts": [_fact(value="x" * 1001)]}), "facts[0].value: 1001 characters, at most 1000"),
]


@pytest.mark.parametrize(("raw", "reason"), BAD, ids=[b[1][:50] for b in BAD])
async def test_each_bad_answer_is_an_error_with_its_reason_never_retried(
    model_server: ModelServer, raw: str, reason: str
) -> None:
    model_server.extract_raw = raw
    extractor = OpenAIExtractor(model_server.base_url, "stand-in", backoff=0.01)
    with pytest.raises(ExtractionError) as caught:
        await extractor.extract("s-1", [turn("I like tea")])
    error = caught.value
    assert (error.reason, error.retryable, error.status, error.model) == (reason, False, None, "openai/stand-in")
    assert str(error).startswith(f"openai/stand-in: {reason}; ") and "dead-lettered" in str(error)
    assert model_server.extractions == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'{"id": "x"}', 'the answer has no choices[0].message.content: {"id": "x"}'),
        (b'{"choices": [{"message": {"content": null}}]}', "choices[0].message.content: must be a string, got None"),
        (b"<html>busy</html>", "answered: the answer is not JSON"),
    ],
)
async def test_an_answer_without_content_is_an_error(model_server: ModelServer, body: bytes, reason: str) -> None:
    model_server.extract_body = body
    with pytest.raises(ExtractionError) as caught:
        await OpenAIExtractor(model_server.base_url, "stand-in").extract("s-1", [turn("I like tea")])
    assert reason in caught.value.reason and not caught.value.retryable


# --- OpenAIExtractor against the stand-in -----------------------------------------------------------


async def test_a_good_answer_is_the_scripted_facts_then_the_rules_in_turn_order(model_server: ModelServer) -> None:
    said = datetime(2024, 3, 2, 18, 5, 7, tzinfo=UTC)
    turns = [
        turn("Finally unpacked in Lisbon after the move!", "Caroline", n=0, said_at=said),
        turn("Welcome! How is the new place?", role="assistant", n=1, said_at=said),
        turn("I work at Acme these days.\nAnd I speak Portuguese.", "Caroline", n=2, said_at=said),
    ]
    model_server.facts_by_text[turns[0].content] = [
        {"subject": "Caroline", "predicate": "lives_in", "value": "Lisbon", "valid_from": "2024-03-01"},
        {"subject": "Caroline", "predicate": "Job Title", "value": "nurse"},  # no valid_from: the turn's time
    ]
    extractor = OpenAIExtractor(model_server.base_url, "gpt-4o-mini", temperature=0)
    got = await extractor.extract("s-1", turns)
    assert got.facts == (
        ExtractedFact("Caroline", "lives_in", "Lisbon", day("2024-03-01")),
        ExtractedFact("Caroline", "job_title", "nurse", said),  # the stand-in answers the turn's time, as asked
        ExtractedFact("Caroline", "works_at", "Acme", said),
        ExtractedFact("Caroline", "speaks", "Portuguese", said),
    )
    path, body, headers = model_server.calls[-1]
    assert path == "/v1/chat/completions" and "Authorization" not in headers  # no api_key_env: no key
    assert body["model"] == "gpt-4o-mini" and body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    assert body["messages"] == messages(turns) and body["messages"][0] == {"role": "system", "content": PROMPT}
    assert body["messages"][1]["content"] == (
        "Turns (3):\n"
        "1. [2024-03-02T18:05:07+00:00] Caroline (user): Finally unpacked in Lisbon after the move!\n"
        "2. [2024-03-02T18:05:07+00:00] assistant: Welcome! How is the new place?\n"
        "3. [2024-03-02T18:05:07+00:00] Caroline (user): I work at Acme these days.\n"
        "   And I speak Portuguese."
    )
    words = sum(len(m["content"].split()) for m in body["messages"])
    assert (got.model, got.prompt_tokens) == ("openai/gpt-4o-mini", words)
    assert got.completion_tokens is not None and got.completion_tokens > 10
    assert [t.content for t in transcript_turns(transcript(turns))] == [t.content for t in turns]


async def test_the_prompt_sha_is_of_the_messages_sent_and_stable(model_server: ModelServer) -> None:
    turns = [turn("I live in Oslo", n=0), turn("I like tea", "Ana", n=1)]
    extractor = OpenAIExtractor(model_server.base_url, "stand-in")
    first, again = await extractor.extract("s-1", turns), await extractor.extract("s-2", list(turns))
    sent = model_server.calls[0][1]["messages"]
    canonical = json.dumps(sent, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    assert first.prompt_sha256 == again.prompt_sha256 == hashlib.sha256(canonical).hexdigest()
    assert first.prompt_sha256 == prompt_sha256(messages(turns))
    other = await extractor.extract("s-1", [turns[1], turns[0]])
    assert other.prompt_sha256 != first.prompt_sha256


async def test_nothing_to_extract_asks_nothing(model_server: ModelServer) -> None:
    extractor = OpenAIExtractor(model_server.base_url, "stand-in")
    got = await extractor.extract("s-1", [])
    assert (got.facts, got.prompt_sha256, extractor.prompt_tokens("s-1", [])) == ((), "", 0)
    assert model_server.extractions == 0
    one, two = extractor.prompt_tokens("s", [turn("I live in Oslo")]), extractor.prompt_tokens("s", [turn("a " * 400)])
    assert 0 < one < two


async def test_server_errors_are_retried_then_answered(model_server: ModelServer) -> None:
    model_server.extract_failures = 2
    asked = turn("I like tea")
    got = await OpenAIExtractor(model_server.base_url, "stand-in", backoff=0.01).extract("s-1", [asked])
    assert got.facts == (ExtractedFact("user", "likes", "tea", asked.said_at),)
    assert model_server.extractions == 3


@pytest.mark.parametrize("status", [500, 503, 429])
async def test_server_errors_past_the_retries_are_retryable(model_server: ModelServer, status: int) -> None:
    model_server.extract_status = status
    extractor = OpenAIExtractor(model_server.base_url, "stand-in", retries=2, backoff=0.01)
    with pytest.raises(ExtractionError) as caught:
        await extractor.extract("s-1", [turn("I like tea")])
    assert (caught.value.retryable, caught.value.status) == (True, status)
    assert f"answered HTTP {status}" in caught.value.reason and "tried again later" in str(caught.value)
    assert model_server.extractions == 3


@pytest.mark.parametrize(("status", "hint"), [(400, "dead-lettered"), (401, "extract.api_key_env"), (404, "base_url")])
async def test_client_errors_are_not_retried(model_server: ModelServer, status: int, hint: str) -> None:
    model_server.extract_status = status
    with pytest.raises(ExtractionError) as caught:
        await OpenAIExtractor(model_server.base_url, "stand-in", backoff=0.01).extract("s-1", [turn("I like tea")])
    assert (caught.value.retryable, caught.value.status) == (False, status) and hint in str(caught.value)
    assert model_server.extractions == 1


async def test_an_unreachable_server_is_retryable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # free once closed: nothing listens there
    extractor = OpenAIExtractor(f"http://127.0.0.1:{port}/v1", "stand-in", retries=1, backoff=0.01)
    with pytest.raises(ExtractionError) as caught:
        await extractor.extract("s-1", [turn("I like tea")])
    assert (caught.value.retryable, caught.value.status) == (True, None)
    assert caught.value.reason.startswith(f"cannot reach http://127.0.0.1:{port}/v1/chat/completions: ")


async def test_a_slow_answer_times_out_retryable(model_server: ModelServer) -> None:
    model_server.extract_delay = 0.5
    extractor = OpenAIExtractor(model_server.base_url, "stand-in", timeout=0.1, retries=0)
    with pytest.raises(ExtractionError) as caught:
        await extractor.extract("s-1", [turn("I like tea")])
    assert caught.value.retryable and "timed out" in caught.value.reason


async def test_the_key_comes_from_the_named_variable_at_call_time(
    model_server: ModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HELIX_TEST_EXTRACT_KEY", raising=False)
    extractor = parse_extract(
        {
            "provider": "openai",
            "base_url": model_server.base_url,
            "model": "m",
            "api_key_env": "HELIX_TEST_EXTRACT_KEY",
        },
        "memory.extract",
    )
    with pytest.raises(ExtractionError) as caught:
        await extractor.extract("s-1", [turn("I like tea")])
    assert caught.value.reason == "$HELIX_TEST_EXTRACT_KEY is not set (extract.api_key_env names it)"
    assert not caught.value.retryable and "export HELIX_TEST_EXTRACT_KEY=" in str(caught.value)
    assert model_server.extractions == 0  # nothing was sent
    monkeypatch.setenv("HELIX_TEST_EXTRACT_KEY", "sk-test")
    await extractor.extract("s-1", [turn("I like tea")])
    assert model_server.calls[-1][2]["Authorization"] == "Bearer sk-test"


# --- configuration ----------------------------------------------------------------------------------


def test_parse_extract_builds_each_provider() -> None:
    assert isinstance(parse_extract({"provider": "rules"}, "memory.extract"), RulesExtractor)
    assert parse_extract({}, "memory.extract").model == "rules/v1"  # rules by default
    built = parse_extract(
        {
            "provider": "openai",
            "base_url": "http://127.0.0.1:8000/v1/",
            "model": "gpt-4o-mini",
            "api_key_env": "OPENAI_API_KEY",
            "timeout": 5,
            "temperature": 0.2,
        },
        "memory.extract",
    )
    assert isinstance(built, OpenAIExtractor)
    assert (built.model, built.url, built.api_key_env, built.timeout, built.temperature) == (
        "openai/gpt-4o-mini",
        "http://127.0.0.1:8000/v1/chat/completions",
        "OPENAI_API_KEY",
        5.0,
        0.2,
    )


OPENAI = {"provider": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "gpt-4o-mini"}


@pytest.mark.parametrize(
    ("raw", "field", "problem"),
    [
        (None, "memory.extract", "must be a mapping"),
        ({"provider": "anthropic"}, "memory.extract.provider", "must be openai or rules, got 'anthropic'"),
        ({"provider": "rules", "colour": "red"}, "memory.extract.colour", "unknown key"),
        ({"provider": "rules", "model": "m"}, "memory.extract.model", "option of the openai provider"),
        ({"provider": "openai", "model": "m"}, "memory.extract.base_url", "is required"),
        ({"provider": "openai", "base_url": "http://x"}, "memory.extract.model", "is required"),
        (OPENAI | {"base_url": "ftp://x"}, "memory.extract.base_url", "http(s) URL"),
        (OPENAI | {"base_url": 8000}, "memory.extract.base_url", "non-empty string"),
        (OPENAI | {"model": " "}, "memory.extract.model", "non-empty string"),
        (OPENAI | {"api_key_env": "1-KEY"}, "memory.extract.api_key_env", "environment variable"),
        (OPENAI | {"api_key_env": ["K"]}, "memory.extract.api_key_env", "environment variable"),
        (OPENAI | {"timeout": 0}, "memory.extract.timeout", "positive"),
        (OPENAI | {"temperature": 3}, "memory.extract.temperature", "from 0 to 2"),
        (OPENAI | {"temperature": True}, "memory.extract.temperature", "from 0 to 2"),
        (OPENAI | {"dims": 8}, "memory.extract.dims", "unknown key"),
    ],
)
def test_parse_extract_names_the_bad_key(raw: Any, field: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_extract(raw, "memory.extract")
    assert caught.value.field == field and problem in caught.value.problem


# --- opt-in: a real endpoint ------------------------------------------------------------------------


async def test_a_real_endpoint_answers_the_contract() -> None:
    """HELIX_EXTRACT_BASE_URL and HELIX_EXTRACT_MODEL (and HELIX_EXTRACT_API_KEY_ENV, the name of the
    variable holding its key) run this against a real OpenAI-compatible model."""
    base_url, model = os.environ.get("HELIX_EXTRACT_BASE_URL"), os.environ.get("HELIX_EXTRACT_MODEL")
    if not base_url or not model:
        pytest.skip(
            "opt-in: set HELIX_EXTRACT_BASE_URL and HELIX_EXTRACT_MODEL to ask a real model: allowed to skip, "
            "even under HELIX_REQUIRE_SERVICES=1"
        )
    extractor = OpenAIExtractor(base_url, model, os.environ.get("HELIX_EXTRACT_API_KEY_ENV"))
    turns = [
        turn("Hi! I'm Caroline. I moved to Lisbon in March 2024 and I work as a nurse there.", "Caroline", n=0),
        turn("Lisbon is lovely. How do you like the job?", role="assistant", n=1),
    ]
    got = await extractor.extract("s-1", turns)
    assert got.model == f"openai/{model}" and len(got.prompt_sha256) == 64
    places = [f for f in got.facts if f.predicate == "lives_in"]
    assert places and "Lisbon" in places[0].value and places[0].subject == "Caroline", got.facts
