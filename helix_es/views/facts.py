"""facts: what a namespace's conversation taught the agent, kept as the log recorded it.

YAML `type: facts` with `store: memory | redis | postgres` and `extract:` (the extractor the
worker asks: `{provider: rules}` or `{provider: openai, base_url, model, api_key_env}`). Options:
`table:` (default `helix_facts`), `multi_valued:` (predicates that accumulate; default likes,
dislikes, speaks, has_pet), `batch: {turns: N, idle: seconds}` (the worker asks once per N turns
of a session, or once a session has been quiet that long; default 8 turns, 2 s) and
`concurrency:` (extraction calls at once, default 4).

The fold (`FactsFold`) keeps three tables, all rows of the namespace:
- `<table>`: one row per fact stated, by the model (`FactsExtracted` of this view) or a person
  (`FactAsserted`), keyed by a fact id made from the stating event, so a re-delivery puts nothing twice;
- `<table>_corrections`: retractions, merges, unmerges, sessions' clears and forgettings, keyed by
  their event (`helix_es.views.facts_corrections`);
- `<table>_pending`: turns (user and assistant messages with text) no extraction of this view has
  covered yet: the extraction worker's queue, on the same log positions, so it survives restarts.

The timeline (`helix_es.model.facts.timeline`) is computed from the first two when read, so the
fold never depends on the order partitions are applied in, and a rebuild calls no model.

Forgetting: a `MemoryForgotten` naming the view (`Facts.name`) is a corrections row of the fact ids
it names; a read drops those facts, history included, folded before or after them, and the same
value a model states from turns before it (`helix_es.views.facts_corrections`). `session` is ignored.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from helix_es.model.errors import ConfigError
from helix_es.model.events import (
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    FactsMerged,
    FactsUnmerged,
    MemoryCleared,
    MemoryForgotten,
    MessageAdded,
    Record,
    SessionErased,
)
from helix_es.model.facts import MULTI_VALUED, Stated
from helix_es.model.options import whole_number
from helix_es.model.positions import Position
from helix_es.providers.extract import Extractor, parse_extract
from helix_es.views.base import IndexView
from helix_es.views.facts_corrections import correction_row
from helix_es.views.long_term import MAX_TABLE, check_table, target_table
from helix_es.views.rows import Delete, Put, Row, RowChange, Scan, Table

DEFAULT_TABLE = "helix_facts"
FACTS_KEYS = frozenset({"table", "extract", "multi_valued", "batch", "concurrency"})
EXTRACTED_ROLES = frozenset({"user", "assistant"})  # the turns worth asking a model about
_SUFFIXES = ("_corrections", "_pending")


@dataclass(frozen=True)
class Batching:
    """When the worker asks: once a session has `turns` pending turns, or has been quiet `idle` seconds."""

    turns: int = 8
    idle: float = 2.0
    concurrency: int = 4


@dataclass(frozen=True)
class Facts(IndexView):
    """The facts view's options. Addresses stay out of repr: a DSN may hold a password."""

    kind: ClassVar[str] = "facts"
    adapter: ClassVar[str | None] = "rows"

    store: str = "memory"
    table: str = DEFAULT_TABLE
    extract: Extractor | None = field(default=None, compare=False)
    multi_valued: tuple[str, ...] = MULTI_VALUED
    batching: Batching = field(default_factory=Batching)
    dsn: str | None = field(default=None, repr=False)
    redis_url: str | None = field(default=None, repr=False)
    # A rebuild target kept in another table keeps its view's name: its events and consumer group are the view's.
    source: str | None = None

    @property
    def name(self) -> str:
        if self.source is not None:
            return self.source
        return self.kind if self.table == DEFAULT_TABLE else f"{self.kind}-{self.table}"


