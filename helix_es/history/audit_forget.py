"""How `helix-es audit` shows forgetting, compaction and erasure (schema v10): what left which view, and why."""

from __future__ import annotations

from helix_es.history.describe import quote, word
from helix_es.model.events import MemoryForgotten, SessionCompacted, SubjectErased

FORGET_EVENTS = (MemoryForgotten, SessionCompacted, SubjectErased)
SHOWN = 8  # offsets listed before "and N more"


def describe_forget(p: MemoryForgotten | SessionCompacted | SubjectErased) -> str:
    if isinstance(p, MemoryForgotten):
        views = ", ".join(word(v) for v in p.views)
        why = f"policy {p.policy}" + (f" ({quote(p.reason)})" if p.reason else "")
        what = []
        if p.session:
            what.append("the whole session")
        if p.offsets:
            listed = ", ".join(f"@{o}" for o in p.offsets[:SHOWN])
            more = f" and {len(p.offsets) - SHOWN} more" if len(p.offsets) > SHOWN else ""
            what.append(f"the messages added at {listed}{more}")
        if p.ids:
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
