"""Facts: what the memory learned, with when it held in the world and when the memory knew it.

The facts view keeps what was stated (`Stated`: a model's extraction or a person's assertion) and
what people corrected (`Correction`), as the log recorded them, in any order. `timeline` turns
them into `Fact`s at read time, as the memory knew them at `known_as_of`:

- A person outranks the model: a model fact from turns said before a person's assertion about
  the same subject and predicate, valid from the assertion's valid time on, is dropped; one valid
  from earlier stays, as history the assertion supersedes.
- A retraction removes its fact, and the same value the model states from turns said before it.
- A clear of a session ends the model facts drawn from that session's turns before the clear.
- A merge hides the later ids behind the first (its sources join the survivor's); an unmerge
  undoes it.
- Single-valued predicates: a new value supersedes the old (the old one's `valid_to` is the new
  one's `valid_from`; it stays in history). Multi-valued ones accumulate; an opposite
  (`likes` / `dislikes` of the same value) closes the other.

Because the timeline is computed from recorded statements, a rebuild folds the same rows and
answers the same facts, and no model is called.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Literal

from helix_es.model.errors import InvalidInput
from helix_es.model.message import check_text
from helix_es.model.positions import Position

OPPOSITES: Mapping[str, str] = {"likes": "dislikes", "dislikes": "likes"}
MULTI_VALUED: tuple[str, ...] = ("likes", "dislikes", "speaks", "has_pet")


@dataclass(frozen=True)
class Fact:
    """One fact: valid time (`valid_from`..`valid_to`, when it held in the world), known time
    (`known_from`..`known_to`, when the memory held it), where it came from and who said it."""

    id: str
    subject: str
    predicate: str
    value: str
    valid_from: datetime
    valid_to: datetime | None
    known_from: datetime
    known_to: datetime | None
    source: list[Position]
    model: str | None  # None: a person asserted it
    session_id: str = ""

    def to_json(self) -> dict[str, object]:
        """The fact as the REST service and MCP answer it."""
        return {
            "id": self.id,
            "subject": self.subject,
            "predicate": self.predicate,
            "value": self.value,
            "valid_from": self.valid_from.isoformat(),
            "valid_to": None if self.valid_to is None else self.valid_to.isoformat(),
            "known_from": self.known_from.isoformat(),
            "known_to": None if self.known_to is None else self.known_to.isoformat(),
            "source": {
                "session_id": self.session_id,
                "positions": [{"topic": p.topic, "partition": p.partition, "offset": p.offset} for p in self.source],
            },
            "model": self.model,
        }


@dataclass(frozen=True, slots=True)
class Stated:
    """A fact as one event stated it (a row of the view)."""

    id: str
    subject: str
    predicate: str
    value: str
    valid_from: datetime
    stated_at: datetime  # when its newest source turn reached the log (a person: the assertion's time)
    known_at: datetime  # the stating event's time
    order: tuple[str, int, int, int]  # (topic, partition, offset, index): ties broken by log place
    source: tuple[Position, ...]
    model: str | None
    session_id: str
    source_offset: int  # the newest source turn's offset on the session's partition (for clears)


CorrectionKind = Literal["retract", "merge", "unmerge", "clear"]


@dataclass(frozen=True, slots=True)
class Correction:
    """A person's correction (or a session's clear) as recorded: `at` is the event's time."""

    kind: CorrectionKind
    at: datetime
    position: Position
    session_id: str = ""
    fact_id: str = ""  # retract
    subject: str = ""
    predicate: str = ""
    value: str = ""
    fact_ids: tuple[str, ...] = ()  # merge
    merged: Position | None = None  # unmerge: the merge's position


def key_of(subject: str, predicate: str) -> tuple[str, str]:
    """How facts are grouped: subjects compare case-insensitively, predicates are lower snake_case."""
    return subject.strip().casefold(), predicate.strip().casefold()


@dataclass(frozen=True, slots=True)
class FactsAsk:
    """A checked facts question (`Memory.facts`)."""

    subject: str | None = None
    predicate: str | None = None
    as_of: datetime | None = None
    known_as_of: datetime | None = None
    history: bool = False


def check_time(value: object, name: str) -> datetime | None:
    """A timezone-aware datetime, in UTC (the log keeps UTC: a time outside years 1-9999 there
    would make its event unreadable), or `InvalidInput` naming `name`; None stays None."""
    if value is None:
        return None
    if not isinstance(value, datetime) or value.tzinfo is None or value.utcoffset() is None:
        raise InvalidInput(name, f"must be a timezone-aware datetime, got {value!r}")
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(name, f"must fall within years 1-9999 in UTC, got {value.isoformat()}") from None