def facts_view(options: Mapping[str, Any], where: str) -> Facts:
    """YAML `type: facts`."""
    table = check_table(options.get("table", DEFAULT_TABLE), f"{where}.table")
    if len(table) > MAX_TABLE - max(map(len, _SUFFIXES)):
        raise ConfigError(f"{where}.table", f"must be at most {MAX_TABLE - 12} characters (it gets suffixes)")
    multi = options.get("multi_valued", list(MULTI_VALUED))
    if not isinstance(multi, list) or not all(isinstance(p, str) and p.strip() for p in multi):
        raise ConfigError(f"{where}.multi_valued", f"must be a list of predicate names, got {multi!r}")
    batch = options.get("batch", {})
    if not isinstance(batch, Mapping) or set(batch) - {"turns", "idle"}:
        raise ConfigError(f"{where}.batch", f"must be a mapping of turns and idle (seconds), got {batch!r}")
    turns = whole_number(batch, "turns", f"{where}.batch", 8)
    idle = batch.get("idle", 2.0)
    if isinstance(idle, bool) or not isinstance(idle, (int, float)) or not 0 <= idle <= 3600:
        raise ConfigError(f"{where}.batch.idle", f"must be seconds between 0 and 3600, got {idle!r}")
    concurrency = whole_number(options, "concurrency", where, 4)
    if turns < 1 or concurrency < 1:
        raise ConfigError(f"{where}.batch.turns" if turns < 1 else f"{where}.concurrency", "must be >= 1")
    store = options.get("store", "memory")
    return Facts(
        store=store if isinstance(store, str) else "memory",
        table=table,
        extract=None if options.get("extract") is None else parse_extract(options["extract"], f"{where}.extract"),
        multi_valued=tuple(p.strip().casefold() for p in multi),
        batching=Batching(turns, float(idle), concurrency),
        dsn=options.get("dsn") or options.get("postgres_dsn"),
        redis_url=options.get("redis_url"),
    )


def tables(table: str) -> tuple[Table, Table, Table]:
    """The stated facts, corrections and pending turns tables of the facts table `table`."""
    name = check_table(table)
    stated = Table(
        name,
        columns=(
            ("namespace", "text"),
            ("fact_id", "text"),
            ("subject_key", "text"),
            ("subject", "text"),
            ("predicate", "text"),
            ("value", "text"),
            ("valid_from", "time"),
            ("stated_at", "time"),
            ("known_at", "time"),
            ("model", "text"),  # '' for a person's assertion
            ("session_id", "text"),
            ("topic", "text"),
            ("partition", "int"),
            ("offset", "int"),
            ("ordinal", "int"),
            ("source", "json"),
            ("source_offset", "int"),
        ),
        key=("namespace", "fact_id"),
        order=("namespace", "fact_id"),
        lookups=("subject_key", "session_id"),
    )
    corrections = Table(
        f"{name}_corrections",
        columns=(
            ("namespace", "text"),
            ("event_id", "text"),
            ("kind", "text"),
            ("at", "time"),
            ("session_id", "text"),
            ("topic", "text"),
            ("partition", "int"),
            ("offset", "int"),
            ("body", "json"),
        ),
        key=("namespace", "event_id"),
        order=("namespace", "event_id"),
        lookups=("session_id",),
    )
    pending = Table(
        f"{name}_pending",
        columns=(
            ("namespace", "text"),
            ("topic", "text"),
            ("partition", "int"),
            ("offset", "int"),
            ("session_id", "text"),
            ("event_id", "text"),
            ("said_at", "time"),
            ("added_at", "time"),  # the event's time: how long a session has been quiet
            ("role", "text"),
            ("name", "text"),
            ("content", "text"),
        ),
        key=("namespace", "topic", "partition", "offset"),
        order=("namespace", "topic", "partition", "offset"),
        lookups=("session_id",),
    )
    return stated, corrections, pending


def facts_target_table(table: str, view: str, target: str) -> str:
    """The table of a rebuild target of a facts view whose rows carry no view column (PostgreSQL): the
    view's own table for its own name, else `<table>_<tag>`, short enough for its suffixes."""
    name = target_table(table, view, target)
    room = MAX_TABLE - max(map(len, _SUFFIXES))
    if len(name) > room:  # PostgreSQL would truncate it silently: keep it unique instead
        name = f"{name[: room - 9]}_{hashlib.sha256(target.encode()).hexdigest()[:8]}"
    return name


def fact_id(view: str, sources: Sequence[str], index: int) -> str:
    """A fact's id: the same extraction recorded twice (a worker retried) states the same ids."""
    text = "\n".join((view, *sorted(sources), str(index)))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


# --- rows <-> the model's statements ---


def stated_of(row: Row) -> Stated:
    source = tuple(Position(t, p, o) for t, p, o in json.loads(row["source"] or "[]"))
    return Stated(
        id=row["fact_id"],
        subject=row["subject"],
        predicate=row["predicate"],
        value=row["value"],
        valid_from=row["valid_from"],
        stated_at=row["stated_at"],
        known_at=row["known_at"],
        order=(row["topic"], row["partition"], row["offset"], row["ordinal"]),
        source=source,
        model=row["model"] or None,
        session_id=row["session_id"],
        source_offset=row["source_offset"],
    )


