"""How `helix-es audit` shows the knowledge events (schema v9): facts extracted, asserted, retracted, merged.

A fact reads `subject predicate value`, each a plain word as it is and any other text JSON-quoted, so
control characters stay inert and a value with spaces stays one value.
"""

from __future__ import annotations

from datetime import datetime

from helix_es.history.describe import quote, word
from helix_es.model.events import (
    ExtractedFact,
    FactAsserted,
    FactRetracted,
    FactsExtracted,
    FactsMerged,
    FactsUnmerged,
)

FACT_EVENTS = (FactsExtracted, FactAsserted, FactRetracted, FactsMerged, FactsUnmerged)
SHOWN = 5  # facts of an extraction listed inline; its JSON has them all


def _fact(subject: str, predicate: str, value: str, valid_from: datetime | None = None) -> str:
    since = f" since {valid_from.isoformat()}" if valid_from is not None else ""
    return f"{word(subject)} {word(predicate)} {word(value)}{since}"


def _extracted(f: ExtractedFact) -> str:
    return _fact(f.subject, f.predicate, f.value, f.valid_from)


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _reason(reason: str | None) -> str:
    return f", reason {quote(reason)}" if reason else ""


def describe(p: FactsExtracted | FactAsserted | FactRetracted | FactsMerged | FactsUnmerged) -> str:
    """The event on one line, for people."""
    if isinstance(p, FactsExtracted):
        head = f"view={word(p.view)} model={word(p.model)} {_count(len(p.facts), 'fact')} from "
        head += _count(len(p.sources), "turn")
        if not p.facts:
            return head
        shown = "; ".join(_extracted(f) for f in p.facts[:SHOWN])
        more = f"; … {len(p.facts) - SHOWN} more" if len(p.facts) > SHOWN else ""
        return f"{head}: {shown}{more}"
    if isinstance(p, FactAsserted):
        return _fact(p.subject, p.predicate, p.value, p.valid_from) + _reason(p.reason)
    if isinstance(p, FactRetracted):
        return f"{word(p.fact_id)} ({_fact(p.subject, p.predicate, p.value)})" + _reason(p.reason)
    if isinstance(p, FactsMerged):
        ids = ", ".join(word(i) for i in p.fact_ids) or "no facts"
        return f"{ids} into {word(p.fact_ids[0])}" if len(p.fact_ids) > 1 else ids
    m = p.merged
    return f"undoes the merge at {word(m.topic)}/{m.partition}/{m.offset}"
