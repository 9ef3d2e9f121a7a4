"""The view base classes: a session view folds a tuple of messages; an index view is namespace-wide.

A view's state is the tuple of messages it holds for one session. `fold` is pure and
deterministic, so the embedded mode and the Kafka projectors reach the same state from
the same events, and any view can be thrown away and rebuilt from the log.

A `MessageRetracted` takes back the newest message the view still holds (`retracted`): in the
uncapped conversation exactly the state before that message's add. A view that evicts (windows,
caps, smart, summary) cannot bring an evicted message back: after a retraction it holds one
message fewer, and once retractions reach past what it holds they change nothing in it (it never
takes back its pinned system message, since messages added after that one may be the evicted
ones); later adds refill it. A tool result added again after its call was evicted is not kept
(`units.orphan`). A retraction depends on the state, so it is never one of `restarts`.

A `MemoryForgotten` naming the view with `session` set empties it, as a clear does, in that view
alone: a session view's items are its sessions (a forgetting policy forgets a session whole; its
messages carry no log positions to forget one by one). One whose `ids` name texts (`content_id`: an
erasure of the messages naming a person) drops the messages with those texts, and tool results
whose call went with them. It is not one of `restarts` either: it restarts only the views it names.

A `SessionCompacted` naming the view (conversation and windows; `compacts`) replaces the `covers`
oldest messages it holds, after a leading system prompt, with one system message: the summary, its
metadata `compacted` the event's position (`position_text`). It needs that position, so the fold
step passes it (`compacted`), not `fold`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from helix_es.model.events import (
    Event,
    MemoryCleared,
    MemoryForgotten,
    MessageAdded,
    MessageRetracted,
    Position,
    SessionCompacted,
    SessionErased,
)
from helix_es.model.forget_events import CONTENT, content_id
from helix_es.model.message import Message

State = tuple[Message, ...]


class View(ABC):
    """One way of folding a session's events. Subclasses are frozen dataclasses of their options."""

    kind: ClassVar[str]  # the seed's YAML `type`
    # Stores keep the views of one family together (PostgreSQL: in one pair of tables).
    family: ClassVar[str] = "view"
    # Payload types whose fold does not depend on the state before (a clear): `fold_batch` starts a
    # session's batch at the last of them. A view that overrides `fold` names its own (else none).
    restarts: ClassVar[tuple[type, ...]] = (MemoryCleared, SessionErased)

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if "fold" in cls.__dict__ and "restarts" not in cls.__dict__:
            cls.restarts = ()

    @property
    def name(self) -> str:
        """Unique per kind and options: names the consumer group, Redis key suffix and checkpoint."""
        return self.kind

    @property
    def key_suffix(self) -> str:
        return self.name

    def fold(self, state: State, event: Event) -> State:
        payload = event.payload
        if isinstance(payload, (MemoryCleared, SessionErased)):  # a forgotten session is cleared too
            return ()
        if isinstance(payload, MessageAdded):
            return self.added(state, payload.message)
        if isinstance(payload, MessageRetracted):
            return self.retracted(state)
        if isinstance(payload, MemoryForgotten) and payload.names(self.name):
            if payload.session:
                return ()  # a policy forgot the session in this view: cleared here, kept on the log
            return without(state, payload.ids) if payload.ids else state
        return state  # event types this view does not use

    @abstractmethod
    def added(self, state: State, message: Message) -> State: ...

    compacts: ClassVar[bool] = False  # conversation and windows: `SessionCompacted` folds (see module doc)

    def compacted(self, state: State, compaction: SessionCompacted, position: Position) -> State:
        """The state with the messages `compaction` stands for replaced by its summary."""
        if not self.compacts or compaction.view.partition("@")[0] != self.name.partition("@")[0]:
            return state
        start = compaction_start(state)
        if compaction.covers < 1 or start >= len(state):
            return state
        summary = Message("system", compaction.summary, metadata={COMPACTED: position_text(position)})
        return (*state[:start], summary, *state[start + compaction.covers :])

    def retracted(self, state: State) -> State:
        """The state without its newest message: views keep messages in add order, so the last one. A
        tool exchange is left as it was before the retracted result or call was added. Views that
        evict override this (`sliding_window.retract_unpinned`)."""
        return state[:-1]

    def render(self, state: State) -> list[Message]:
        return list(state)

    def search(self, state: State, query: str, limit: int) -> list[Message]:
        """Case-insensitive substring match, oldest first, at most `limit`."""
        needle = query.casefold()
        hits = [m for m in self.render(state) if needle in m.content.casefold()]
        return hits[:limit]


class IndexView(ABC):
    """A namespace-wide view whose store answers `get`/`search` itself (long-term, vector).

    It has no per-session fold over a message list; `helix_es.projection.factory` opens its
    projection, whose store answers queries.
    Subclasses are frozen dataclasses of their options.
    """

    kind: ClassVar[str]
    # The `StoreKind` adapter its store must offer (`vectors`, `items`, `checkpoints`); None: any store.
    adapter: ClassVar[str | None] = None

    @property
    def name(self) -> str:
        return self.kind


COMPACTED = "compacted"  # metadata of a compaction's summary message: the SessionCompacted's position


def compaction_start(state: Sequence[Message]) -> int:
    """Where a compaction's range starts: after a leading system prompt (it stays, pinned in windows)."""
    first = state[0] if state else None
    return 1 if first is not None and first.role == "system" and COMPACTED not in first.metadata else 0


def position_text(position: Position) -> str:
    """`topic:partition:offset`, as `compacted` metadata names a position (`parse_position` reads it)."""
    return f"{position.topic}:{position.partition}:{position.offset}"


def parse_position(text: str) -> Position:
    """The position `position_text` wrote; `ValueError` for anything else."""
    topic, partition, offset = text.rsplit(":", 2)
    if not topic:
        raise ValueError(f"no topic in {text!r}")
    return Position(topic, int(partition), int(offset))


def without(state: State, ids: Sequence[str]) -> State:
    """`state` without the messages whose text `ids` name (`content_id`), nor results of calls that went."""
    named = {i for i in ids if i.startswith(CONTENT)}
    if not named:
        return state
    kept = [m for m in state if content_id(m.content) not in named]
    calls = {c.id for m in kept for c in m.tool_calls}
    return tuple(m for m in kept if m.role != "tool" or m.tool_call_id in calls)
