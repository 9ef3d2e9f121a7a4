"""Token estimates for token-budgeted views, without a tokenizer at run time.

`estimate_tokens` counts what a byte-level BPE tokenizer spends tokens on (`FEATURES`): runs of
letters, case changes and capitals, runs of digits and each further group of three digits in
them (BPE vocabularies split numbers so), punctuation and runs of it, escapes, newlines, runs of
blanks and a blank before a digit (`, 2` is three tokens), and non-ASCII bytes, and weighs them.
The counts are a few big-int operations over the text, so 1 KB costs about 20-25 µs in
CPython: cheap enough for a fold that runs on every add. The plain `len(text) / 4` heuristic
undercounts JSON (quotes, colons, braces and digits are tokens of their own; dense numeric JSON
by half) and overcounts prose and code.

The weights (`VERSION` 3) were fitted against OpenAI's cl100k_base on the `fit` corpora of
`bench/token_corpora.py` (`python bench/tokens.py --fit`). On its held-out `eval` corpora,
from other sources and other generators, the totals come within 5 % of cl100k_base's for every
kind: prose 1.006, code 1.011, pretty-printed API JSON 0.999, compact JSON 1.015, dense numeric
JSON 0.985, tool-call arguments 1.029, compact cloud API JSON (PascalCase keys, ARNs, resource
ids) 1.043, JSON dense with random-case strings (API keys, base64, JWTs) 0.993 (and within 4 %
of o200k_base's). Version 2 gave the last 0.74: it weighed a case change at 0.6 tokens and each
capital alike, where random case changes every few letters; version 3 weighs case changes at 2
and capitals after capitals. One text can be off by more: 80 % of the held-out texts of 20
tokens or more are within 0.91-1.08 of the real count. Changing a weight changes what
token-window and smart views keep, so it bumps `VERSION`, which is part of their names.
"""

from __future__ import annotations

import hashlib
import operator
import string
from collections.abc import Callable
from functools import cache

from helix_es.model.message import SEALED_OVERHEAD, SEALED_PREFIX, Message
from helix_es.model.tokenizers import ESTIMATE, counter

VERSION = 3
"""Of the weights: estimate views are named `-est3`, so a store built by other weights is not reused."""

MAX_TOKENS = 1_000_000
"""Every estimate is capped here: a bound for budgets and sums, never a real message's size
(an event is at most 900 KB, about 300K tokens of even the densest text)."""

MESSAGE_OVERHEAD = 4  # role and the chat format's delimiters, as OpenAI counts ~3-4 per message
NAME_OVERHEAD = 1
TOOL_CALL_OVERHEAD = 3  # the call's framing around its name and JSON arguments

_EXACT_CACHE = 1 << 16  # texts whose exact count is remembered (16-byte digests: ~10 MB)
_CHUNK = 1 << 16  # long texts are estimated in slices: bounded memory, and stop once capped


# Each byte becomes one bit of its class, then the whole text is one big int per class:
# `bit_count` counts members, `x & ~(x >> 8)` marks where a run starts (big-endian: `>> 8`
# moves every byte onto the next one). A handful of C-speed int operations per feature.
_LOWER, _UPPER, _DIGIT, _PUNCT, _NEWLINE, _BLANK, _NON_ASCII, _BACKSLASH = (1 << i for i in range(8))


def _classes() -> bytes:
    table = bytearray(_PUNCT for _ in range(256))
    for members, bit in ((string.ascii_lowercase, _LOWER), (string.ascii_uppercase, _UPPER),
                         (string.digits, _DIGIT), ("\n\r", _NEWLINE), (" \t", _BLANK)):  # fmt: skip
        for ch in members:
            table[ord(ch)] = bit
    table[ord("\\")] = _PUNCT | _BACKSLASH  # a JSON or regex escape: `\\n` splits the letters after it
    table[128:] = bytes([_NON_ASCII]) * 128  # the bytes of UTF-8 sequences
    return bytes(table)


_CLASSES = _classes()

# What each weight counts, in `_counts`' order, and its fitted weight (tokens per count).
FEATURES = (
    "word",  # a run of letters
    "case",  # a lower-to-upper change inside a run: getUserName is three tokens, random case (keys, base64) more
    "letter",  # each letter: long and rare words split into more pieces
    "caps",  # a capital after a capital: all-caps words and random upper case split finely
    "number",  # a run of digits: one token for up to three digits,
    "number_group",  # and one more for each three after those (up to 18 digits)
    "punct",  # each punctuation character: repeated ones merge ("----" is one token)
    "punct_run",  # a run of punctuation: `":` and `},{` are one or two tokens
    "escape",  # a backslash before a letter
    "newline_run",  # a run of newlines (with the indentation after it, one or two tokens)
    "blank",  # long runs of blanks are single tokens
    "blank_run",  # a run of two blanks or more
    "blank_digit",  # a blank before a digit is a token of its own (`, 2`)
    "non_ascii",  # per UTF-8 byte above 127: a CJK character (3 bytes) is about one token
)
WEIGHTS: tuple[float, ...] = (
    0.968, 2.005, 0.01, 0.178, 1.262, 1.074, 0.09,
    0.554, 1.115, 1.166, 0.043, 0.0, 1.0, 0.36,
)  # fmt: skip


