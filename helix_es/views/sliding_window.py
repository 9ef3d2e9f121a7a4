"""sliding-window: the last `window_size` messages; the first system message always stays."""

from __future__ import annotations

from dataclasses import dataclass, field

from helix_es.model.errors import ConfigError
from helix_es.model.message import Message
from helix_es.views.base import State, View
from helix_es.views.units import SPLIT, WHOLE, check_tool_pairs, front_cut, newest_unit, orphan, pairs_suffix


def pinned_index(state: State) -> int | None:
    """Index of the first system message, which no window evicts."""
    roles = [m.role for m in state]  # every add of every window asks: faster than map(attrgetter) on slots
    return roles.index("system") if "system" in roles else None


def drop_oldest(state: State, over: int, pin: int | None) -> State:
    """`state` without its `over` oldest messages other than the one at `pin`."""
    if over <= 0:
        return state
    if pin is None:
        return state[over:]
    out = []
    for i, m in enumerate(state):
        if i == pin or over <= 0:
            out.append(m)
        else:
            over -= 1
    return tuple(out)


def others(state: State, pin: int | None) -> State:
    """The messages a window may evict: all but the pinned one."""
    return state if pin is None else (*state[:pin], *state[pin + 1 :])


def drop_units(state: State, over: int, pin: int | None, tool_pairs: str) -> State:
    """`state` without (at least, if whole) its `over` oldest messages other than the one at `pin`."""
    if tool_pairs == WHOLE and over > 0:
        over = front_cut(others(state, pin), over)
    return drop_oldest(state, over, pin)


def cap_length(state: State, max_length: int | None, tool_pairs: str = SPLIT) -> State:
    """At most `max_length` messages, the first system message among them: the oldest others go.
    With `max_length` 1 only the newest message (whole: the newest unit) stays, since the newest
    is always kept; whole, the newest unit stays even when it alone is over the cap."""
    if max_length is None or len(state) <= max_length:
        return state
    if max_length == 1:
        return state[newest_unit(state) :] if tool_pairs == WHOLE else state[-1:]
    return drop_units(state, len(state) - max_length, pinned_index(state), tool_pairs)


def retract_unpinned(state: State) -> State:
    """A window's retraction: its newest message goes, unless that is the pinned system message (the
    window may have evicted messages added after it), which stays."""
    if not state or pinned_index(state) == len(state) - 1:
        return state
    return state[:-1]


def check_max_length(max_length: object) -> None:
    if max_length is not None and (isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1):
        raise ConfigError("max_length", f"must be a whole number >= 1, got {max_length!r}")


def view_suffix(max_length: int | None, tool_pairs: str) -> str:
    """The options part of a window's name: `-max<N>` and `-pairs`."""
    return max_length_suffix(max_length) + pairs_suffix(tool_pairs)


def max_length_suffix(max_length: int | None) -> str:
    """Part of a view's name: a different cap folds differently, so it is another view."""
    return "" if max_length is None else f"-max{max_length}"


@dataclass(frozen=True)
class SlidingWindow(View):
    kind = "sliding-window"
    compacts = True
    window_size: int = 30
    max_length: int | None = field(default=None, kw_only=True)  # caps the list, the pinned message included
    tool_pairs: str = field(default=WHOLE, kw_only=True)  # whole: evict tool exchanges together
    # Seconds a Redis-stored session lives after its last write; not part of the name (same fold).
    ttl: float | None = field(default=None, compare=False, kw_only=True)

    def __post_init__(self) -> None:
        if isinstance(self.window_size, bool) or not isinstance(self.window_size, int) or self.window_size < 1:
            raise ConfigError("window_size", f"must be a whole number >= 1, got {self.window_size!r}")
        check_max_length(self.max_length)
        check_tool_pairs(self.tool_pairs)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.window_size}{view_suffix(self.max_length, self.tool_pairs)}"

    def added(self, state: State, message: Message) -> State:
        if self.tool_pairs == WHOLE and orphan(state, message):
            return state
        new = (*state, message)
        pin = pinned_index(new)
        new = drop_units(new, len(new) - (pin is not None) - self.window_size, pin, self.tool_pairs)
        return cap_length(new, self.max_length, self.tool_pairs)

    def retracted(self, state: State) -> State:
        return retract_unpinned(state)
