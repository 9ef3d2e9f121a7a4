"""Compaction: which messages of a session's view a summary stands for, and what it stood for.

A session view's messages carry no log positions, so both directions fold the session's events
again, in process, with each added message tagged with its add's offset (`OFFSET` metadata; the
tag never reaches a store). `compact` takes the oldest messages the view holds but the newest
`keep` (whole tool exchanges; a leading system prompt stays); `expand` folds the events before a
`SessionCompacted` and returns what its summary replaced, earlier summaries expanded in turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from helix_es.config import MemoryConfig
from helix_es.model.events import MessageAdded, Position, Record, SessionCompacted
from helix_es.model.message import Message
from helix_es.projection.driver import Driver
from helix_es.projection.factory import open_projection
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.views.base import COMPACTED, compaction_start, parse_position
from helix_es.views.units import front_cut

OFFSET = "helix.offset"


@dataclass(frozen=True)
class Plan:
    """What a compaction covers: the messages (summaries of earlier compactions among them, as they
    stand in the view), the first and last add offsets of the range, and earlier summaries taken in."""

    messages: list[Message]
    first: int
    last: int
    summaries: list[Message]  # earlier summaries it takes in (their text is the summary so far)
    covers: int  # messages of the view the summary replaces (earlier summaries count one each)


async def view_of(part: MemoryConfig, records: Sequence[Record], key: SessionKey) -> list[Message]:
    """The session's view over `records` (the session's, in log order), each message tagged with its offset."""
    projection = open_projection(replace(part, store="memory", forget=None), MemoryStore())
    try:
        await Driver(projection).replay([_tagged(r) for r in records])
        return await projection.get(key, None) or []
    finally:
        await projection.close()


def plan(messages: Sequence[Message], keep: int, records: Sequence[Record]) -> Plan | None:
    """The oldest messages but the newest `keep` (whole units), or None when no message would go."""
    start = compaction_start(messages)
    body = list(messages[start:])
    n = front_cut(body, len(body) - keep) if len(body) > keep else 0
    if n < 1:
        return None
    covered = body[:n]
    spans = [_span(m, records) for m in covered]
    summaries = [m for m in covered if COMPACTED in m.metadata]
    plain = [untagged(m) for m in covered if COMPACTED not in m.metadata]
    if not plain:
        return None  # only a summary would go: summarising it again says nothing new
    return Plan(plain, spans[0][0], spans[-1][1], summaries, n)


def still_oldest(messages: Sequence[Message], records: Sequence[Record], plan: Plan) -> bool:
    """Whether the view's oldest messages are still the ones `plan` covers: a window that evicted while
    the summariser ran would have the summary replace newer messages than it stands for."""
    start = compaction_start(messages)
    body = list(messages[start : start + plan.covers])
    if len(body) != plan.covers:
        return False
    return (_span(body[0], records)[0], _span(body[-1], records)[1]) == (plan.first, plan.last)


async def expand(part: MemoryConfig, records: Sequence[Record], at: Position, key: SessionKey) -> list[Message]:
    """The messages the `SessionCompacted` at `at` stood for, in order; `LookupError` if there is none."""
    found = next((r for r in records if r.position == at and isinstance(r.event.payload, SessionCompacted)), None)
    if found is None:
        raise LookupError(f"no compaction of this session at {at.topic}[{at.partition}]@{at.offset}")
    assert isinstance(found.event.payload, SessionCompacted)
    before = [r for r in records if r.position.partition != at.partition or r.position.offset < at.offset]
    state = await view_of(part, before, key)
    start = compaction_start(state)
    out: list[Message] = []
    for m in state[start : start + found.event.payload.covers]:
        if COMPACTED in m.metadata:
            out += await expand(part, records, parse_position(m.metadata[COMPACTED]), key)
        else:
            out.append(untagged(m))
    return out


def untagged(message: Message) -> Message:
    if OFFSET not in message.metadata:
        return message
    return replace(message, metadata={k: v for k, v in message.metadata.items() if k != OFFSET})


def _tagged(record: Record) -> Record:
    payload = record.event.payload
    if not isinstance(payload, MessageAdded):
        return record
    message = replace(payload.message, metadata={**payload.message.metadata, OFFSET: str(record.position.offset)})
    return replace(record, event=replace(record.event, payload=MessageAdded(message)))


def _span(message: Message, records: Sequence[Record]) -> tuple[int, int]:
    """The add offsets a message of the view stands for: its own, or an earlier compaction's range."""
    if COMPACTED not in message.metadata:
        offset = int(message.metadata[OFFSET])
        return offset, offset
    at = parse_position(message.metadata[COMPACTED])
    event = next(r.event for r in records if r.position == at)
    assert isinstance(event.payload, SessionCompacted)
    return event.payload.first, event.payload.last
