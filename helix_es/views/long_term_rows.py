"""The long-term view's fold into rows (`helix_es.views.rows`): the rules of `helix_es.views.long_term`
as row changes, so every store keeps the view by applying rows.

Tables: `<table>` (default `agent_memory`), one row per message keyed by its log position, read in
event-time order, its session a lookup, its content searchable, its time the floor a clear cuts;
`<table>_retracted`, one row per retraction that took a row back, so a step applied again (a Redis
Cluster's namespace step before its checkpoint) takes back no more.

The fold asks the store (`wants`) only for what its own partition wrote: the rows of the sessions
a retraction, an erasure or a forgetting names, their retractions, and their namespaces' clear
marks. A clear from another partition reaches the view through the store's floor check in the
atomic step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from helix_es.model.events import micros
from helix_es.model.message import Message
from helix_es.views.long_term import Op, check_table
from helix_es.views.rows import Cut, Delete, Put, Row, RowChange, Scan, Table, put

CLEARED = "cleared"  # the namespace's clear watermark (µs), the mark its cuts raise


def tables(table: str) -> tuple[Table, Table]:
    """The message table and its retractions' table for `table` (a checked long-term table name)."""
    name = check_table(table)
    rows = Table(
        name,
        columns=(
            ("namespace", "text"),
            ("created_at", "time"),
            ("topic", "text"),
            ("partition", "int"),
            ("offset", "int"),
            ("session_id", "text"),
            ("role", "text"),
            ("content", "text"),
            ("message", "json"),
        ),
        key=("namespace", "topic", "partition", "offset"),
        order=("namespace", "created_at", "topic", "partition", "offset"),
        lookups=("session_id",),
        text="content",
        floor="created_at",
    )
    retracted = Table(
        f"{name[:53]}_retracted",
        columns=(
            ("namespace", "text"),
            ("topic", "text"),
            ("partition", "int"),
            ("offset", "int"),
            ("session_id", "text"),
        ),
        key=("namespace", "topic", "partition", "offset"),
        order=("namespace", "topic", "partition", "offset"),
        lookups=("session_id",),
    )
    return rows, retracted


def row_of(op: Op, message: Message) -> Row:
    event, p = op.record.event, op.record.position  # once each: every message of a rebuild passes here
    return {
        "namespace": event.namespace,
        "created_at": event.timestamp,
        "topic": p.topic,
        "partition": p.partition,
        "offset": p.offset,
        "session_id": event.session_id,
        "role": message.role,
        "content": message.content,
        "message": message.to_json(),
    }


@dataclass(frozen=True)
class Wants:
    """What a batch's fold needs read first: session rows and retractions (`scans`), clear marks."""

    scans: tuple[Scan, ...] = ()
    marks: tuple[str, ...] = ()  # namespaces whose clear mark the fold follows


@dataclass
class _Known:
    """The rows of the sessions the batch retracts, erases or forgets, as the fold moves through it."""

    rows: dict[tuple[str, str], dict[tuple[str, int, int], Row]] = field(default_factory=dict)
    retractions: set[tuple[str, str, int, int]] = field(default_factory=set)
    marks: dict[str, int | None] = field(default_factory=dict)


class LongTermFold:
    """Long-term ops to row changes; `wants` first, then `fold` with what the store answered."""

    def __init__(self, table: str) -> None:
        self.rows, self.retracted = tables(table)

    @property
    def tables(self) -> tuple[Table, Table]:
        return self.rows, self.retracted

    def wants(self, ops: Sequence[Op]) -> Wants:
        named = sorted(
            {
                (op.namespace, op.session_id)
                for op in ops
                if op.message is None and (op.retract or op.erased or op.forget is not None)
            }
        )
        scans = [Scan(self.rows.name, ns, where={"session_id": sid}) for ns, sid in named]
        scans += [Scan(self.retracted.name, ns, where={"session_id": sid}) for ns, sid in named]
        return Wants(tuple(scans), tuple(sorted({ns for ns, _ in named})))

    def fold(
        self, ops: Sequence[Op], wants: Wants, found: Sequence[Sequence[Row]], marks: Mapping[str, int | None]
    ) -> list[RowChange]:
        known = _Known(marks=dict(marks))
        for scan, rows in zip(wants.scans, found, strict=True):
            if scan.table == self.rows.name:
                held = known.rows.setdefault((scan.namespace, scan.where["session_id"]), {})
                held.update({(r["topic"], r["partition"], r["offset"]): r for r in rows})
            else:
                known.retractions.update((r["namespace"], r["topic"], r["partition"], r["offset"]) for r in rows)
        changes: list[RowChange] = []
        for op in ops:
            if op.message is not None:
                self._add(op, op.message, known, changes)
            elif op.clear:
                self._clear(op, known, changes)
            elif op.retract:
                self._retract(op, known, changes)
            elif op.erased:
                held = known.rows.get((op.namespace, op.session_id), {})
                for place in [k for k in held if op.erases(op.session_id, *k)]:
                    changes.append(Delete(self.rows.name, held.pop(place)))
            elif op.forget is not None:  # as an erasure, in the views it names
                held = known.rows.get((op.namespace, op.session_id), {})
                for place in op.forgotten(held):
                    changes.append(Delete(self.rows.name, held.pop(place)))
        return changes

    def _add(self, op: Op, message: Message, known: _Known, changes: list[RowChange]) -> None:
        row = row_of(op, message)
        changes.append(put(self.rows.name, row, CLEARED))
        if not known.rows:  # the batch retracts, erases and forgets nothing: no session's rows to follow
            return
        held = known.rows.get((op.namespace, op.session_id))
        mark = known.marks.get(op.namespace)
        if held is not None and (mark is None or micros(op.at) > mark):
            p = op.record.position
            held.setdefault((p.topic, p.partition, p.offset), row)

    def _clear(self, op: Op, known: _Known, changes: list[RowChange]) -> None:
        at = micros(op.at)
        changes.append(Cut(self.rows.name, op.namespace, CLEARED, at))
        if op.namespace in known.marks:
            mark = max(at, known.marks[op.namespace] or at)
            known.marks[op.namespace] = mark
            for (ns, _), held in known.rows.items():
                if ns == op.namespace:
                    for place in [k for k, r in held.items() if micros(r["created_at"]) <= mark]:
                        del held[place]

    def _retract(self, op: Op, known: _Known, changes: list[RowChange]) -> None:
        p = op.record.position
        if (op.namespace, p.topic, p.partition, p.offset) in known.retractions:
            return  # applied before: what it took back is gone already
        held = known.rows.get((op.namespace, op.session_id), {})
        mine = [k for k in held if (k[0], k[1]) == (p.topic, p.partition) and k[2] < p.offset]
        if not mine:
            return
        changes.append(Delete(self.rows.name, held.pop(max(mine, key=lambda k: k[2]))))
        marker = {"namespace": op.namespace, "topic": p.topic, "partition": p.partition, "offset": p.offset}
        changes.append(Put(self.retracted.name, marker | {"session_id": op.session_id}))
