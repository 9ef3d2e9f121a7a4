"""sliding-window: the last `window_size` messages; the first system message always stays."""

from __future__ import annotations

from dataclasses import dataclass

from helix_es.errors import ConfigError
from helix_es.message import Message
from helix_es.views import State, View


def pinned_index(state: State) -> int | None:
    """Index of the first system message, which no window evicts."""
    return next((i for i, m in enumerate(state) if m.role == "system"), None)


@dataclass(frozen=True)
class SlidingWindow(View):
    kind = "sliding-window"
    window_size: int = 30

    def __post_init__(self) -> None:
        if isinstance(self.window_size, bool) or not isinstance(self.window_size, int) or self.window_size < 1:
            raise ConfigError("window_size", f"must be a whole number >= 1, got {self.window_size!r}")

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.window_size}"

    def added(self, state: State, message: Message) -> State:
        new = (*state, message)
        pin = pinned_index(new)
        over = len(new) - (pin is not None) - self.window_size
        if over <= 0:
            return new
        if pin is None:
            return new[over:]
        # Drop the `over` oldest messages other than the pinned one.
        out = []
        for i, m in enumerate(new):
            if i == pin or over <= 0:
                out.append(m)
            else:
                over -= 1
        return tuple(out)
