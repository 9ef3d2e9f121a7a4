"""The rules a record read from the log must keep before anything folds or reports it.

A record is usable when a schema in `schemas/` decodes it and it keeps what a helix-es writer
guarantees: its message passes validation, its envelope names the namespace of its topic, and its
key is its session id (a foreign producer must not write into other sessions' views). The
projector parks a record that breaks them as a dead letter (`helix_es.log.dead_letters`); rebuild,
audit and forget skip it with `Checker` too, and count it, so none of them stops at it and all of
them see the same events the views were folded from.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from helix_es.log.codec import MAGIC, session_id_of
from helix_es.model import names
from helix_es.model.errors import InvalidInput
from helix_es.model.events import Event, MessageAdded, Position

__all__ = ["Checker", "OnBad", "Skipped", "claimed", "concerns", "skipped"]


class Checker:
    """Raises `InvalidInput` if a decoded event breaks what a helix-es writer guarantees.

    Called on every record a projector or a rebuild reads: each topic's namespace and each session
    id already found valid are remembered (bounded), so a record costs its message's checks."""

    def __init__(self, prefix: str = names.DEFAULT_TOPIC_PREFIX, keep: int = 100_000) -> None:
        self.prefix = prefix
        self.keep = keep
        self._namespaces: dict[str, str] = {}
        self._sessions: set[str] = set()

    def __call__(self, event: Event, topic: str, key: bytes | None, checked: bool = False) -> None:
        """`checked`: the event's message is known to keep Message()'s rules already (`Codec.read`)."""
        namespace = self._namespaces.get(topic)
        if namespace is None:
            namespace = self._namespaces[topic] = names.namespace_of(topic, self.prefix)
        if event.namespace != namespace:
            raise InvalidInput("namespace", f"the envelope says {event.namespace!r} but the topic is {topic!r}")
        session_id = event.session_id
        if session_id not in self._sessions:
            names.check_session_id(session_id)
            if len(self._sessions) >= self.keep:
                self._sessions.clear()
            self._sessions.add(session_id)
        if key != session_id.encode():
            raise InvalidInput("key", f"the record key {key!r} is not the session id {session_id!r}")
        if not checked and isinstance(event.payload, MessageAdded):
            event.payload.message.check()  # decoded without checks: apply Message()'s rules

    def use(
        self, read: Callable[[bytes], tuple[Event, bool]], value: bytes | None, topic: str, key: bytes | None
    ) -> Event:
        """The record's event, decoded (`Codec.read`) and checked; raises for a record a projector
        dead-letters."""
        if value is None:
            raise InvalidInput("value", "the record has no value (a tombstone)")
        event, checked = read(value)
        self(event, topic, key, checked)
        return event


@dataclass(frozen=True, slots=True)
class Skipped:
    """A record a reader passed over because `Checker` refused it: where it is, and why."""

    position: Position
    error: str  # "<exception type>: <message>"
    key: bytes | None = None  # the record's key (None on the embedded log, which has none)
    session_id: str | None = None  # what its envelope names, if that much can be read

    def claims(self, session_id: str) -> bool:
        """Whether the record names `session_id` by key or envelope, or names no session at all."""
        if self.key == session_id.encode():
            return True
        if self.session_id is not None:
            return self.session_id == session_id
        return self.key is None  # nothing says whose it is: every audit of the namespace shows it

    def to_json(self) -> dict[str, object]:
        p = self.position
        return {"topic": p.topic, "partition": p.partition, "offset": p.offset, "error": self.error}


OnBad = Callable[[Skipped], None]


def claimed(value: bytes | None) -> bytes | None:
    """The session id a record's envelope names, read without decoding it; None if it cannot be read."""
    return session_id_of(value) if value and value[:2] == MAGIC else None  # garbage names nobody


def concerns(session_id: bytes, key: bytes | None, value: bytes | None) -> bool:
    """Whether a session's read must judge a record: its key or its envelope names the session, or
    nothing names anyone (`Skipped.claims` says the same of a record once refused)."""
    if key == session_id:
        return True
    named = claimed(value)
    return named == session_id if named is not None else key is None


def skipped(position: Position, exc: Exception, value: bytes | None, key: bytes | None) -> Skipped:
    """What a reader reports for a record `Checker` refused with `exc`."""
    sid = claimed(value)
    return Skipped(
        position, f"{type(exc).__name__}: {exc}"[:1000], key, None if sid is None else sid.decode(errors="replace")
    )