def _counts(text: str) -> tuple[int, ...]:
    """How often each of `FEATURES` occurs in `text`."""
    data = text.encode("utf-8", "surrogatepass").translate(_CLASSES)
    bits = int.from_bytes(data, "big")
    ones = int.from_bytes(b"\x01" * len(data), "big")
    lower = bits & ones
    upper = (bits >> 1) & ones
    letters = lower | upper
    digits = (bits >> 2) & ones
    punct = (bits >> 3) & ones
    newlines = (bits >> 4) & ones
    blanks = (bits >> 5) & ones
    # `x >> 8` puts each byte's bit on the next byte (the one before it looks back), `x << 8` on
    # the byte before it (looks ahead).
    number = digits & ~(digits >> 8)
    # Runs with a fourth, seventh, ... digit: each starts another group of three.
    groups = 0
    longer = number
    for k in range(3, 18, 3):
        longer &= (digits << 8 * (k - 2)) & (digits << 8 * (k - 1)) & (digits << 8 * k)
        if not longer:
            break
        groups += longer.bit_count()
    blank_run = blanks & ~(blanks >> 8) & (blanks << 8)
    return (
        (letters & ~(letters >> 8)).bit_count(),
        ((lower >> 8) & upper).bit_count(),
        letters.bit_count(),
        (upper & (upper >> 8)).bit_count(),
        number.bit_count(),
        groups,
        punct.bit_count(),
        (punct & ~(punct >> 8)).bit_count(),
        (((bits >> 7) & ones) & (letters << 8)).bit_count(),
        (newlines & ~(newlines >> 8)).bit_count(),
        blanks.bit_count(),
        blank_run.bit_count(),
        (blanks & (digits << 8)).bit_count(),
        ((bits >> 6) & ones).bit_count(),
    )


def _raw(text: str) -> float:
    return float(sum(map(operator.mul, WEIGHTS, _counts(text))))


def estimate_tokens(text: str) -> int:
    """About as many tokens as cl100k_base gives `text`: 0 for "", at least 1 otherwise,
    at most `MAX_TOKENS` (1,000,000). Pure and deterministic: folds may depend on it."""
    if not text:
        return 0
    if len(text) <= _CHUNK:
        total = _raw(text)
    else:
        total = 0.0
        for start in range(0, len(text), _CHUNK):
            total += _raw(text[start : start + _CHUNK])
            if total >= MAX_TOKENS:
                break
    return min(MAX_TOKENS, max(1, int(total + 0.5)))


def sealed_tokens(text: str) -> int | None:
    """Tokens of a text the encryption middleware sealed (None if it is not sealed): a quarter per
    byte of what was written, known from the envelope's length. Counting the ciphertext itself would
    depend on its random nonce, so one deployment's window would keep what another's drops."""
    body = text[1:-1] if text.startswith('"' + SEALED_PREFIX) and text.endswith('"') else text  # tool arguments
    if not body.startswith(SEALED_PREFIX):
        return None
    _, sep, encoded = body[len(SEALED_PREFIX) :].partition(":")
    if not sep:
        return None
    plain = len(encoded) * 3 // 4 - encoded[-2:].count("=") - SEALED_OVERHEAD
    return max(0, -(-plain // 4))


def _message_tokens(message: Message, count: Callable[[str], int]) -> int:
    def counted(text: str) -> int:
        sealed = sealed_tokens(text) if text.startswith((SEALED_PREFIX, '"' + SEALED_PREFIX)) else None
        return count(text) if sealed is None else sealed

    total = MESSAGE_OVERHEAD + counted(message.content)
    if message.name:
        total += NAME_OVERHEAD + counted(message.name)
    for call in message.tool_calls:
        total += TOOL_CALL_OVERHEAD + counted(call.name) + counted(call.arguments)
    return min(MAX_TOKENS, total)


@cache
def _exact(tokenizer: str) -> Callable[[str], int]:
    """A counter of `tokenizer` that remembers recent texts by digest: a window recounts every
    message it holds on each add, and a digest keeps the memory small whatever the texts' size."""
    count = counter(tokenizer)
    seen: dict[bytes, int] = {}

    def cached(text: str) -> int:
        if not text:
            return 0
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        tokens = seen.get(key)
        if tokens is None:
            if len(seen) >= _EXACT_CACHE:
                seen.clear()  # a bound, not an LRU: recounting is correct, only slower
            tokens = seen[key] = min(MAX_TOKENS, count(text))
        return tokens

    return cached


def message_tokens(message: Message, tokenizer: str = ESTIMATE) -> int:
    """Tokens `message` costs in a chat prompt: content, name, each tool call's name and JSON
    arguments, plus a fixed overhead per message (role, delimiters) and per tool call.
    `tool_call_id` and `metadata` are not sent as text to a model and are not counted.
    Capped at `MAX_TOKENS`. `tokenizer` is `estimate` (`estimate_tokens`, counted once per
    message object) or an exact one of `helix_es.model.tokenizers` (`cl100k_base`, `o200k_base`)."""
    if tokenizer != ESTIMATE:
        return _message_tokens(message, _exact(tokenizer))
    tokens = message._tokens
    if tokens is None:
        tokens = _message_tokens(message, estimate_tokens)
        object.__setattr__(message, "_tokens", tokens)
    return tokens
