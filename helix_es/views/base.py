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
messages carry no log positions to forget one by one). It is not one of `restarts` either: it
restarts only the views it names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

from helix_es.model.events import (
    Event,
    MemoryCleared,
    MemoryForgotten,
    MessageAdded,
    MessageRetracted,
    SessionErased,
)
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
        if isinstance(payload, MemoryForgotten) and payload.session and payload.names(self.name):
            return ()  # a policy forgot the session in this view: cleared here, kept on the log
        return state  # event types this view does not use

    @abstractmethod
    def added(self, state: State, message: Message) -> State: ...

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
