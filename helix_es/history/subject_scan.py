"""What a subject's erasure finds on a namespace's log (`helix_es.history.subject_erasure`).

One read of the namespace's log, every session grouped, each message opened with the namespace's keys
when encryption is on, and:

- the subject's own sessions: a message whose `metadata.user_id` is the subject, or facts a model
  extracted from the session's turns whose subject is the subject (`FactsExtracted`), or a session an
  earlier erasure of the subject listed (`SubjectErased`: once shredded, a session's user ids no longer
  open, so a rerun knows them from the receipts);
- in the other sessions, the messages that name the subject (`names`) and compaction summaries
  that do, unless an earlier forgetting
  already took them out of every view, or a `SessionErased` of their session did;
- the ids of the facts about the subject (subject or value naming it), as the facts view makes them
  (`fact_id`, `asserted_id`), unless forgotten already;
- the records it could not read: those the log's checker refuses (`on_bad`) and messages whose keys
  cannot open them (not the ones whose key was destroyed: those are erased already). Listed, never a stop.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from helix_es.client.encryption import EncryptedMemory, EncryptionError, KeyErased, KeyProvider, envelope_key_ids
from helix_es.client.protocol import Memory
from helix_es.log.check import Skipped
from helix_es.log.port import EventLog
from helix_es.model.errors import InvalidInput
from helix_es.model.events import (
    FactAsserted,
    FactsExtracted,
    MemoryForgotten,
    MessageAdded,
    Position,
    Record,
    SessionCompacted,
    SessionErased,
    SubjectErased,
    SummaryRecorded,
)
from helix_es.model.message import Message, check_text
from helix_es.views.facts import asserted_id, fact_id

POLICY = "erasure"  # MemoryForgotten.policy of an erasure
RECEIPTS = "erasure:"  # the session of an erasure's receipt: `erasure:<request>`
USER_ID = "user_id"  # the metadata key that says whose message it is
MAX_SUBJECT = 1000  # characters: as a fact's subject
CONCURRENCY = 32  # sessions whose keys are loaded at once


def check_subject(subject: object, field: str = "subject") -> str:
    """The subject to erase: text every store holds, not blank, at most `MAX_SUBJECT` characters."""
    check_text(subject, field, empty=False, error=InvalidInput)
    assert isinstance(subject, str)
    if not subject.strip():
        raise InvalidInput(field, "must not be blank: name the person (a user id or a name)")
    if len(subject) > MAX_SUBJECT:
        raise InvalidInput(field, f"is longer than {MAX_SUBJECT} characters")
    return subject


def naming(subject: str) -> Callable[[str], bool]:
    """Whether a text names `subject`: a case-insensitive whole-word match (`Ana` in "ana's", not in "Banana")."""
    pattern = re.compile(rf"(?<!\w){re.escape(subject.strip())}(?!\w)", re.IGNORECASE)
    return lambda text: bool(text) and pattern.search(text) is not None


def where(position: Position) -> dict[str, Any]:
    return {"topic": position.topic, "partition": position.partition, "offset": position.offset}


class Opener:
    """Stored messages as their writer wrote them: opened with the namespace's keys when encryption is on
    (fields written in clear read as they are), else as stored."""

    def __init__(self, namespace: str, keys: KeyProvider | None) -> None:
        self.namespace, self.keys = namespace, keys

    async def session(self, session_id: str, stored: Iterable[Message]) -> Callable[[Message], Message]:
        """An opener for one session's messages (its keys loaded first); it raises `KeyErased` for a message
        whose key was destroyed, another `EncryptionError` for one no key opens. A fresh one each call:
        what one opened before a shredding is not remembered after it."""
        if self.keys is None:
            return lambda message: message
        prepare = getattr(self.keys, "prepare", None)
        if prepare is not None:
            ids: set[str] = set()
            for message in stored:
                ids |= envelope_key_ids(message)
            await prepare(self.namespace, session_id, key_ids=ids)
        sealed = EncryptedMemory(
            cast(Memory, object()), self.keys, namespace=self.namespace, session_id=session_id, accept_plaintext=True
        )
        return sealed.decrypt


@dataclass
class Seen:
    """One session's records and what they say of the subject."""

    records: list[Record] = field(default_factory=list)
    owned: bool = False  # the subject's own session
    named: dict[int, Position] = field(default_factory=dict)  # offset -> a message naming the subject
    forgotten: set[int] = field(default_factory=set)  # offsets an earlier forgetting took out of every view
    erased: Position | None = None  # its last SessionErased


