"""token-window: the newest messages that fit in `max_tokens`; the first system message always stays.

Like sliding-window, but the window is measured in tokens (`helix_es.tokens.message_tokens`,
an estimate of what a chat model is charged). The first system message is kept and its
tokens do not count. The oldest other messages are dropped until the rest fits; the newest
(other than the pinned one) always stays, even if it alone is over the budget, so an `add`
is never invisible.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helix_es.errors import ConfigError
from helix_es.message import Message
from helix_es.tokens import message_tokens
from helix_es.views import State, View
from helix_es.views.sliding_window import cap_length, check_max_length, max_length_suffix, pinned_index


@dataclass(frozen=True)
class TokenWindow(View):
    kind = "token-window"
    max_tokens: int
    max_length: int | None = field(default=None, kw_only=True)  # caps the list, the pinned message included
    # Seconds a Redis-stored session lives after its last write; not part of the name (same fold).
    ttl: float | None = field(default=None, compare=False, kw_only=True)

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise ConfigError("max_tokens", f"must be a whole number >= 1, got {self.max_tokens!r}")
        check_max_length(self.max_length)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.max_tokens}{max_length_suffix(self.max_length)}"

    def added(self, state: State, message: Message) -> State:
        new = (*state, message)
        pin = pinned_index(new)
        newest = len(new) - 1 if pin != len(new) - 1 else len(new) - 2
        oldest_kept = len(new)
        used = 0
        # Newest first: the window is the longest run of recent messages within the budget.
        for i in range(newest, -1, -1):
            if i == pin:
                continue
            used += message_tokens(new[i])
            if used > self.max_tokens and i != newest:
                break
            oldest_kept = i
        if oldest_kept > (pin == 0):  # something before `oldest_kept` other than the pin goes
            new = tuple(m for i, m in enumerate(new) if i == pin or i >= oldest_kept)
        return cap_length(new, self.max_length)

    def tokens(self, state: State) -> int:
        """What the window's messages count against `max_tokens` (the pinned system message not)."""
        pin = pinned_index(state)
        return sum(message_tokens(m) for i, m in enumerate(state) if i != pin)
