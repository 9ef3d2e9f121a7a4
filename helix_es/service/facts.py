"""Facts over the wire, shared by the REST service, the MCP tools and the CLI.

A namespace's facts come from its memory's facts view (a composite's first facts part): reads
are `Memory.facts`, people's corrections `assert_fact` and `retract_fact`, each one event on the
log. Those events go to the session `FACTS_SESSION` of the namespace (REST, MCP and the CLI name
no session), whose memory also answers the reads, so a read waits for the server's own writes.

- `GET /v1/{namespace}/facts?subject=&predicate=&as_of=&known_as_of=&history=` answers
  `{"facts": [...]}`, each fact as `Fact.to_json()`;
- `POST /v1/{namespace}/facts` with `{"subject", "predicate", "value", "valid_from"?}` asserts one
  (201, `{"positions": [...]}` and an `X-Helix-After` token, as an add answers);
- `DELETE /v1/{namespace}/facts/{fact_id}?reason=` retracts one (200, the same answer).

Bad input is `InvalidInput` naming the field (422); a memory without a facts view names `memory`;
an id no fact of the namespace has names `fact_id`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from helix_es.model.errors import InvalidInput
from helix_es.model.events import Position
from helix_es.model.facts import Fact, check_time
from helix_es.service import recall as recalls

FACTS_SESSION = "facts"  # where REST, MCP and CLI corrections are recorded (their provenance on the log)
FILTERS = ("subject", "predicate", "as_of", "known_as_of", "history")
ASSERTED = ("subject", "predicate", "value", "valid_from")


def method(memory: Any, name: str) -> Callable[..., Awaitable[Any]]:
    """`memory.<name>` (through middleware), or `InvalidInput` naming `memory` for one that has none."""
    found: Callable[..., Awaitable[Any]] | None = getattr(memory, name, None)
    if not callable(found):
        raise InvalidInput("memory", f"{type(memory).__name__} holds no facts: configure a facts view")
    return found


def filters(params: Mapping[str, Any]) -> dict[str, Any]:
    """`Memory.facts`'s keyword arguments from a query string or tool arguments (times as ISO-8601
    text with an offset, `history` text or a bool); empty text is absent, other keys are ignored."""
    given = {k: params[k] for k in FILTERS if params.get(k) not in (None, "")}
    history = given.get("history", False)
    return {
        "subject": given.get("subject"),
        "predicate": given.get("predicate"),
        "as_of": check_time(recalls.when(given.get("as_of"), "as_of"), "as_of"),
        "known_as_of": check_time(recalls.when(given.get("known_as_of"), "known_as_of"), "known_as_of"),
        "history": history if isinstance(history, bool) else recalls.flag(history, "history"),
    }


def assertion(body: Any) -> dict[str, Any]:
    """`assert_fact`'s keyword arguments from a JSON body: subject, predicate, value, valid_from (optional,
    ISO-8601 with an offset); any other key is refused by name."""
    if not isinstance(body, dict):
        raise InvalidInput("body", 'must be an object: {"subject": ..., "predicate": ..., "value": ...}')
    unknown = sorted(set(body) - set(ASSERTED))
    if unknown:
        raise InvalidInput(unknown[0], f"is not a field of a fact to assert (they are {', '.join(ASSERTED)})")
    for name in ASSERTED[:3]:
        if name not in body:
            raise InvalidInput(name, "is required")
    valid_from = body.get("valid_from")
    if valid_from is not None and not isinstance(valid_from, str):
        raise InvalidInput("valid_from", f"must be an ISO-8601 time with an offset, got {valid_from!r}")
    return {
        "subject": body["subject"],
        "predicate": body["predicate"],
        "value": body["value"],
        "valid_from": check_time(recalls.when(valid_from, "valid_from"), "valid_from"),
    }


def facts_json(facts: Sequence[Fact]) -> dict[str, Any]:
    return {"facts": [f.to_json() for f in facts]}


async def read(memory: Any, params: Mapping[str, Any]) -> list[Fact]:
    found: list[Fact] = await method(memory, "facts")(**filters(params))
    return found


async def assert_one(memory: Any, body: Any) -> Position:
    position: Position = await method(memory, "assert_fact")(**assertion(body))
    return position


async def retract_one(memory: Any, fact_id: str, reason: str | None) -> Position:
    position: Position = await method(memory, "retract_fact")(fact_id, reason)
    return position
