"""Facts as an aligned table for people (`helix-es facts`, `helix-es facts diff`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from helix_es.cli.audit import table
from helix_es.history.describe import quote
from helix_es.model.facts import Fact


def _cell(text: str) -> str:
    """Text as it is when it prints as one line, else JSON-quoted: control characters stay inert."""
    return text if text.isprintable() else quote(text)


def _moment(at: datetime | None) -> str:
    return "now" if at is None else at.strftime("%Y-%m-%d %H:%M:%S")


def render(namespace: str, facts: Sequence[Fact], *, history: bool, what: str | None = None) -> str:
    """The facts as an aligned table: what, when it held (valid), when the memory held it (known), by whom."""
    what = what or ("every fact, superseded and retracted ones too" if history else "the facts holding")
    if not facts:
        return f"no facts in {namespace} ({what})"
    rows = [["SUBJECT", "PREDICATE", "VALUE", "VALID (UTC)", "KNOWN (UTC)", "BY", "ID"]]
    for f in facts:
        rows.append(
            [
                _cell(f.subject),
                _cell(f.predicate),
                _cell(f.value),
                f"{_moment(f.valid_from)} → {_moment(f.valid_to)}",
                f"{_moment(f.known_from)} → {_moment(f.known_to)}",
                _cell(f.model) if f.model is not None else "person",
                f.id,
            ]
        )
    count = f"{len(facts)} fact{'s' if len(facts) != 1 else ''}"
    return "\n".join([f"{count} in {namespace} ({what})", "", *table(rows)])
