"""The facts view's corrections table (`helix_es.views.facts`): its rows, read back, and forgetting.

A row per event that changes what the statements mean, keyed by that event: a person's retraction,
merge or unmerge, a session's clear, and a forgetting (kind `forget`).

Forgetting: a `MemoryForgotten` naming the facts view records the fact ids it names (`correction_row`).
`unforgotten`, at read time, drops those statements before the timeline sees them, as if never
stated: no fact, history and `known_as_of` included (audit reads the log). Like a retraction:
- it holds whatever order partitions are folded in, the fact stated before or after it: it is a row
  of its own, never a change to the fact's row (which stays, as a retracted one does);
- it also takes the same value (subject, predicate, value) a model states from turns that reached
  the log before it (a re-extraction of old turns); a later turn saying it again is a new fact;
- the ids merged into a forgotten fact (a standing merge) go with it.
`session` means nothing to the facts view (facts belong to the namespace, not a session): a
session's facts leave when named by id, or by a clear or an erasure of the session.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from helix_es.model.events import FactRetracted, FactsMerged, FactsUnmerged, MemoryCleared, MemoryForgotten, Record
from helix_es.model.facts import Correction
from helix_es.model.positions import Position
from helix_es.views.rows import Row

FORGET = "forget"  # never a `Correction`: `unforgotten` takes these rows out first


def correction_row(
    record: Record, payload: FactRetracted | FactsMerged | FactsUnmerged | MemoryCleared | MemoryForgotten
) -> dict[str, Any]:
    event, p = record.event, record.position
    body: dict[str, Any]
    if isinstance(payload, FactRetracted):
        kind, body = (
            "retract",
            {
                "fact_id": payload.fact_id,
                "subject": payload.subject,
                "predicate": payload.predicate,
                "value": payload.value,
                "reason": payload.reason,
            },
        )
    elif isinstance(payload, FactsMerged):
        kind, body = "merge", {"fact_ids": list(payload.fact_ids)}
    elif isinstance(payload, FactsUnmerged):
        m = payload.merged
        kind, body = "unmerge", {"merged": [m.topic, m.partition, m.offset]}
    elif isinstance(payload, MemoryForgotten):
        kind, body = FORGET, {"fact_ids": sorted(set(payload.ids)), "policy": payload.policy, "reason": payload.reason}
    else:
        kind, body = "clear", {"reason": payload.reason}
    return {
        "namespace": event.namespace,
        "event_id": str(event.event_id),
        "kind": kind,
        "at": event.timestamp,
        "session_id": event.session_id,
        "topic": p.topic,
        "partition": p.partition,
        "offset": p.offset,
        "body": json.dumps(body, sort_keys=True),
    }


def correction_of(row: Row) -> Correction:
    body = json.loads(row["body"] or "{}")
    merged = body.get("merged")
    return Correction(
        kind=row["kind"],
        at=row["at"],
        position=Position(row["topic"], row["partition"], row["offset"]),
        session_id=row["session_id"],
        fact_id=body.get("fact_id", ""),
        subject=body.get("subject", ""),
        predicate=body.get("predicate", ""),
        value=body.get("value", ""),
        fact_ids=tuple(body.get("fact_ids", ())),
        merged=None if merged is None else Position(*merged),
    )


def unforgotten(stated: Sequence[Row], corrections: Sequence[Row]) -> tuple[list[Row], list[Row]]:
    """The statement and correction rows the timeline reads: without what was forgotten, nor the forgettings."""
    rest = [r for r in corrections if r["kind"] != FORGET]
    forgotten: dict[str, datetime] = {}  # fact id -> when it was first forgotten
    for r in corrections:
        if r["kind"] == FORGET:
            for fid in json.loads(r["body"] or "{}").get("fact_ids", ()):
                forgotten[fid] = min(forgotten.get(fid, r["at"]), r["at"])
    if not forgotten:
        return list(stated), rest
    unmerged = {tuple(json.loads(r["body"])["merged"]) for r in rest if r["kind"] == "unmerge"}
    merges = [
        json.loads(r["body"]).get("fact_ids", [])
        for r in rest
        if r["kind"] == "merge" and (r["topic"], r["partition"], r["offset"]) not in unmerged
    ]
    grown = True
    while grown:  # what was merged into a forgotten fact (maybe through another merge) goes with it
        grown = False
        for first, *others in (m for m in merges if m and m[0] in forgotten):
            for other in others:
                if other not in forgotten:
                    forgotten[other], grown = forgotten[first], True
    said: dict[tuple[str, str, str], datetime] = {}  # the values forgotten, each with its first forgetting
    for s in stated:
        if s["fact_id"] in forgotten:
            key = (s["subject_key"], s["predicate"], s["value"].strip().casefold())
            said[key] = min(said.get(key, forgotten[s["fact_id"]]), forgotten[s["fact_id"]])

    def gone(s: Row) -> bool:
        if s["fact_id"] in forgotten:
            return True
        at = said.get((s["subject_key"], s["predicate"], s["value"].strip().casefold()))
        return bool(s["model"]) and at is not None and s["stated_at"] <= at  # a model's, from turns before it

    return [s for s in stated if not gone(s)], rest
