"""Events as the records any Avro program sees (plain dicts, the payload's branch named), and back."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from helix_es.model.errors import UnknownSchema
from helix_es.model.events import (
    ChannelBlob,
    CheckpointSaved,
    CheckpointsDeleted,
    EmbeddingRecorded,
    Event,
    ItemDeleted,
    ItemPut,
    ItemTouched,
    MemoryCleared,
    MessageAdded,
    MessageRetracted,
    Payload,
    PendingWrite,
    Serialized,
    SessionErased,
    SummaryRecorded,
    WritesSaved,
)
from helix_es.model.message import Message

NS = "helix.memory."  # the schemas' namespace: a branch's full name
_NS = NS


def _serialized(body: Mapping[str, Any]) -> Serialized:
    return Serialized(body["type"], body["data"])


def _typed(value: Serialized) -> dict[str, Any]:
    return {"type": value.type, "data": value.data}


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
