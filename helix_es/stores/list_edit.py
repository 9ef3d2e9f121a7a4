"""The cheapest edit of a stored list (a session view's messages) into its next state: stores of
lists (Redis, PostgreSQL) write the edit, not the whole list."""

from __future__ import annotations

from dataclasses import dataclass

from helix_es.views.base import State


@dataclass(frozen=True, slots=True)
class ListEdit:
    """`after = before[:keep] + before[keep + drop:] + append`; drop -1 means replace everything."""

    keep: int
    drop: int
    append: State


def list_edit(before: State, after: State) -> ListEdit:
    """The cheapest edit of a stored list into `after`: windows drop at the front and append."""
    best: ListEdit | None = None
    for keep in (0, 1):
        if keep > len(before) or keep > len(after) or before[:keep] != after[:keep]:
            continue
        rest_before, rest_after = before[keep:], after[keep:]
        for drop in range(max(0, len(rest_before) - len(rest_after)), len(rest_before) + 1):
            tail = rest_before[drop:]
            if rest_after[: len(tail)] == tail:
                if best is None or len(rest_after) - len(tail) < len(best.append):
                    best = ListEdit(keep, drop, rest_after[len(tail) :])
                break
    return best or ListEdit(0, -1, after)
