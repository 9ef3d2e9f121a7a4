"""Forgetting, compaction and erasure on the log (schema v10).

A view forgets by folding a recorded decision, never by deleting on its own: the policy worker (or
an erasure) appends `MemoryForgotten`, so audit says why an item left and a rebuild forgets the
same items. The events that wrote the items stay on the log: forgetting is not erasure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

POLICIES = ("max_age", "inactive_for", "budget", "ttl", "erasure")
CONTENT = "content:"  # an `ids` entry naming a message by its text, for views that keep no positions


def content_id(content: str) -> str:
    """How `MemoryForgotten.ids` names the messages with this text in a session view: `content:<sha256>`."""
    return CONTENT + hashlib.sha256(content.encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class MemoryForgotten:
    """Items leave the views named in `views` (their base names: a rebuild target folds its view's).

    `session`: the event's whole session leaves them; `offsets`: the messages added at those offsets
    on the event's own partition (a session's events share one); `ids`: facts, store items, or the
    session's messages with a given text (`content_id`: session views hold no positions).
    """

    views: tuple[str, ...]
    policy: str
    reason: str | None = None
    session: bool = False
    offsets: tuple[int, ...] = ()
    ids: tuple[str, ...] = ()

    def names(self, view: str) -> bool:
        """Whether the view named `view` (a rebuild target's `base@target` too) folds this event."""
        return view.partition("@")[0] in self.views


@dataclass(frozen=True, slots=True)
class SessionCompacted:
    """A summary stands for the oldest `covers` messages `view` held, added at offsets `first`..`last`
    of the event's partition; the messages stay on the log (`expand` reads them back)."""

    view: str
    summary: str
    first: int
    last: int
    covers: int
    model: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class SubjectErased:
    """An erasure's receipt (JSON text), recorded after the erasure's own events."""

    subject: str
    request: str
    receipt: str


@dataclass(frozen=True, slots=True)
class Use:
    """A read that returned items of `view` (its base name), for a forgetting policy in another process:
    `whole` (every item of a session view's session, or of a long-term view), `messages` as (session id,
    partition, offset) of their adds (recall hits), `facts` by id. `at`: microseconds since the epoch."""

    view: str
    session_id: str
    at: int
    whole: bool = False
    messages: tuple[tuple[str, int, int], ...] = ()
    facts: tuple[str, ...] = ()
