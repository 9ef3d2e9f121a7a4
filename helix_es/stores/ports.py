"""View stores: where projections live. One module per technology behind one interface.

Every store keeps, per view and session, the state and the offset of the last event it
applied (the session guard), and per view and topic-partition a checkpoint. `apply`
writes states, guards and the checkpoint in one atomic step, and refuses (`StaleWrite`)
if a session's guard moved since it was loaded, so two projectors never interleave.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from helix_es.model.errors import HelixError
from helix_es.model.events import Event
from helix_es.views import State, View


@dataclass(frozen=True, slots=True)
class Applied:
    """What one `apply` did: events folded, and derived events the driver must append to the log."""

    events: int
    derived: tuple[Event, ...] = ()



@dataclass(frozen=True, slots=True)
class SessionKey:
    namespace: str
    session_id: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """A session's view state and the offset of the last event folded into it (None: none yet)."""

    state: State
    applied: int | None


EMPTY = Snapshot((), None)


@dataclass(frozen=True, slots=True)
class Change:
    key: SessionKey
    before: Snapshot
    after: State
    applied: int


class StaleWrite(HelixError):
    """A session's guard moved between load and apply: another projector wrote it. Reload, retry."""


class CheckpointLost(HelixError):
    """A partition checkpoint this store had seen is gone (a Redis FLUSHALL, or a restart without
    persistence): nothing was written. The view's data went with it, so refold the partition from
    the start of the log (the projector does)."""


class ViewStore(Protocol):
    kind: str  # memory | redis | postgres: part of the projector's consumer group

    async def load(self, view: View, keys: Sequence[SessionKey]) -> dict[SessionKey, Snapshot]:
        """Current snapshots of several sessions, in one round trip where the store allows."""
        ...

    async def apply(
        self, view: View, topic: str, partition: int, changes: Sequence[Change], checkpoint: int
    ) -> None:
        """Write the changes and the partition checkpoint atomically, or raise `StaleWrite`."""
        ...

    async def checkpoint(self, view: View, topic: str, partition: int) -> int | None:
        """The last offset of this topic-partition the view applied (None: nothing yet)."""
        ...

    async def read(self, view: View, key: SessionKey, *, guard: bool = True) -> Snapshot:
        """One session's snapshot, state and guard read together. With `guard=False` only the
        state is read (`applied` is then None): enough once a reader has seen its writes land."""
        ...

    async def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class ListEdit:
    """`after = before[:keep] + before[keep + drop:] + append`; drop -1 means replace everything."""

    keep: int
    drop: int
    append: State


def list_edit(before: State, after: State) -> ListEdit:
    """The cheapest edit of a stored list into `after`: windows drop at the front and append."""
    best: ListEdit | None = None
    for keep in (0, 1):
        if keep > len(before) or keep > len(after) or before[:keep] != after[:keep]:
            continue
        rest_before, rest_after = before[keep:], after[keep:]
        for drop in range(max(0, len(rest_before) - len(rest_after)), len(rest_before) + 1):
            tail = rest_before[drop:]
            if rest_after[: len(tail)] == tail:
                if best is None or len(rest_after) - len(tail) < len(best.append):
                    best = ListEdit(keep, drop, rest_after[len(tail) :])
                break
    return best or ListEdit(0, -1, after)