def _name(value: object, name: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > 1000:
        raise InvalidInput(name, f"must be a non-empty string of at most 1000 characters, got {value!r}")
    check_text(value, name, error=InvalidInput)  # no NUL, no lone surrogate: every store holds it
    return value


def make_facts_ask(
    subject: object = None,
    predicate: object = None,
    as_of: object = None,
    known_as_of: object = None,
    history: object = False,
) -> FactsAsk:
    """A `FactsAsk`, or `InvalidInput` naming the argument that is wrong."""
    if not isinstance(history, bool):
        raise InvalidInput("history", f"must be True or False, got {history!r}")
    return FactsAsk(
        _name(subject, "subject"),
        _name(predicate, "predicate"),
        check_time(as_of, "as_of"),
        check_time(known_as_of, "known_as_of"),
        history,
    )


def check_fact_text(value: object, name: str) -> str:
    """A subject, predicate or value a person asserts: a non-empty string, stripped."""
    text = _name(value, name)
    if text is None:
        raise InvalidInput(name, "is required")
    return text.strip()


# --- the timeline ---


@dataclass
class _Line:
    """One fact on its way out: the statement that opened it and what joined it."""

    first: Stated
    valid_from: datetime
    valid_to: datetime | None = None
    known_to: datetime | None = None
    source: list[Position] = field(default_factory=list)


def _sort_key(s: Stated) -> tuple[datetime, datetime, tuple[str, int, int, int]]:
    return (s.valid_from, s.stated_at, s.order)


def timeline(
    stated: Iterable[Stated],
    corrections: Iterable[Correction],
    *,
    known_as_of: datetime | None = None,
    multi_valued: Collection[str] = MULTI_VALUED,
) -> list[Fact]:
    """Every fact the statements and corrections known at `known_as_of` (None: all) make, in
    valid-time order per subject and predicate; retracted ones carry `known_to`."""
    known = [s for s in stated if known_as_of is None or s.known_at <= known_as_of]
    fixes = sorted(
        (c for c in corrections if known_as_of is None or c.at <= known_as_of), key=lambda c: (c.at, c.position)
    )
    known, gone = _corrected(known, fixes)
    by_key: dict[tuple[str, str], list[Stated]] = {}
    for s in _outranked(known, multi_valued):
        by_key.setdefault(key_of(s.subject, s.predicate), []).append(s)
    families: dict[tuple[str, str], list[Stated]] = {}  # a predicate and its opposite fold together
    for (subject, predicate), rows in by_key.items():
        family = min(predicate, OPPOSITES.get(predicate, predicate)) if predicate in multi_valued else predicate
        families.setdefault((subject, family), []).extend(rows)
    facts: list[Fact] = []
    for (_, family), rows in sorted(families.items()):
        rows.sort(key=_sort_key)
        lines = _multi(rows) if family in multi_valued else _single(rows)
        facts.extend(_fact(line) for line in lines)
    facts.extend(_fact(line) for line in gone)
    return facts


def _corrected(known: list[Stated], fixes: Sequence[Correction]) -> tuple[list[Stated], list[_Line]]:
    """Statements left after retractions, clears and merges; the retracted and cleared as closed lines."""
    unmerged = {c.merged for c in fixes if c.kind == "unmerge"}
    alias: dict[str, str] = {}
    for c in fixes:
        if c.kind == "merge" and c.position not in unmerged and len(c.fact_ids) > 1:
            for other in c.fact_ids[1:]:
                if other != c.fact_ids[0]:
                    alias.setdefault(other, c.fact_ids[0])
    ended: dict[str, datetime] = {}
    for s in known:
        for c in fixes:
            if c.kind == "retract" and (
                s.id == c.fact_id
                or (
                    s.model is not None
                    and s.stated_at <= c.at
                    and key_of(s.subject, s.predicate) == key_of(c.subject, c.predicate)
                    and s.value.strip().casefold() == c.value.strip().casefold()
                )
            ):
                ended[s.id] = c.at
                break
            if c.kind == "clear" and _cleared(s, c):
                ended[s.id] = c.at
                break
    survivors = {s.id: s for s in known if s.id not in ended}
    kept: list[Stated] = []
    joined: dict[str, list[Position]] = {}
    for s in known:
        if s.id in ended:
            continue
        target = _root(alias, s.id)
        if target != s.id and target in survivors:
            joined.setdefault(target, []).extend(s.source)
            continue
        kept.append(s)
    kept = [replace(s, source=(*s.source, *joined[s.id])) if s.id in joined else s for s in kept]
    gone = [_Line(s, s.valid_from, known_to=ended[s.id], source=list(s.source)) for s in known if s.id in ended]
    return kept, gone


def _cleared(s: Stated, clear: Correction) -> bool:
    """A model fact drawn from turns of the cleared session said before the clear (same partition)."""
    return (
        s.model is not None
        and s.session_id == clear.session_id
        and bool(s.source)
        and s.source[0].partition == clear.position.partition
        and s.source_offset < clear.position.offset
    )


def _root(alias: Mapping[str, str], fact_id: str) -> str:
    seen = {fact_id}
    while fact_id in alias and alias[fact_id] not in seen:
        fact_id = alias[fact_id]
        seen.add(fact_id)
    return fact_id


def _outranked(known: list[Stated], multi_valued: Collection[str]) -> list[Stated]:
    """Drop model statements a person's assertion outranks: stated before it, valid from its valid time on,
    and replacing it (another value of a single-valued predicate; the opposite of a multi-valued one's value)."""
    people = [(key_of(p.subject, p.predicate), p.value.strip().casefold(), p) for p in known if p.model is None]
    if not people:
        return known

    def beaten(s: Stated) -> bool:
        subject, predicate = key_of(s.subject, s.predicate)
        value = s.value.strip().casefold()
        for (p_subject, p_predicate), p_value, p in people:
            if p_subject != subject or s.stated_at > p.stated_at or s.valid_from < p.valid_from:
                continue
            if predicate in multi_valued:
                if OPPOSITES.get(p_predicate) == predicate and p_value == value:
                    return True
            elif p_predicate == predicate and p_value != value:
                return True
        return False

    return [s for s in known if s.model is None or not beaten(s)]


def _single(rows: Sequence[Stated]) -> list[_Line]:
    lines: list[_Line] = []
    for s in rows:
        last = lines[-1] if lines else None
        if last is not None and last.first.value.strip().casefold() == s.value.strip().casefold():
            last.source.extend(s.source)  # said again: the same fact
            continue
        if last is not None:
            last.valid_to = s.valid_from
        lines.append(_Line(s, s.valid_from, source=list(s.source)))
    return lines


def _multi(rows: Sequence[Stated]) -> list[_Line]:
    """Values accumulate; a value stated under the opposite predicate closes the open one."""
    lines: list[_Line] = []
    open_: dict[tuple[str, str], _Line] = {}
    for s in rows:
        predicate, value = s.predicate.strip().casefold(), s.value.strip().casefold()
        line = open_.get((predicate, value))
        if line is not None:
            line.source.extend(s.source)
            continue
        opposite = open_.pop((OPPOSITES.get(predicate, ""), value), None)
        if opposite is not None:
            opposite.valid_to = s.valid_from
        open_[(predicate, value)] = line = _Line(s, s.valid_from, source=list(s.source))
        lines.append(line)
    return lines


def _fact(line: _Line) -> Fact:
    s = line.first
    return Fact(
        id=s.id,
        subject=s.subject,
        predicate=s.predicate,
        value=s.value,
        valid_from=line.valid_from,
        valid_to=line.valid_to,
        known_from=s.known_at,
        known_to=line.known_to,
        source=list(dict.fromkeys(line.source)),
        model=s.model,
        session_id=s.session_id,
    )


def answer(facts: Sequence[Fact], ask: FactsAsk, now: datetime) -> list[Fact]:
    """The facts `ask` wants from a timeline: all of its subject and predicate with `history`, else
    those holding at `as_of` (default `now`) that the memory still held."""
    subject = None if ask.subject is None else ask.subject.strip().casefold()
    predicate = None if ask.predicate is None else ask.predicate.strip().casefold()
    at = ask.as_of or now
    out = []
    for f in facts:
        if subject is not None and f.subject.strip().casefold() != subject:
            continue
        if predicate is not None and f.predicate.strip().casefold() != predicate:
            continue
        if ask.history or (f.known_to is None and f.valid_from <= at and (f.valid_to is None or at < f.valid_to)):
            out.append(f)
    return out