# --- the fold ---


@dataclass(frozen=True)
class Wants:
    scans: tuple[Scan, ...] = ()
    marks: tuple[str, ...] = ()


class FactsFold:
    """Records to row changes of the three tables; `wants` the session rows a clear or erasure removes."""

    mark = "cleared"  # unused: the facts tables have no floor

    def __init__(self, table: str, source: str, model: str | None = None) -> None:
        self.stated, self.corrections, self.pending = tables(table)
        self.source = source  # the view whose FactsExtracted this fold keeps (a rebuild target keeps its view's)
        # The extractor's model whose FactsExtracted it keeps (None: any): a view configured with another
        # model folds none of the old one's, so its turns are pending and its worker asks the new model.
        self.model = model

    @property
    def tables(self) -> tuple[Table, Table, Table]:
        return self.stated, self.corrections, self.pending

    def ops(self, records: Sequence[Record]) -> tuple[str, int, list[Record]]:
        topic, partition = records[0].position.topic, records[0].position.partition
        for r in records:
            if (r.position.topic, r.position.partition) != (topic, partition):
                raise ValueError(f"a batch holds one topic-partition: {topic}[{partition}], then {r.position}")
        # A retried write (`duplicate_of`) stays an op that folds nothing: the checkpoint moves past it, so
        # a read waiting for the retry's position is not left waiting for ever.
        return topic, partition, list(records)

    def offset(self, op: Record) -> int:
        return op.position.offset

    def wants(self, ops: Sequence[Record]) -> Wants:
        named = sorted(
            {
                (r.event.namespace, r.event.session_id)
                for r in ops
                if r.duplicate_of is None and isinstance(r.event.payload, (MemoryCleared, SessionErased))
            }
        )
        scans = [Scan(self.pending.name, ns, where={"session_id": sid}) for ns, sid in named]
        erased = sorted(
            {
                (r.event.namespace, r.event.session_id)
                for r in ops
                if r.duplicate_of is None and isinstance(r.event.payload, SessionErased)
            }
        )
        scans += [Scan(self.stated.name, ns, where={"session_id": sid}) for ns, sid in erased]
        scans += [Scan(self.corrections.name, ns, where={"session_id": sid}) for ns, sid in erased]
        return Wants(tuple(scans))

    def fold(
        self, ops: Sequence[Record], wants: Wants, found: Sequence[Sequence[Row]], marks: Mapping[str, int | None]
    ) -> list[RowChange]:
        held: dict[tuple[str, str, str], dict[tuple[Any, ...], Row]] = {}
        for scan, rows in zip(wants.scans, found, strict=True):
            table = next(t for t in self.tables if t.name == scan.table)
            bucket = held.setdefault((scan.table, scan.namespace, scan.where["session_id"]), {})
            bucket.update({table.key_of(r): r for r in rows})
        changes: list[RowChange] = []
        settled = self._settled(ops)
        for record in ops:
            payload = record.event.payload
            if record.duplicate_of is not None:
                continue
            if isinstance(payload, MessageAdded):
                self._turn(record, payload, held, changes, settled)
            elif isinstance(payload, FactsExtracted):
                if self._keeps(payload):
                    self._extracted(record, payload, held, changes, settled)
            elif isinstance(payload, FactAsserted):
                changes.append(Put(self.stated.name, _asserted_row(record, payload)))
            elif isinstance(payload, (FactRetracted, FactsMerged, FactsUnmerged, MemoryCleared)):
                changes.append(Put(self.corrections.name, correction_row(record, payload)))
                if isinstance(payload, MemoryCleared):
                    self._drop(self.pending, record, held, changes)
            elif isinstance(payload, MemoryForgotten) and payload.ids and payload.names(self.source):
                # A row of its own, not a change to the facts' rows: it holds if folded before them.
                changes.append(Put(self.corrections.name, correction_row(record, payload)))
            elif isinstance(payload, SessionErased):
                for table in self.tables:
                    self._drop(table, record, held, changes)
        return changes

    def _settled(self, ops: Sequence[Record]) -> set[tuple[str, int, int]]:
        """Turns this batch both queues and extracts (a rebuild, mostly): they never become pending rows."""
        live = [r for r in ops if r.duplicate_of is None]
        turns = {
            (r.position.topic, r.position.partition, r.position.offset)
            for r in live
            if isinstance(r.event.payload, MessageAdded)
        }
        sources = {
            (s.position.topic, s.position.partition, s.position.offset)
            for r in live
            if isinstance(r.event.payload, FactsExtracted) and self._keeps(r.event.payload)
            for s in r.event.payload.sources
        }
        return turns & sources

    def _keeps(self, extracted: FactsExtracted) -> bool:
        return extracted.view == self.source and (self.model is None or extracted.model == self.model)

    def _turn(
        self,
        record: Record,
        added: MessageAdded,
        held: dict[Any, Any],
        changes: list[RowChange],
        settled: set[tuple[str, int, int]],
    ) -> None:
        message = added.message
        if message.role not in EXTRACTED_ROLES or not message.content.strip():
            return
        event, p = record.event, record.position
        if (p.topic, p.partition, p.offset) in settled:
            return
        row = {
            "namespace": event.namespace,
            "topic": p.topic,
            "partition": p.partition,
            "offset": p.offset,
            "session_id": event.session_id,
            "event_id": str(event.event_id),
            "said_at": message.occurred_at or event.timestamp,
            "added_at": event.timestamp,
            "role": message.role,
            "name": message.name or "",
            "content": message.content,
        }
        held.setdefault((self.pending.name, event.namespace, event.session_id), {})[self.pending.key_of(row)] = row
        changes.append(Put(self.pending.name, row))

    def _extracted(
        self,
        record: Record,
        extracted: FactsExtracted,
        held: dict[Any, Any],
        changes: list[RowChange],
        settled: set[tuple[str, int, int]],
    ) -> None:
        event = record.event
        ids = [s.event_id for s in extracted.sources]
        said = max((s.said_at for s in extracted.sources), default=event.timestamp)
        logged = max((s.added_at or s.said_at for s in extracted.sources), default=event.timestamp)
        newest = max((s.position.offset for s in extracted.sources), default=-1)
        source = json.dumps([[s.position.topic, s.position.partition, s.position.offset] for s in extracted.sources])
        for i, fact in enumerate(extracted.facts):
            row = _stated_row(record, fact.subject, fact.predicate, fact.value)
            row.update(
                fact_id=fact_id(extracted.view, ids, i),
                valid_from=fact.valid_from or said,
                stated_at=logged,
                model=extracted.model or "?",
                ordinal=i,
                source=source,
                source_offset=newest,
            )
            changes.append(Put(self.stated.name, row))
        mine = held.get((self.pending.name, event.namespace, event.session_id), {})
        for s in extracted.sources:
            key = (s.position.topic, s.position.partition, s.position.offset)
            if key in settled:
                continue  # queued and extracted in this batch: never a pending row
            row = mine.pop(key, None) or {
                "namespace": event.namespace,
                "topic": key[0],
                "partition": key[1],
                "offset": key[2],
                "session_id": event.session_id,
            }
            changes.append(Delete(self.pending.name, row))

    def _drop(self, table: Table, record: Record, held: dict[Any, Any], changes: list[RowChange]) -> None:
        """Delete `table`'s rows of the record's session written before it (on its partition)."""
        event, p = record.event, record.position
        rows = held.get((table.name, event.namespace, event.session_id), {})
        for key, row in list(rows.items()):
            if row.get("partition", p.partition) == p.partition and row.get("offset", -1) < p.offset:
                changes.append(Delete(table.name, row))
                del rows[key]


def _stated_row(record: Record, subject: str, predicate: str, value: str) -> dict[str, Any]:
    event, p = record.event, record.position
    return {
        "namespace": event.namespace,
        "subject_key": subject.strip().casefold(),
        "subject": subject.strip(),
        "predicate": predicate.strip().casefold(),
        "value": value.strip(),
        "known_at": event.timestamp,
        "session_id": event.session_id,
        "topic": p.topic,
        "partition": p.partition,
        "offset": p.offset,
    }


def _asserted_row(record: Record, asserted: FactAsserted) -> dict[str, Any]:
    event, p = record.event, record.position
    row = _stated_row(record, asserted.subject, asserted.predicate, asserted.value)
    row.update(
        fact_id=asserted_id(str(event.event_id)),
        valid_from=asserted.valid_from or event.timestamp,
        stated_at=event.timestamp,
        model="",
        ordinal=0,
        source=json.dumps([[p.topic, p.partition, p.offset]]),
        source_offset=p.offset,
    )
    return row


def asserted_id(event_id: str) -> str:
    """The id of the fact a `FactAsserted` event states."""
    return hashlib.sha256(f"asserted\n{event_id}".encode()).hexdigest()[:24]
