"""How `helix-es audit` shows a LangGraph thread's checkpoint events: ids, parents, channels and writes.

Values stay as the saver's serializer wrote them (the library has no LangGraph). A value shows as
its JSON text when the serializer wrote JSON, or msgpack that `ormsgpack` (LangGraph's, when
installed) reads, with LangGraph's own types as `<ext N>`; else as its type tag and size.
"""

from __future__ import annotations

import json
from typing import Any

from helix_es.client.checkpoint_seal import key_id
from helix_es.model.events import CheckpointSaved, CheckpointsDeleted, Serialized, WritesSaved

CHECKPOINT_EVENTS = (CheckpointSaved, WritesSaved, CheckpointsDeleted)
SHOWN = 200  # characters of a JSON value shown inline


def _ext(code: int, data: bytes) -> str:
    return f"<ext {code}>"


def decoded(value: Serialized) -> str | None:
    """The value as JSON text, where it can be read without the serializer."""
    if value.type == "json":
        return value.data.decode(errors="replace")
    if value.type == "null":
        return "null"
    if value.type != "msgpack":
        return None
    try:
        import ormsgpack  # LangGraph's msgpack reader: there whenever LangGraph is

        return json.dumps(ormsgpack.unpackb(value.data, ext_hook=_ext), ensure_ascii=False, default=str)
    except Exception:  # not installed, or not plain msgpack
        return None


def value_json(value: Serialized) -> dict[str, Any]:
    out: dict[str, Any] = {"type": value.type, "bytes": len(value.data)}
    sealed_by = key_id(value)
    if sealed_by is not None:
        out["sealed_by"] = sealed_by
    text = decoded(value)
    if text is not None:
        out["text"] = text
    return out


def _value(value: Serialized) -> str:
    if value.type == "empty":
        return "(no value)"
    sealed_by = key_id(value)
    if sealed_by is not None:
        return f"sealed by key {sealed_by} ({value.type})"
    text = decoded(value)
    if text is None:
        return f"{value.type}, {len(value.data)} bytes"
    return text[:SHOWN] + ("…" if len(text) > SHOWN else "")


def _ns(checkpoint_ns: str) -> str:
    return f" in namespace {json.dumps(checkpoint_ns)}" if checkpoint_ns else ""


def describe(p: CheckpointSaved | WritesSaved | CheckpointsDeleted) -> str:
    """The event on one line, for people."""
    if isinstance(p, CheckpointSaved):
        parent = f"after {p.parent_checkpoint_id}" if p.parent_checkpoint_id else "first of the thread"
        run = f", run {p.run_id}" if p.run_id else ""
        channels = "; ".join(f"{b.channel} = {_value(b.value)}" for b in p.blobs) or "no channel changed"
        return f"checkpoint {p.checkpoint_id}{_ns(p.checkpoint_ns)}, {parent}{run}: {channels}"
    if isinstance(p, WritesSaved):
        rows = "; ".join(f"{w.channel} = {_value(w.value)}" for w in p.writes)
        path = f" ({p.task_path})" if p.task_path else ""
        return f"writes of task {p.task_id}{path} on checkpoint {p.checkpoint_id}{_ns(p.checkpoint_ns)}: {rows}"
    blobs = f", and {len(p.blobs)} blob(s) no checkpoint left refers to" if p.blobs else ""
    if p.scope == "runs":
        return "checkpoints of runs " + ", ".join(p.run_ids) + " deleted" + blobs
    if p.scope == "keep_latest":
        return "checkpoints pruned: the latest of each namespace kept"
    if p.scope == "checkpoints":
        return "checkpoints deleted: " + ", ".join(cid + _ns(ns) for ns, cid in p.checkpoints) + blobs
    return "thread deleted: every checkpoint and write"


def payload_json(p: CheckpointSaved | WritesSaved | CheckpointsDeleted) -> dict[str, Any]:
    if isinstance(p, CheckpointSaved):
        return {
            "checkpoint_ns": p.checkpoint_ns,
            "checkpoint_id": p.checkpoint_id,
            "parent_checkpoint_id": p.parent_checkpoint_id,
            "run_id": p.run_id,
            "checkpoint": value_json(p.checkpoint),
            "metadata": value_json(p.metadata),
            "blobs": [{"channel": b.channel, "version": b.version, "value": value_json(b.value)} for b in p.blobs],
        }
    if isinstance(p, WritesSaved):
        return {
            "checkpoint_ns": p.checkpoint_ns,
            "checkpoint_id": p.checkpoint_id,
            "task_id": p.task_id,
            "task_path": p.task_path,
            "writes": [{"idx": w.idx, "channel": w.channel, "value": value_json(w.value)} for w in p.writes],
        }
    return {
        "scope": p.scope,
        "run_ids": list(p.run_ids),
        "checkpoints": [{"checkpoint_ns": ns, "checkpoint_id": cid} for ns, cid in p.checkpoints],
        "blobs": [{"checkpoint_ns": ns, "channel": ch, "version": v} for ns, ch, v in p.blobs],
    }
