"""Audit: a session's history read back from the log (never from a view), and what a view held at a cut.

`await audit(config, session_id="s-42")` lists every event of the session in log order: adds,
clears, derived events (`SummaryRecorded`, `EmbeddingRecorded`) and event types this version
does not know, shown as they are. With `as_of=` (a time) or `offset=` (an offset in the
session's partition) it also folds each configured view from the log up to that cut, in a
fresh in-process projection over a fresh `MemoryStore`, and returns what `get()` would have
returned then. The fold replays history (`live=False`), so no model is ever called: summaries
and paid embeddings come from the derived events recorded on the log.

The cut:

- `as_of=T` keeps the events stamped at or before T (event time, the producer's clock).
- `offset=O` keeps the events at or below O in the session's partition. Namespace-wide views
  (long-term) also need the other partitions, which share no offsets with it: they are cut at
  the time of the last event at or below O in the session's partition.

`helix-es audit` is the command line for it (`helix_es.cli.audit`). Events this version does not know
are decoded by `helix_es.log.tolerant.AuditCodec`. Records the projector dead-letters
(`helix_es.log.check.Checker`) are left out of events and views, and listed in `skipped`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, is_dataclass, replace
from datetime import datetime
from typing import Any

from helix_es.client.runtime import Runtime
from helix_es.config import Config, MemoryConfig, load_config
from helix_es.history.audit_checkpoints import CHECKPOINT_EVENTS
from helix_es.history.audit_checkpoints import describe as describe_checkpoint
from helix_es.history.audit_checkpoints import payload_json as checkpoint_json
from helix_es.history.audit_facts import FACT_EVENTS
from helix_es.history.audit_facts import describe as describe_fact
from helix_es.history.audit_forget import FORGET_EVENTS, departures, describe_forget
from helix_es.history.describe import describe_message, quote
from helix_es.history.erasure import Erasure, erased_by, erasure_of
from helix_es.history.log_records import RecordReader, read_records
from helix_es.history.reveal import Opener, opener
from helix_es.log.check import Skipped
from helix_es.log.tolerant import UnknownPayload, jsonable
from helix_es.model import names
from helix_es.model.errors import ConfigError, HelixError, InvalidInput
from helix_es.model.events import (
    EmbeddingRecorded,
    MemoryCleared,
    MessageAdded,
    MessageRetracted,
    Payload,
    Position,
    Record,
    SessionErased,
    SummaryRecorded,
)
from helix_es.model.message import Message
from helix_es.model.times import iso, parse_time, utc
from helix_es.projection.driver import Driver
from helix_es.projection.factory import open_projection
from helix_es.projection.idempotency import mark_duplicates
from helix_es.projection.protocol import Projection
from helix_es.stores.memory import KIND as MEMORY
from helix_es.stores.memory.idempotency import MemoryIdempotency
from helix_es.stores.memory.views import MemoryStore
from helix_es.stores.ports import SessionKey
from helix_es.views.base import View
from helix_es.views.long_term import DEFAULT_TABLE, LongTerm
from helix_es.views.vector import Vector

__all__ = [
    "AuditError",
    "AuditReport",
    "AuditedEvent",
    "RecordReader",
    "audit",
    "describe_message",
    "parse_time",
    "quote",
    "read_records",
]

BATCH = 1000  # records per apply: bounds a projection's work per step, not the result


class AuditError(HelixError):
    """The log cannot answer the audit as asked (e.g. the session spans several partitions)."""


# --- the report ------------------------------------------------------------------------------------


def _fields(payload: object) -> dict[str, Any]:
    """A payload dataclass as JSON, nested ones too (a fact's position), for types with no words of their own."""
    if is_dataclass(payload) and not isinstance(payload, type):
        out: dict[str, Any] = jsonable(asdict(payload))
        return out
    return {"value": jsonable(payload)}


def _message_json(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(message.to_json())
    return out


@dataclass(frozen=True, slots=True)
class AuditedEvent:
    """One event of the session, where it sits on the log and what it says."""

    position: Position
    event_id: str
    namespace: str
    session_id: str
    time: datetime  # event time, UTC
    type: str  # the payload's type name (MessageAdded, FactAsserted, ...), or an unknown type's name
    payload: Payload | UnknownPayload
    erased: bool = False  # written before the session was forgotten: its content is crypto-shredded
    idempotency_key: str | None = None
    duplicate_of: int | None = None  # a retry of the write at this offset: no view folds it
    # A MessageRetracted: the offset of the add it took back (the newest one still in the session's
    # views, as the conversation folds it); None when there was none.
    retracts: int | None = None
    left: str | None = None  # a MessageAdded: why its message left views later (forgotten, compacted)

    @classmethod
    def from_record(
        cls, record: Record, erasure: Erasure | None = None, retracts: int | None = None, left: str | None = None
    ) -> AuditedEvent:
        event = record.event
        payload: Payload | UnknownPayload = event.payload
        kind = payload.short_type if isinstance(payload, UnknownPayload) else type(payload).__name__
        erased = erasure is not None and isinstance(payload, MessageAdded) and erased_by(record, erasure)
        return cls(
            record.position,
            str(event.event_id),
            event.namespace,
            event.session_id,
            utc(event.timestamp),
            kind,
            payload,
            erased,
            event.idempotency_key,
            record.duplicate_of,
            retracts,
            left,
        )

    @property
    def known(self) -> bool:
        return not isinstance(self.payload, UnknownPayload)

    def payload_json(self) -> dict[str, Any]:
        p = self.payload
        if isinstance(p, MessageAdded) and self.erased:
            return {"message": {"role": p.message.role, "erased": True}}
        if isinstance(p, MessageAdded):
            return {"message": _message_json(p.message)}
        if isinstance(p, MemoryCleared):
            return {"reason": p.reason}
        if isinstance(p, MessageRetracted):  # with the offset of the add it took back, as the views fold it
            return {"retracted": p.retracted, "reason": p.reason, "retracts_offset": self.retracts}
        if isinstance(p, SummaryRecorded):
            return {"view": p.view, "epoch": p.epoch, "covers": p.covers, "text": p.text, "model": p.model}
        if isinstance(p, EmbeddingRecorded):  # the vector itself is bulk; its size and text hash identify it
            return {"model": p.model, "content_sha256": p.content_sha256, "dims": len(p.vector) // 4}
        if isinstance(p, CHECKPOINT_EVENTS):
            return checkpoint_json(p)
        if isinstance(p, UnknownPayload):
            return {
                "avro_type": p.type,
                "fields": dict(p.fields),
                "schema_fingerprint": p.schema,
                "union_branch": p.branch,
            }
        return _fields(p)  # a type added after this module: its fields as they are

    def to_json(self) -> dict[str, Any]:
        return {
            "time": self.time.isoformat(),
            "topic": self.position.topic,
            "partition": self.position.partition,
            "offset": self.position.offset,
            "event_id": self.event_id,
            "session_id": self.session_id,
            "type": self.type,
            "known": self.known,
            "erased": self.erased,
            "idempotency_key": self.idempotency_key,
            "duplicate_of": self.duplicate_of,
            "left": self.left,
            "payload": self.payload_json(),
        }

    def describe(self) -> str:
        """The payload on one line, for people, with a retry marked as the duplicate it is."""
        text = self._describe() + (f" [{self.left}]" if self.left else "")
        if self.duplicate_of is not None:
            key = quote(self.idempotency_key or "")
            return f"duplicate of @{self.duplicate_of} (idempotency key {key}), not folded: {text}"
        return text

    def _describe(self) -> str:
        """The payload on one line; text is JSON-quoted so control characters stay inert."""
        p = self.payload
        if isinstance(p, MessageAdded) and self.erased:
            return f"{p.message.role}: content erased (its key was destroyed by forget)"
        if isinstance(p, MessageAdded):
            return describe_message(p.message)
        if isinstance(p, MemoryCleared):
            return "memory cleared" + (f", reason {quote(p.reason)}" if p.reason else "")
        if isinstance(p, MessageRetracted):
            what = f"the message at @{self.retracts}" if self.retracts is not None else "nothing (no message left)"
            named = f", writer named event {p.retracted}" if p.retracted else ""
            return f"retracted {what}{named}" + (f", reason {quote(p.reason)}" if p.reason else "")
        if isinstance(p, SummaryRecorded):
            model = f", model {quote(p.model)}" if p.model else ""
            return f"summary for view {p.view} covering {p.covers} messages{model}: {quote(p.text)}"
        if isinstance(p, EmbeddingRecorded):
            return f"embedding by {quote(p.model)}, {len(p.vector) // 4} dims, of text sha256 {p.content_sha256[:16]}…"
        if isinstance(p, CHECKPOINT_EVENTS):
            return describe_checkpoint(p)
        if isinstance(p, FACT_EVENTS):
            return describe_fact(p)
        if isinstance(p, FORGET_EVENTS):
            return describe_forget(p)
        if not isinstance(p, UnknownPayload):
            return json.dumps(_fields(p), ensure_ascii=False)
        if p.schema is not None:
            return f"unknown event: written with schema {p.schema} (not in schemas/), payload branch {p.branch}"
        return f"unknown event type {p.type}: {json.dumps(dict(p.fields), ensure_ascii=False)}"


@dataclass(frozen=True)
class AuditReport:
    """A session's events from the log, and with a cut, what each view's `get()` returned at that cut."""

    events: list[AuditedEvent]
    views: dict[str, list[Message]] | None  # view name -> messages; None without a cut
    namespace: str
    session_id: str
    topic: str
    as_of: datetime | None = None  # the time cut, UTC
    offset: int | None = None  # the offset cut, in `partition`
    partition: int | None = None  # the session's partition (with an offset cut)
    # With an offset cut and a namespace-wide view: the time other partitions were cut at (see module doc).
    cut_time: datetime | None = None
    erasure: Erasure | None = None  # the session was forgotten (helix_es.erasure.forget)
    # Records naming the session that the projector dead-letters (helix_es.log.check): not in events or views.
    skipped: list[Skipped] = field(default_factory=list)
    opened: bool = False  # messages shown as written, opened with the encryption key (`raw` not asked)
    sealed: str | None = None  # why sealed messages are shown as stored, when they could not be opened

    def to_json(self) -> dict[str, Any]:
        cut = None
        if self.as_of is not None or self.offset is not None:
            cut = {
                "as_of": iso(self.as_of),
                "offset": self.offset,
                "partition": self.partition,
                "time": iso(self.cut_time),
            }
        views = (
            None
            if self.views is None
            else {name: [_message_json(m) for m in messages] for name, messages in self.views.items()}
        )
        return {
            "namespace": self.namespace,
            "session_id": self.session_id,
            "topic": self.topic,
            "cut": cut,
            "erased": None
            if self.erasure is None
            else {
                "offset": self.erasure.position.offset,
                "at": iso(self.erasure.at),
                "reason": self.erasure.reason,
            },
            "events": [e.to_json() for e in self.events],
            "views": views,
            "opened": self.opened,
            "sealed": self.sealed,
            "skipped": len(self.skipped),
            "skipped_records": [b.to_json() for b in self.skipped],
        }


def _messages(events: Sequence[AuditedEvent], views: Mapping[str, Sequence[Message]] | None) -> list[Message]:
    found = [e.payload.message for e in events if isinstance(e.payload, MessageAdded) and not e.erased]
    return found + [m for messages in (views or {}).values() for m in messages]


def _opened(event: AuditedEvent, open_: Opener) -> AuditedEvent:
    """The event with its message as written; an erased one stays as it is (its key is destroyed)."""
    p = event.payload
    if isinstance(p, MessageAdded) and not event.erased:
        return replace(event, payload=replace(p, message=open_(p.message)))
    return event


def retractions(records: Sequence[Record]) -> dict[int, int]:
    """For each retraction of one session's `records` (in offset order), the offset of the add it took back."""
    held: list[int] = []
    out: dict[int, int] = {}
    for r in records:
        p = r.event.payload
        if r.duplicate_of is not None:
            continue  # a retry: no view folds it
        if isinstance(p, MessageAdded):
            held.append(r.position.offset)
        elif isinstance(p, MessageRetracted) and held:
            out[r.position.offset] = held.pop()
        elif isinstance(p, MemoryCleared | SessionErased):
            held.clear()
    return out


# --- views ------------------------------------------------------------------------------------------


def _pick(memory: MemoryConfig, wanted: str | None) -> list[MemoryConfig]:
    parts = list(memory.parts)
    if wanted is None:
        return parts
    chosen = [p for p in parts if wanted in (p.view.name, p.type, getattr(p.view, "kind", None))]
    if not chosen:
        known = ", ".join(f"{p.view.name} ({p.type})" for p in parts)
        raise ConfigError("view", f"this config has no view {wanted!r}; give one of: {known}")
    return chosen


def _fresh_projection(part: MemoryConfig) -> Projection:
    """The view's projection over fresh in-process state: the same fold, none of the deployment's data."""
    memory = replace(part, store=MEMORY.name)
    if isinstance(part.view, View):
        return open_projection(memory, MemoryStore())
    if isinstance(part.view, LongTerm):  # long-term picks its store from its own options; no table there
        memory = replace(memory, view=replace(part.view, store=MEMORY.name, table=DEFAULT_TABLE))
    return open_projection(memory)


async def _fold(part: MemoryConfig, records: Sequence[Record], key: SessionKey) -> list[Message]:
    if isinstance(part.view, Vector):
        return []  # search-only: get() is always [], and folding would embed every message for nothing
    if isinstance(part.view, View):  # session views only ever read the session's own events
        records = [r for r in records if r.event.session_id == key.session_id]
    projection = _fresh_projection(part)
    try:
        # One topic-partition after another, in offset order, as a projector applies them; never
        # live: the history holds what was derived from it already.
        ordered = sorted(records, key=lambda r: (r.position.topic, r.position.partition, r.position.offset))
        await Driver(projection).replay(ordered, batch=BATCH)
        return await projection.get(key, None) or []
    finally:
        await projection.close()


def _needs_namespace(part: MemoryConfig) -> bool:
    return not isinstance(part.view, View | Vector)  # long-term, and any later namespace-wide view


# --- the audit --------------------------------------------------------------------------------------


def _check_offset(offset: object) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidInput(
            "offset", f"must be a whole number >= 0 (an offset in the session's partition), got {offset!r}"
        )
    return offset


def _session_partition(records: Sequence[Record], mine: Sequence[Record], session_id: str) -> int:
    partitions = sorted({r.position.partition for r in mine})
    if len(partitions) > 1:
        raise AuditError(
            f"session {session_id} has events in partitions {partitions} (was the topic repartitioned?), so an "
            "offset does not name one point of its history; use a time cut (`as_of`) instead"
        )
    if partitions:
        return partitions[0]
    seen = {r.position.partition for r in records}
    if len(seen) <= 1:  # the embedded log, or a topic with one partition in use
        return seen.pop() if seen else 0
    raise AuditError(f"session {session_id} has no events, so no partition for an offset; use a time cut (`as_of`)")


async def audit(
    config: Config | Mapping[str, Any] | str | os.PathLike[str],
    *,
    session_id: str,
    namespace: str | None = None,
    as_of: datetime | str | None = None,
    offset: int | None = None,
    view: str | None = None,
    raw: bool = False,
    reader: RecordReader = read_records,
    runtime: Runtime | None = None,
) -> AuditReport:
    """A session's history from the log; with `as_of` or `offset`, also each view's `get()` at that cut.

    `config` is what `open_memory` takes. `namespace` overrides the config's. `as_of` is a datetime
    (naive means UTC) or text for `parse_time`; `offset` an offset in the session's partition; give
    at most one. `view` picks one part of a composite (or checks the one view) by name or type.
    With the encryption middleware configured and its key here, messages are shown opened; `raw`
    shows them as stored. `reader` reads the log (a server passes one that keeps what it read); the
    keys are `runtime`'s (by default the running loop's).
    Raises `InvalidInput` (a `ValueError`) for bad arguments, `HelixError` when the log fails.
    """
    cfg = config if isinstance(config, Config) else load_config(config)
    # One namespace's topic only, even for long-term as of a cut; a projector's glob needs `namespace=`.
    ns = names.concrete_namespace(namespace if namespace is not None else cfg.memory.namespace, "namespace")
    names.check_session_id(session_id, "session_id")
    if as_of is not None and offset is not None:
        raise InvalidInput(
            "as_of", "give `as_of` or `offset`, not both: a cut is a time or an offset in the session's partition"
        )
    cut_at = parse_time(as_of) if as_of is not None else None
    cut_offset = _check_offset(offset) if offset is not None else None
    has_cut = cut_at is not None or cut_offset is not None
    if view is not None and not has_cut:
        raise InvalidInput(
            "view", "picks the view folded at a cut: give `as_of` or `offset` too (`as_of` now folds the whole log)"
        )
    parts = _pick(cfg.memory, view) if has_cut else []

    wide = any(_needs_namespace(p) for p in parts)
    records, bad = await reader(cfg.log, ns, None if wide else session_id)
    # Retries are marked as a view marks them: against the keys of the session's earlier events.
    mine = list(
        await mark_duplicates(MemoryIdempotency(), "audit", [r for r in records if r.event.session_id == session_id])
    )
    skipped = [b for b in bad if b.claims(session_id)]  # whatever the cut: a refused record has no time to trust

    partition: int | None = None
    cut_time = cut_at
    if cut_offset is not None:
        partition = _session_partition(records, mine, session_id)
        # Other partitions share no offsets with this one: cut them at the time of the cut event.
        here = [r for r in records if r.position.partition == partition and r.position.offset <= cut_offset]
        cut_time = utc(max(here, key=lambda r: r.position.offset).event.timestamp) if here and wide else None

    def kept(r: Record) -> bool:
        if cut_offset is not None:
            if r.position.partition == partition:
                return r.position.offset <= cut_offset
            return cut_time is not None and utc(r.event.timestamp) <= cut_time
        return cut_at is None or utc(r.event.timestamp) <= cut_at

    erasure = erasure_of(mine)  # forgotten now, whatever the cut: its content is gone
    taken, left = retractions(mine), departures(mine)
    events = [
        AuditedEvent.from_record(r, erasure, taken.get(r.position.offset), left.get(r.position.offset))
        for r in mine
        if kept(r)
    ]
    views: dict[str, list[Message]] | None = None
    if has_cut:
        upto = [r for r in records if kept(r)]
        key = SessionKey(ns, session_id)
        views = {}
        for part in parts:
            name = part.view.name
            if name in views:  # two parts folding the same view: keep both, apart
                name = f"{name}#{sum(1 for k in views if k.split('#')[0] == name) + 1}"
            views[name] = await _fold(part, upto, key)
    sealing = None if raw else await opener(cfg, ns, session_id, _messages(events, views), runtime)
    if callable(sealing):
        events = [_opened(e, sealing) for e in events]
        views = None if views is None else {k: [sealing(m) for m in v] for k, v in views.items()}
    return AuditReport(
        events=events,
        views=views,
        opened=callable(sealing),
        sealed=sealing if isinstance(sealing, str) else None,
        namespace=ns,
        session_id=session_id,
        topic=names.topic(ns, cfg.log.topic_prefix),
        as_of=cut_at,
        offset=cut_offset,
        partition=partition,
        cut_time=cut_time,
        erasure=erasure,
        skipped=skipped,
    )
