"""How `helix-es audit` shows forgetting, compaction and erasure (schema v10): what left which view, and why."""

from __future__ import annotations

from collections.abc import Sequence

from helix_es.history.describe import quote, word
from helix_es.model.events import MemoryForgotten, MessageAdded, Record, SessionCompacted, SubjectErased

FORGET_EVENTS = (MemoryForgotten, SessionCompacted, SubjectErased)
SHOWN = 8  # offsets listed before "and N more"


def describe_forget(p: MemoryForgotten | SessionCompacted | SubjectErased) -> str:
    if isinstance(p, MemoryForgotten):
        views = ", ".join(word(v) for v in p.views)
        why = f"policy {p.policy}" + (f" ({quote(p.reason)})" if p.reason else "")
        what = []
        if p.session and p.ids:  # a TTL sweep's guard: the newest checkpoint it saw
            what.append(f"the whole thread, unless it saved after checkpoint {word(max(p.ids))}")
        elif p.session:
            what.append("the whole session")
        if p.offsets:
            listed = ", ".join(f"@{o}" for o in p.offsets[:SHOWN])
            more = f" and {len(p.offsets) - SHOWN} more" if len(p.offsets) > SHOWN else ""
            what.append(f"the messages added at {listed}{more}")
        if p.ids and not p.session:
            listed = ", ".join(word(i) for i in p.ids[:SHOWN])
            more = f" and {len(p.ids) - SHOWN} more" if len(p.ids) > SHOWN else ""
            what.append(f"items {listed}{more}")
        return f"forgotten from {views} by {why}: {'; '.join(what) or 'nothing'} (the log keeps them)"
    if isinstance(p, SessionCompacted):
        model = f", model {quote(p.model)}" if p.model else ""
        return (
            f"compacted view {word(p.view)}: {p.covers} messages (@{p.first}..@{p.last}) stand as one summary"
            f"{model}: {quote(p.summary)}"
        )
    return f"erasure {word(p.request)} of subject {quote(p.subject)}: receipt recorded"


def departures(records: Sequence[Record]) -> dict[int, str]:
    """Per add offset of a session's records, why its message left views (the first reason on the log):
    forgotten by a policy or an erasure, or compacted into a summary."""
    adds = sorted(r.position.offset for r in records if isinstance(r.event.payload, MessageAdded))
    out: dict[int, str] = {}
    for r in records:
        p, at = r.event.payload, r.position.offset
        if isinstance(p, MemoryForgotten):
            named = [o for o in adds if o < at] if p.session else [o for o in p.offsets if o < at]
            why = f"forgotten from {', '.join(p.views)} by {p.policy} at @{at}"
        elif isinstance(p, SessionCompacted):
            named = [o for o in adds if p.first <= o <= p.last]
            why = f"compacted into the summary at @{at}"
        else:
            continue
        for offset in named:
            out.setdefault(offset, why)
    return out
