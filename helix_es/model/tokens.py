"""Token estimates for token-budgeted views, without a tokenizer at run time.

`estimate_tokens` counts what a byte-level BPE tokenizer spends tokens on: runs of letters
(and case changes inside them, as in camelCase), letters (long and rare words split),
digits and runs of digits (BPE vocabularies split numbers into groups of up to three),
punctuation and runs of it, newlines and indentation, and non-ASCII bytes, and weighs
them. The counts are a few big-int operations over the text, so a 1 KB string costs
about 15 µs in CPython: cheap enough for a fold that runs on every add. The plain
`len(text) / 4` heuristic undercounts JSON by about a seventh (quotes, colons, braces and
digits are tokens of their own) and overcounts prose and indented code.

The weights were fitted against OpenAI's cl100k_base on the `fit` half of the corpora in
`bench/tokens.py` (English prose, JSON tool payloads, Python source); on the held-out
half the totals come within 2 % of the real tokenizer's for each kind (see that bench for
the figures), and also of o200k_base's. One text can be off by more: of the held-out texts
of 20 tokens or more, 88 % of prose paragraphs, 99 % of JSON documents and every source file
are within 15 %. Base64 and other random-case strings are undercounted (about 0.6x).
Changing a weight changes what token-window views keep: rebuild them from the log.
"""

from __future__ import annotations

import string

from helix_es.model.message import Message

MAX_TOKENS = 1_000_000
"""Every estimate is capped here: a bound for budgets and sums, never a real message's size
(an event is at most 900 KB, about 300K tokens of even the densest text)."""

MESSAGE_OVERHEAD = 4  # role and the chat format's delimiters, as OpenAI counts ~3-4 per message
NAME_OVERHEAD = 1
TOOL_CALL_OVERHEAD = 3  # the call's framing around its name and JSON arguments

_CHUNK = 1 << 16  # long texts are estimated in slices: bounded memory, and stop once capped


# Each byte becomes one bit of its class, then the whole text is one big int per class:
# `bit_count` counts members, `x & ~(x >> 8)` marks where a run starts (big-endian: `>> 8`
# moves every byte onto the next one). A handful of C-speed int operations per feature.
_LOWER, _UPPER, _DIGIT, _PUNCT, _NEWLINE, _BLANK, _NON_ASCII = (1 << i for i in range(7))


def _classes() -> bytes:
    table = bytearray(_PUNCT for _ in range(256))
    for members, bit in ((string.ascii_lowercase, _LOWER), (string.ascii_uppercase, _UPPER),
                         (string.digits, _DIGIT), ("\n\r", _NEWLINE), (" \t", _BLANK)):  # fmt: skip
        for ch in members:
            table[ord(ch)] = bit
    table[128:] = bytes([_NON_ASCII]) * 128  # the bytes of UTF-8 sequences
    return bytes(table)


_CLASSES = _classes()

# Fitted weights (tokens per count); see the module docstring.
_W_WORD = 0.72  # a run of letters
_W_CASE = 0.57  # a lower-to-upper change inside a run: getUserName is three tokens
_W_LETTER = 0.105  # each letter: long and rare words split into more pieces
_W_DIGIT = 0.38  # each digit: numbers go in groups of up to three
_W_NUMBER = 0.91  # a run of digits
_W_PUNCT = 0.016  # each punctuation character: repeated ones merge ("----" is one token)
_W_PUNCT_RUN = 0.44  # a run of punctuation: `":` and `},{` are one or two tokens
_W_NEWLINE_RUN = 0.81
_W_NEWLINE = 0.031
_W_INDENT = 0.74  # a newline followed by two blanks or more: indentation is a token of its own
_W_NON_ASCII = 0.36  # per UTF-8 byte above 127: a CJK character (3 bytes) is about one token
_W_BLANK = 0.009  # long runs of blanks are single tokens


def _raw(text: str) -> float:
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
    return (
        _W_WORD * (letters & ~(letters >> 8)).bit_count()
        + _W_CASE * ((lower >> 8) & upper).bit_count()
        + _W_LETTER * letters.bit_count()
        + _W_DIGIT * digits.bit_count()
        + _W_NUMBER * (digits & ~(digits >> 8)).bit_count()
        + _W_PUNCT * punct.bit_count()
        + _W_PUNCT_RUN * (punct & ~(punct >> 8)).bit_count()
        + _W_NEWLINE_RUN * (newlines & ~(newlines >> 8)).bit_count()
        + _W_NEWLINE * newlines.bit_count()
        + _W_INDENT * ((newlines >> 16) & (blanks >> 8) & blanks).bit_count()
        + _W_NON_ASCII * ((bits >> 6) & ones).bit_count()
        + _W_BLANK * blanks.bit_count()
    )


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


def _message_tokens(message: Message) -> int:
    total = MESSAGE_OVERHEAD + estimate_tokens(message.content)
    if message.name:
        total += NAME_OVERHEAD + estimate_tokens(message.name)
    for call in message.tool_calls:
        total += TOOL_CALL_OVERHEAD + estimate_tokens(call.name) + estimate_tokens(call.arguments)
    return min(MAX_TOKENS, total)


def message_tokens(message: Message) -> int:
    """Tokens `message` costs in a chat prompt: content, name, each tool call's name and JSON
    arguments, plus a fixed overhead per message (role, delimiters) and per tool call.
    `tool_call_id` and `metadata` are not sent as text to a model and are not counted.
    Capped at `MAX_TOKENS`. Counted once per message object."""
    tokens = message._tokens
    if tokens is None:
        tokens = _message_tokens(message)
        object.__setattr__(message, "_tokens", tokens)
    return tokens