@dataclass
class Found:
    """What the log holds of the subject."""

    namespace: str
    subject: str
    sessions: dict[str, Seen] = field(default_factory=dict)
    facts: set[str] = field(default_factory=set)  # ids of facts about the subject
    forgotten_ids: set[str] = field(default_factory=set)  # fact ids an earlier forgetting named
    earlier: set[str] = field(default_factory=set)  # the subject's sessions earlier receipts list
    undecodable: list[dict[str, Any]] = field(default_factory=list)
    records: int = 0

    def owned(self) -> list[str]:
        """The subject's own sessions on the log."""
        return sorted(s for s, seen in self.sessions.items() if seen.owned or s in self.earlier)

    def named(self, *, forgotten: bool = False) -> dict[str, list[int]]:
        """Per other session, the offsets of its messages naming the subject that no forgetting took out of
        every view yet (with `forgotten`, those too)."""
        mine = set(self.owned())
        out = {}
        for sid, seen in sorted(self.sessions.items()):
            left = sorted(set(seen.named) - (set() if forgotten else seen.forgotten))
            if sid not in mine and left:
                out[sid] = left
        return out

    def fact_ids(self) -> list[str]:
        return sorted(self.facts - self.forgotten_ids)


async def scan(log: EventLog, namespace: str, subject: str, views: tuple[str, ...], opener: Opener) -> Found:
    """Read the namespace's log once and find what it holds of `subject` (see the module doc). `views`:
    every view the erasure forgets from (a forgetting naming all of them took its offsets out)."""
    found = Found(namespace, subject)
    names_it = naming(subject)
    key = subject.strip().casefold()

    def refused(bad: Skipped) -> None:
        found.undecodable.append({**where(bad.position), "session_id": bad.session_id, "error": bad.error})

    async for record in log.read(namespace, on_bad=refused):
        found.records += 1
        event, payload = record.event, record.event.payload
        sid = event.session_id
        if isinstance(payload, SubjectErased):
            if payload.subject == subject:
                found.earlier |= _listed(payload.receipt)
            continue
        if sid.startswith(RECEIPTS):  # an erasure's own session: its facts forgetting, its receipt
            if isinstance(payload, MemoryForgotten):
                found.forgotten_ids |= set(payload.ids)
            continue
        seen = found.sessions.get(sid)
        if seen is None:
            seen = found.sessions[sid] = Seen()
        seen.records.append(record)
        if isinstance(payload, SessionErased):
            seen.erased = record.position  # what the session said before it is gone from every view
        elif isinstance(payload, MemoryForgotten):
            found.forgotten_ids |= set(payload.ids)
            if set(views) <= set(payload.views):
                seen.forgotten |= set(payload.offsets)
        elif isinstance(payload, FactsExtracted):
            sources = [s.event_id for s in payload.sources]
            for i, fact in enumerate(payload.facts):
                if fact.subject.strip().casefold() == key:
                    seen.owned = True
                if names_it(fact.subject) or names_it(fact.value):
                    found.facts.add(fact_id(payload.view, sources, i))
        elif isinstance(payload, FactAsserted) and (names_it(payload.subject) or names_it(payload.value)):
            found.facts.add(asserted_id(str(event.event_id)))
    found.earlier &= set(found.sessions)
    await _open_all(found, opener, subject, names_it)
    return found


def _listed(receipt: str) -> set[str]:
    """The sessions an earlier receipt lists as the subject's."""
    try:
        doc = json.loads(receipt)
        return {s for s in doc.get("sessions", ()) if isinstance(s, str)}
    except (ValueError, AttributeError):
        return set()


def said_in(record: Record) -> Message | None:
    """What a record puts in views as a message's text: an added message, or a summary (a compaction's or
    a summary view's), which stands for messages that may name the subject."""
    payload = record.event.payload
    if isinstance(payload, MessageAdded):
        return payload.message
    if isinstance(payload, SessionCompacted):
        return Message("system", payload.summary)  # sealed as a message's content, with encryption on
    if isinstance(payload, SummaryRecorded):
        return Message("system", payload.text)  # a summary view's running summary
    return None


def speaks_of(message: Message, subject: str, names_it: Callable[[str], bool]) -> bool:
    """Whether an opened message names the subject: its user id, its content, a tool call's arguments, its name."""
    if message.metadata.get(USER_ID) == subject:
        return True
    texts = (message.content, *(c.arguments for c in message.tool_calls), message.name or "")
    return any(names_it(t) for t in texts)


async def _open_all(found: Found, opener: Opener, subject: str, names_it: Callable[[str], bool]) -> None:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(sid: str, seen: Seen) -> None:
        added = [(r.position, said) for r in seen.records if (said := said_in(r)) is not None]
        if not added:
            return
        async with gate:
            opened = await opener.session(sid, (m for _, m in added))
        erased = seen.erased
        for p, stored in added:
            try:
                message = opened(stored)
            except KeyErased:
                continue  # shredded already
            except EncryptionError as exc:
                found.undecodable.append({**where(p), "session_id": sid, "error": f"{type(exc).__name__}: {exc}"})
                continue
            if message.metadata.get(USER_ID) == subject:
                seen.owned = True
            gone = erased is not None and p.partition == erased.partition and p.offset < erased.offset
            if not gone and speaks_of(message, subject, names_it):
                seen.named[p.offset] = p

    await asyncio.gather(*(one(sid, seen) for sid, seen in found.sessions.items()))
