"""token-window: the newest messages that fit in `max_tokens`; the first system message always stays.

Like sliding-window, but the window is measured in tokens (`helix_es.model.tokens.message_tokens`:
what a chat model is charged, estimated, or exact with `tokenizer: cl100k_base | o200k_base`).
The first system message is kept and its tokens do not count. The oldest other messages are
dropped until the rest fits; the newest (other than the pinned one) always stays, even if it
alone is over the budget, so an `add` is never invisible.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate

from helix_es.model.errors import ConfigError
from helix_es.model.message import Message
from helix_es.model.tokenizers import ESTIMATE, check_tokenizer, encoding
from helix_es.model.tokens import VERSION, message_tokens
from helix_es.views.base import State, View
from helix_es.views.sliding_window import (
    cap_length,
    check_max_length,
    others,
    pinned_index,
    retract_unpinned,
    view_suffix,
)
from helix_es.views.units import WHOLE, check_tool_pairs, front_cut, orphan

SUFFIXES = {"cl100k_base": "-cl100k", "o200k_base": "-o200k"}


def tokenizer_suffix(tokenizer: str) -> str:
    """Part of a token view's name: other counting rules keep other messages, so another view.
    Estimate views carry the estimator's weights' version (`-est3`): a refit renames them."""
    return SUFFIXES.get(tokenizer, f"-est{VERSION}")


def check_exact(tokenizer: object) -> str:
    """`tokenizer`, or ConfigError (field `tokenizer`) if it is unknown or an exact one is not
    installed: at configuration, not at the first add."""
    if check_tokenizer(tokenizer) != ESTIMATE:
        encoding(tokenizer)
    return str(tokenizer)


@dataclass(frozen=True)
class TokenWindow(View):
    kind = "token-window"
    compacts = True
    max_tokens: int
    max_length: int | None = field(default=None, kw_only=True)  # caps the list, the pinned message included
    tool_pairs: str = field(default=WHOLE, kw_only=True)  # whole: evict tool exchanges together
    tokenizer: str = field(default=ESTIMATE, kw_only=True)  # estimate | cl100k_base | o200k_base
    # Seconds a Redis-stored session lives after its last write; not part of the name (same fold).
    ttl: float | None = field(default=None, compare=False, kw_only=True)

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError("max_tokens", f"must be a whole number >= 1, got {self.max_tokens!r}")
        check_max_length(self.max_length)
        check_tool_pairs(self.tool_pairs)
        check_exact(self.tokenizer)

    @property
    def name(self) -> str:
        # The tokenizer qualifies the budget: token-window-4000-cl100k-max50-pairs.
        options = tokenizer_suffix(self.tokenizer) + view_suffix(self.max_length, self.tool_pairs)
        return f"{self.kind}-{self.max_tokens}{options}"

    def added(self, state: State, message: Message) -> State:
        if self.tool_pairs == WHOLE and orphan(state, message):
            return state
        new = (*state, message)
        pin = pinned_index(new)
        newest = len(new) - 1 if pin != len(new) - 1 else len(new) - 2
        if newest < 0:
            return cap_length(new, self.max_length, self.tool_pairs)
        if self.tokenizer == ESTIMATE:
            counts = [m._tokens or message_tokens(m) for m in new[: newest + 1]]  # counted once per message
        else:
            counts = [message_tokens(m, self.tokenizer) for m in new[: newest + 1]]
        if pin is not None and pin <= newest:
            counts[pin] = 0  # the pinned message does not count
        # Newest first: the window is the longest run of recent messages within the budget, and the
        # newest always stays. Running sums never fall, so bisect finds where the budget runs out.
        fits = max(1, bisect_right(list(accumulate(reversed(counts))), self.max_tokens))
        oldest_kept = newest + 1 - fits
        if self.tool_pairs == WHOLE and oldest_kept > 0:
            # The same cut, moved later to a unit boundary (fewer tokens: still within budget),
            # counted among the others since the pinned message never goes.
            before_pin = pin is not None and pin < oldest_kept
            cut = front_cut(others(new, pin), oldest_kept - before_pin)
            oldest_kept = cut + (pin is not None and pin <= cut)  # back to an index of `new`
        if oldest_kept > 0:
            new = (new[pin], *new[oldest_kept:]) if pin is not None and pin < oldest_kept else new[oldest_kept:]
        return cap_length(new, self.max_length, self.tool_pairs)

    def retracted(self, state: State) -> State:
        return retract_unpinned(state)

    def tokens(self, state: State) -> int:
        """What the window's messages count against `max_tokens` (the pinned system message not)."""
        pin = pinned_index(state)
        return sum(message_tokens(m, self.tokenizer) for i, m in enumerate(state) if i != pin)
