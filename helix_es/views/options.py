"""The views a memory config may name: each YAML `type`, the keys it takes, and its builder.

A builder reads a view's options and raises `ConfigError` naming the key (`memory.window_size`);
`helix_es.config` looks types up here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from helix_es.model.errors import ConfigError
from helix_es.model.options import whole_number
from helix_es.model.tokenizers import ESTIMATE
from helix_es.views.base import IndexView, View
from helix_es.views.checkpoints import Checkpoints
from helix_es.views.conversation import Conversation
from helix_es.views.facts import FACTS_KEYS, facts_view
from helix_es.views.items import Items
from helix_es.views.long_term import LONG_TERM_KEYS, long_term, sql_long_term
from helix_es.views.sliding_window import SlidingWindow
from helix_es.views.smart import DEFAULT_TOKENS, Smart
from helix_es.views.summary import Summary
from helix_es.views.token_window import TokenWindow, check_exact
from helix_es.views.units import TOOL_PAIRS, WHOLE
from helix_es.views.vector import Vector

ViewFactory = Callable[[Mapping[str, Any], str], View | IndexView]


def _max_length(options: Mapping[str, Any], where: str) -> int | None:
    """The seed's max-length (LTRIM) cap, folded into the view so every store agrees."""
    value = options.get("max_length")
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"{where}.max_length", f"must be a whole number >= 1, got {value!r}")
    return value


def _tool_pairs(options: Mapping[str, Any], where: str) -> str:
    """`tool_pairs: whole` (default) evicts tool exchanges together; `split` is the seed's literal cut."""
    value = options.get("tool_pairs", WHOLE)
    if value not in TOOL_PAIRS:
        raise ConfigError(f"{where}.tool_pairs", f"must be one of {', '.join(TOOL_PAIRS)}, got {value!r}")
    return str(value)


def _tokenizer(options: Mapping[str, Any], where: str) -> str:
    try:  # estimate (default) | cl100k_base | o200k_base, and an exact one must be installed
        return check_exact(options.get("tokenizer", ESTIMATE))
    except ConfigError as exc:
        raise ConfigError(f"{where}.tokenizer", exc.problem) from None


def _conversation(options: Mapping[str, Any], where: str) -> View:
    return Conversation(max_length=_max_length(options, where), tool_pairs=_tool_pairs(options, where))


def _sliding_window(options: Mapping[str, Any], where: str) -> View:
    size = whole_number(options, "window_size", where, 30)
    if size < 1:
        raise ConfigError(f"{where}.window_size", f"must be >= 1, got {size}")
    return SlidingWindow(size, max_length=_max_length(options, where), tool_pairs=_tool_pairs(options, where))


def _token_window(options: Mapping[str, Any], where: str) -> View:
    if "max_tokens" not in options:
        raise ConfigError(f"{where}.max_tokens", "missing: a token-window needs its budget, e.g. max_tokens: 4000")
    size = whole_number(options, "max_tokens", where, 0)
    if size < 1:
        raise ConfigError(f"{where}.max_tokens", f"must be >= 1, got {size}")
    return TokenWindow(
        size,
        max_length=_max_length(options, where),
        tool_pairs=_tool_pairs(options, where),
        tokenizer=_tokenizer(options, where),
    )


VIEW_TYPES: dict[str, ViewFactory] = {
    "conversation": _conversation,
    "sliding-window": _sliding_window,
    "token-window": _token_window,
}
VIEW_KEYS: dict[str, set[str]] = {
    "conversation": {"max_length", "tool_pairs"},
    "sliding-window": {"window_size", "max_length", "tool_pairs"},
    "token-window": {"max_tokens", "max_length", "tool_pairs", "tokenizer"},
}
VIEW_TYPES["vector"] = Vector.from_config  # search-only; store: memory | postgres
VIEW_KEYS["vector"] = {"top_k", "embed", "search"}
# Namespace-wide (helix_es.views.long_term); sql-long-term is the seed's name for it in PostgreSQL.
VIEW_TYPES["long-term"] = long_term
VIEW_TYPES["sql-long-term"] = sql_long_term
VIEW_KEYS["long-term"] = set(LONG_TERM_KEYS)
VIEW_KEYS["sql-long-term"] = set(LONG_TERM_KEYS)
# The `store:` mapping of a config (helix_es.integrations.langgraph.HelixStore): LangGraph store items.
VIEW_TYPES["langgraph-store"] = Items.from_config
VIEW_KEYS["langgraph-store"] = {"index"}
# The `checkpoints:` mapping (helix_es.integrations.langgraph.HelixSaver): LangGraph checkpoints.
VIEW_TYPES["langgraph-checkpoints"] = Checkpoints.from_config
VIEW_KEYS["langgraph-checkpoints"] = {"encryption"}
DEFAULT_STORES: dict[str, str] = {"sql-long-term": "postgres"}  # a type's store when `store:` is left out


def _summary(options: Mapping[str, Any], where: str) -> View:
    size = whole_number(options, "max_messages", where, 20)
    if size < 2:
        raise ConfigError(f"{where}.max_messages", f"must be >= 2, got {size}")
    return Summary(size, tool_pairs=_tool_pairs(options, where))


def _smart(options: Mapping[str, Any], where: str) -> View:
    budget = whole_number(options, "max_tokens", where, 0)
    if budget < 0:
        raise ConfigError(f"{where}.max_tokens", f"must be >= 0 (0 means {DEFAULT_TOKENS}), got {budget}")
    return Smart(budget, tokenizer=_tokenizer(options, where))


VIEW_TYPES["smart"] = VIEW_TYPES["code"] = _smart  # `code` is the seed's older name
VIEW_KEYS["smart"] = VIEW_KEYS["code"] = {"max_tokens", "tokenizer"}
VIEW_TYPES["summary"] = _summary
VIEW_KEYS["summary"] = {"max_messages", "summariser", "tool_pairs"}
# Namespace-wide knowledge (helix_es.views.facts): facts a worker extracts, kept as rows.
VIEW_TYPES["facts"] = facts_view
VIEW_KEYS["facts"] = set(FACTS_KEYS)
# Compaction (`SessionCompacted`): a summary stands for the oldest messages of a conversation or window.
COMPACTING = ("conversation", "sliding-window", "token-window")
for _kind in COMPACTING:
    VIEW_KEYS[_kind] = {*VIEW_KEYS[_kind], "summariser", "compact_at_tokens"}
