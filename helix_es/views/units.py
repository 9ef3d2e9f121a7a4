"""The units a view evicts: a tool exchange (docs/views/index.md, "Tool calls in views") or one message.

An exchange is an assistant message with `tool_calls` and the tool messages right after it
that answer its call ids. Evicting whole units keeps `get()` valid OpenAI and Anthropic input:
no tool result without its call, no call without its results. `tool_pairs: split` is the
seed's literal cut, message by message, under the view's old name.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from helix_es.model.errors import ConfigError
from helix_es.model.message import Message

WHOLE = "whole"
SPLIT = "split"
TOOL_PAIRS = (WHOLE, SPLIT)


def units(items: Sequence[Message]) -> Iterator[tuple[int, int]]:
    """(start, end) of each eviction unit: a tool-calling assistant message with its answers, or one item.
    A tool message whose call is not right before it (an orphan) is a unit of its own."""
    i = 0
    while i < len(items):
        end = i + 1
        if items[i].tool_calls:
            ids = {c.id for c in items[i].tool_calls}
            while end < len(items) and items[end].role == "tool" and items[end].tool_call_id in ids:
                end += 1
        yield i, end
        i = end


def front_cut(items: Sequence[Message], at_least: int) -> int:
    """How many of `items` (oldest first) to evict so that at least `at_least` go, in whole units.

    The newest unit always stays (an `add` is never invisible, even one over the budget), so
    fewer may go. An orphan tool message left in front goes too: nothing may answer a missing call.
    """
    if at_least <= 0 or not items:
        return 0
    if at_least < len(items) and items[at_least].role != "tool":
        return at_least  # only tool messages continue a unit: this one starts one (the common case)
    newest = newest_unit(items)
    # Lazily from the front: windows ask on every add, and only the oldest units are looked at.
    cut = min(next((s for s, _ in units(items) if s >= at_least), newest), newest)
    while cut < newest and items[cut].role == "tool":  # orphans are one-message units
        cut += 1
    return cut


def newest_unit(items: Sequence[Message]) -> int:
    """Where the newest unit of `items` starts (as `units` would end), found from the back."""
    if not items:
        return 0
    last = len(items) - 1
    j = last
    while j > 0 and items[j].role == "tool":
        j -= 1
    if j == last or not items[j].tool_calls:
        return last  # a plain message, or orphan results after one: each its own unit
    ids = {c.id for c in items[j].tool_calls}
    answered = all(m.tool_call_id in ids for m in items[j + 1 :])
    return j if answered else last  # a result of another call after them is an orphan


def orphan(held: Sequence[Message], message: Message) -> bool:
    """Whether `message` is a tool result whose call is not among the newest calls of `held`.

    A view that evicts can lose a call that the log still holds: retractions that reach past the
    window, then the results added again. Such a result is not kept, since nothing before it could
    be sent with it (the uncapped conversation holds every call, and `split` keeps the seed's cut).
    The newest calls are the trailing run of calls and results, so the Agents SDK's parallel
    calls (each call its own message, then the results) still find theirs.
    """
    if message.role != "tool":
        return False
    calls: set[str] = set()
    j = len(held)
    while j > 0 and (held[j - 1].role == "tool" or held[j - 1].tool_calls):
        j -= 1
        calls.update(c.id for c in held[j].tool_calls)
    return message.tool_call_id not in calls


def check_tool_pairs(value: object) -> None:
    if value not in TOOL_PAIRS:
        raise ConfigError("tool_pairs", f"must be one of {', '.join(TOOL_PAIRS)}, got {value!r}")


def pairs_suffix(tool_pairs: str) -> str:
    """Part of a view's name: whole exchanges fold differently from the seed's cut, so it is another view
    and no stored view is reinterpreted."""
    return "-pairs" if tool_pairs == WHOLE else ""
