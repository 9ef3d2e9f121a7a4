"""summary: past `max_messages`, the oldest half is folded into a running summary by a summariser.

The state is a header (a system message holding the summary text, the epoch and how many
messages it covers) followed by the recent messages. The fold never calls a model: the
projection asks the summariser when the view is live and appends its answer to the log as
a `SummaryRecorded` event, which this fold applies, so a rebuild replays recorded summaries.

An erasure's `MemoryForgotten` drops the recent messages its `ids` name by text, and the summary's
text too when they name it (the summary then stands for nothing: the next one starts afresh).
A retraction takes back the newest recent message; one already folded into the summary stays in
its text (with no recent message left, a retraction changes nothing). A summary asked for before
retractions reached into the messages it covers still covers them when it arrives.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from helix_es.model.errors import ConfigError
from helix_es.model.events import (
    Event,
    MemoryCleared,
    MemoryForgotten,
    MessageAdded,
    MessageRetracted,
    SessionErased,
    SummaryRecorded,
)
from helix_es.model.message import Message
from helix_es.views.base import State, View, without
from helix_es.views.units import WHOLE, check_tool_pairs, front_cut, orphan, pairs_suffix

EPOCH = "helix.summary.epoch"  # event id of the session's last clear (or erasure): older summaries are void
COVERS = "helix.summary.covers"  # messages since that clear the summary stands for
PREFIX = "Summary of the earlier conversation:\n"


@dataclass(frozen=True, slots=True)
class Header:
    epoch: str = ""
    covers: int = 0
    text: str = ""

    def message(self) -> Message:
        return Message("system", self.text, metadata={EPOCH: self.epoch, COVERS: str(self.covers)})


def split(state: State) -> tuple[Header, State]:
    if not state:
        return Header(), ()
    head = state[0]
    return Header(head.metadata[EPOCH], int(head.metadata[COVERS]), head.content), state[1:]


@dataclass(frozen=True)
class Summary(View):
    kind = "summary"
    family = "summary"
    max_messages: int = 20
    # whole: the oldest half ends on an exchange's boundary. The name differs, and so does the
    # view of the SummaryRecorded events, so summaries recorded for one rule never apply to the other.
    tool_pairs: str = field(default=WHOLE, kw_only=True)

    def __post_init__(self) -> None:
        if isinstance(self.max_messages, bool) or not isinstance(self.max_messages, int) or self.max_messages < 2:
            raise ConfigError("max_messages", f"must be a whole number >= 2, got {self.max_messages!r}")
        check_tool_pairs(self.tool_pairs)

    @property
    def name(self) -> str:
        return f"{self.kind}-{self.max_messages}{pairs_suffix(self.tool_pairs)}"

    restarts = (MemoryCleared, SessionErased)  # a new epoch, whatever the state: see `fold`

    def fold(self, state: State, event: Event) -> State:
        header, recent = split(state)
        payload = event.payload
        if isinstance(payload, (MemoryCleared, SessionErased)) or (
            isinstance(payload, MemoryForgotten) and payload.session and payload.names(self.name)
        ):
            # An erasure or a forgetting opens a new epoch as a clear does: summaries asked for before it are void.
            return (Header(epoch=str(event.event_id)).message(),)
        if isinstance(payload, MessageAdded):
            if self.tool_pairs == WHOLE and orphan(recent, payload.message):
                return state  # its call is in the summary now
            return (header.message(), *recent, payload.message)
        if isinstance(payload, MessageRetracted):
            return (header.message(), *recent[:-1]) if recent else state
        if isinstance(payload, MemoryForgotten) and payload.ids and payload.names(self.name):
            if header.text and without((header.message(),), payload.ids) == ():  # a summary naming the erased
                header = Header(header.epoch, header.covers)  # what it covered stays covered, its text goes
            return (header.message(), *without(recent, payload.ids))  # an erasure's messages, by text
        if (
            isinstance(payload, SummaryRecorded)
            and payload.view == self.name
            and payload.epoch == header.epoch
            and payload.covers > header.covers  # a repeated or older summary changes nothing
        ):
            gone = payload.covers - header.covers
            return (Header(header.epoch, payload.covers, payload.text).message(), *recent[gone:])
        return state

    def added(self, state: State, message: Message) -> State:
        raise NotImplementedError("summary folds whole events")  # pragma: no cover

    def due(self, state: State) -> tuple[Header, State] | None:
        """When a summary is due: the header now, and the oldest half it must fold in."""
        header, recent = split(state)
        gone = self.oldest_half(recent)
        return (header, recent[:gone]) if gone else None

    def oldest_half(self, open_: Sequence[Message]) -> int:
        """How many of the messages no summary covers yet the next summary folds in (0: none due).
        Whole, at least half of them in whole units, never the newest unit (so maybe none yet)."""
        if len(open_) <= self.max_messages:
            return 0
        half = len(open_) // 2
        return front_cut(open_, half) if self.tool_pairs == WHOLE else half

    def render(self, state: State) -> list[Message]:
        header, recent = split(state)
        if not header.text:
            return list(recent)
        return [Message("system", PREFIX + header.text, metadata={"helix.summary": "true"}), *recent]
