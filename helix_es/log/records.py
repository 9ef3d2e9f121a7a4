"""Events as the records any Avro program sees (plain dicts, the payload's branch named), and back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from helix_es.model.errors import UnknownSchema
from helix_es.model.events import (
    ChannelBlob,
    CheckpointSaved,
    CheckpointsDeleted,
    EmbeddingRecorded,
    Event,
    ExtractedFact,
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    FactsMerged,
    FactsUnmerged,
    ItemDeleted,
    ItemPut,
    ItemTouched,
    MemoryCleared,
    MemoryForgotten,
    MessageAdded,
    MessageRetracted,
    Payload,
    PendingWrite,
    Position,
    Serialized,
    SessionCompacted,
    SessionErased,
    SourceTurn,
    SubjectErased,
    SummaryRecorded,
    WritesSaved,
)
from helix_es.model.message import Message
from helix_es.model.times import utc

NS = "helix.memory."  # the schemas' namespace: a branch's full name
_NS = NS


def _serialized(body: Mapping[str, Any]) -> Serialized:
    return Serialized(body["type"], body["data"])


def _typed(value: Serialized) -> dict[str, Any]:
    return {"type": value.type, "data": value.data}


def _where(p: Position) -> dict[str, Any]:
    return {"topic": p.topic, "partition": p.partition, "offset": p.offset}


def _position(body: Mapping[str, Any]) -> Position:
    return Position(body["topic"], body["partition"], body["offset"])


def _when(at: datetime | None) -> datetime | None:
    """A wire time as an aware UTC datetime (fastavro's already are; a hand-built record's may not be)."""
    return None if at is None else utc(at)


def _fact_record(f: ExtractedFact) -> dict[str, Any]:
    return {"subject": f.subject, "predicate": f.predicate, "value": f.value, "valid_from": f.valid_from}


def _fact(body: Mapping[str, Any]) -> ExtractedFact:
    return ExtractedFact(body["subject"], body["predicate"], body["value"], _when(body.get("valid_from")))


def _source_record(s: SourceTurn) -> dict[str, Any]:
    return {"event_id": s.event_id, "position": _where(s.position), "said_at": s.said_at, "added_at": s.added_at}


def _source(body: Mapping[str, Any]) -> SourceTurn:
    return SourceTurn(body["event_id"], _position(body["position"]), utc(body["said_at"]), _when(body.get("added_at")))


# Each payload type's record body and back (the schema's branch is the type's name).
_BODIES: dict[type, Callable[[Any], dict[str, Any]]] = {
    MessageAdded: lambda p: {"message": p.message.to_record()},
    MemoryCleared: lambda p: {"reason": p.reason},
    SummaryRecorded: lambda p: {
        "view": p.view,
        "epoch": p.epoch,
        "covers": p.covers,
        "text": p.text,
        "model": p.model,
    },
    EmbeddingRecorded: lambda p: {"model": p.model, "content_sha256": p.content_sha256, "vector": p.vector},
    SessionErased: lambda p: {"reason": p.reason, "key_ids": list(p.key_ids)},
    MessageRetracted: lambda p: {"retracted": p.retracted, "reason": p.reason},
    CheckpointSaved: lambda p: {
        "checkpoint_ns": p.checkpoint_ns,
        "checkpoint_id": p.checkpoint_id,
        "parent_checkpoint_id": p.parent_checkpoint_id,
        "checkpoint": _typed(p.checkpoint),
        "metadata": _typed(p.metadata),
        "run_id": p.run_id,
        "blobs": [{"channel": b.channel, "version": b.version, "value": _typed(b.value)} for b in p.blobs],
    },
    WritesSaved: lambda p: {
        "checkpoint_ns": p.checkpoint_ns,
        "checkpoint_id": p.checkpoint_id,
        "task_id": p.task_id,
        "task_path": p.task_path,
        "writes": [{"idx": w.idx, "channel": w.channel, "value": _typed(w.value)} for w in p.writes],
    },
    CheckpointsDeleted: lambda p: {
        "scope": p.scope,
        "run_ids": list(p.run_ids),
        "checkpoints": [{"checkpoint_ns": ns, "checkpoint_id": cid} for ns, cid in p.checkpoints],
        "blobs": [{"checkpoint_ns": ns, "channel": ch, "version": v} for ns, ch, v in p.blobs],
    },
    ItemPut: lambda p: {
        "namespace": list(p.namespace),
        "key": p.key,
        "value": p.value,
        "index": list(p.index) if isinstance(p.index, tuple) else p.index,
        "ttl_minutes": p.ttl_minutes,
    },
    ItemDeleted: lambda p: {"namespace": list(p.namespace), "key": p.key},
    ItemTouched: lambda p: {"namespace": list(p.namespace), "key": p.key},
    FactsExtracted: lambda p: {
        "view": p.view,
        "model": p.model,
        "prompt_sha256": p.prompt_sha256,
        "facts": [_fact_record(f) for f in p.facts],
        "sources": [_source_record(s) for s in p.sources],
        "prompt_tokens": p.prompt_tokens,
        "completion_tokens": p.completion_tokens,
    },
    FactAsserted: lambda p: {
        "subject": p.subject,
        "predicate": p.predicate,
        "value": p.value,
        "valid_from": p.valid_from,
        "reason": p.reason,
    },
    FactRetracted: lambda p: {
        "fact_id": p.fact_id,
        "subject": p.subject,
        "predicate": p.predicate,
        "value": p.value,
        "reason": p.reason,
    },
    FactsMerged: lambda p: {"fact_ids": list(p.fact_ids)},
    FactsUnmerged: lambda p: {"merged": _where(p.merged)},
    MemoryForgotten: lambda p: {
        "views": list(p.views),
        "policy": p.policy,
        "reason": p.reason,
        "session": p.session,
        "offsets": list(p.offsets),
        "ids": list(p.ids),
    },
    SessionCompacted: lambda p: {
        "view": p.view,
        "summary": p.summary,
        "first": p.first,
        "last": p.last,
        "covers": p.covers,
        "model": p.model,
        "reason": p.reason,
    },
    SubjectErased: lambda p: {"subject": p.subject, "request": p.request, "receipt": p.receipt},
}

_PAYLOADS: dict[str, Callable[[Mapping[str, Any]], Payload]] = {
    _NS + "MessageAdded": lambda b: MessageAdded(Message.from_record(b["message"])),
    _NS + "MemoryCleared": lambda b: MemoryCleared(b.get("reason")),
    _NS + "SummaryRecorded": lambda b: SummaryRecorded(b["view"], b["epoch"], b["covers"], b["text"], b.get("model")),
    _NS + "EmbeddingRecorded": lambda b: EmbeddingRecorded(b["model"], b["content_sha256"], b["vector"]),
    _NS + "SessionErased": lambda b: SessionErased(b.get("reason"), tuple(b.get("key_ids") or ())),
    _NS + "MessageRetracted": lambda b: MessageRetracted(b.get("retracted"), b.get("reason")),
    _NS + "CheckpointSaved": lambda b: CheckpointSaved(
        b["checkpoint_ns"],
        b["checkpoint_id"],
        b.get("parent_checkpoint_id"),
        _serialized(b["checkpoint"]),
        _serialized(b["metadata"]),
        b.get("run_id"),
        tuple(ChannelBlob(x["channel"], x["version"], _serialized(x["value"])) for x in b.get("blobs") or ()),
    ),
    _NS + "WritesSaved": lambda b: WritesSaved(
        b["checkpoint_ns"],
        b["checkpoint_id"],
        b["task_id"],
        b.get("task_path") or "",
        tuple(PendingWrite(w["idx"], w["channel"], _serialized(w["value"])) for w in b["writes"]),
    ),
    _NS + "CheckpointsDeleted": lambda b: CheckpointsDeleted(
        b["scope"],
        tuple(b.get("run_ids") or ()),
        tuple((c["checkpoint_ns"], c["checkpoint_id"]) for c in b.get("checkpoints") or ()),
        tuple((x["checkpoint_ns"], x["channel"], x["version"]) for x in b.get("blobs") or ()),
    ),
    _NS + "ItemPut": lambda b: ItemPut(
        tuple(b["namespace"]),
        b["key"],
        b["value"],
        tuple(b["index"]) if isinstance(b.get("index"), list) else b.get("index"),
        b.get("ttl_minutes"),
    ),
    _NS + "ItemDeleted": lambda b: ItemDeleted(tuple(b["namespace"]), b["key"]),
    _NS + "ItemTouched": lambda b: ItemTouched(tuple(b["namespace"]), b["key"]),
    _NS + "FactsExtracted": lambda b: FactsExtracted(
        b["view"],
        b["model"],
        b["prompt_sha256"],
        tuple(_fact(f) for f in b["facts"]),
        tuple(_source(s) for s in b["sources"]),
        b.get("prompt_tokens"),
        b.get("completion_tokens"),
    ),
    _NS + "FactAsserted": lambda b: FactAsserted(
        b["subject"], b["predicate"], b["value"], _when(b.get("valid_from")), b.get("reason")
    ),
    _NS + "FactRetracted": lambda b: FactRetracted(
        b["fact_id"], b["subject"], b["predicate"], b["value"], b.get("reason")
    ),
    _NS + "FactsMerged": lambda b: FactsMerged(tuple(b["fact_ids"])),
    _NS + "FactsUnmerged": lambda b: FactsUnmerged(_position(b["merged"])),
    _NS + "MemoryForgotten": lambda b: MemoryForgotten(
        tuple(b["views"]),
        b["policy"],
        b.get("reason"),
        bool(b.get("session")),
        tuple(b.get("offsets") or ()),
        tuple(b.get("ids") or ()),
    ),
    _NS + "SessionCompacted": lambda b: SessionCompacted(
        b["view"], b["summary"], b["first"], b["last"], b["covers"], b.get("model"), b.get("reason")
    ),
    _NS + "SubjectErased": lambda b: SubjectErased(b["subject"], b["request"], b["receipt"]),
}


def event_to_record(event: Event) -> dict[str, Any]:
    payload = event.payload
    body = (_NS + type(payload).__name__, _BODIES[type(payload)](payload))
    return {
        "event_id": event.event_id,
        "namespace": event.namespace,
        "session_id": event.session_id,
        "timestamp": event.timestamp,
        "payload": body,
        "idempotency_key": event.idempotency_key,  # written by v4 on (a keyed event needs one)
    }


def record_to_event(record: Mapping[str, Any]) -> Event:
    name, body = record["payload"]
    to_payload = _PAYLOADS.get(name)
    if to_payload is None:
        raise UnknownSchema(f"payload type {name} is not known to this version of helix-es")
    payload = to_payload(body)
    return Event(
        namespace=record["namespace"],
        session_id=record["session_id"],
        payload=payload,
        event_id=record["event_id"],
        timestamp=record["timestamp"],
        idempotency_key=record.get("idempotency_key"),
    )
