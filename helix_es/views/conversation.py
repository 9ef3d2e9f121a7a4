"""conversation: the whole history of a session, until it is cleared (or its last `max_length` messages)."""

from __future__ import annotations

from dataclasses import dataclass, field

from helix_es.model.message import Message
from helix_es.views.base import State, View
from helix_es.views.sliding_window import cap_length, check_max_length, max_length_suffix, retract_unpinned
from helix_es.views.units import WHOLE, check_tool_pairs, orphan, pairs_suffix


@dataclass(frozen=True)
class Conversation(View):
    kind = "conversation"
    compacts = True
    max_length: int | None = field(default=None, kw_only=True)  # the seed's LTRIM cap; the first system message stays
    # whole: the cap evicts tool exchanges together. Uncapped, nothing is evicted: the option changes
    # nothing, so it is not part of the name either.
    tool_pairs: str = field(default=WHOLE, kw_only=True)
    # Seconds a Redis-stored session lives after its last write; not part of the name (same fold).
    ttl: float | None = field(default=None, compare=False, kw_only=True)

    def __post_init__(self) -> None:
        check_max_length(self.max_length)
        check_tool_pairs(self.tool_pairs)
        if self.max_length is None:
            object.__setattr__(self, "tool_pairs", WHOLE)  # one uncapped conversation, whatever was asked

    @property
    def name(self) -> str:
        if self.max_length is None:
            return self.kind
        return f"{self.kind}{max_length_suffix(self.max_length)}{pairs_suffix(self.tool_pairs)}"

    @property
    def key_suffix(self) -> str:
        # Uncapped, the plain session key: helix:memory:<namespace>:{<session_id>}
        return "" if self.max_length is None else self.name

    def added(self, state: State, message: Message) -> State:
        if self.max_length is not None and self.tool_pairs == WHOLE and orphan(state, message):
            return state  # its call was evicted: uncapped, the conversation holds all it was given
        return cap_length((*state, message), self.max_length, self.tool_pairs)

    def retracted(self, state: State) -> State:
        # Uncapped, it holds every message: exactly the newest goes. Capped, it evicts as a window does.
        return state[:-1] if self.max_length is None else retract_unpinned(state)
