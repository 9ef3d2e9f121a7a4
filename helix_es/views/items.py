"""The LangGraph store's items view (the `store:` mapping): each item put and not deleted since.

A namespace-wide view, like long-term: its store answers get, search and list_namespaces itself.
Every item of one LangGraph namespace path is an event of one helix session (`session_of`), so
one item's puts and deletes keep their order on one partition. `fold_item` is the one fold, pure,
shared by every store kind: a put replaces the value and keeps the item's first `created_at`; a
delete, a clear of the session or its erasure (`helix-es forget`) removes it.

Filters follow LangGraph's stores (a JSONB-like match: nested objects, lists equal element by
element, `$eq $ne $gt $gte $lt $lte`); `namespace_matches` is its prefix/suffix rule with `*`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar

from helix_es.model import names
from helix_es.model.errors import ConfigError, InvalidInput
from helix_es.model.events import ItemDeleted, ItemPut, MemoryCleared, Record, SessionErased
from helix_es.views.base import IndexView

VIEW_NAME = "langgraph-store"
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


@dataclass(frozen=True)
class Items(IndexView):
    """The items view's options. The service addresses stay out of repr: a DSN may hold a password."""

    kind: ClassVar[str] = VIEW_NAME

    store: str = "memory"
    dsn: str | None = field(default=None, repr=False)
    redis_url: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class StoredItem:
    namespace: tuple[str, ...]
    key: str
    value: str  # JSON text of an object
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None

    def live(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at > now

    def data(self) -> dict[str, Any]:
        return dict(json.loads(self.value))


@dataclass(frozen=True, slots=True)
class ItemOp:
    """One event of the view, as every store applies it."""

    offset: int
    session_id: str
    at: datetime
    payload: ItemPut | ItemDeleted | None  # None: the whole session's items go (a clear, an erasure)

    @property
    def ident(self) -> tuple[tuple[str, ...], str] | None:
        return None if self.payload is None else (self.payload.namespace, self.payload.key)


def order(item: StoredItem) -> tuple[datetime, tuple[str, ...], str]:
    """A search's order in every store: items first put earliest first (a re-put keeps its place)."""
    return item.created_at, item.namespace, item.key


def ops(records: Sequence[Record]) -> tuple[str, int, list[ItemOp]]:
    """The view's operations in a batch of one topic-partition; other events (messages) pass."""
    position = records[0].position
    out: list[ItemOp] = []
    for r in records:
        payload = r.event.payload
        if isinstance(payload, ItemPut | ItemDeleted):
            if session_of(payload.namespace) == r.event.session_id:  # a foreign writer's mismatch folds nothing
                out.append(ItemOp(r.position.offset, r.event.session_id, r.event.timestamp, payload))
        elif isinstance(payload, MemoryCleared | SessionErased):
            out.append(ItemOp(r.position.offset, r.event.session_id, r.event.timestamp, None))
    return position.topic, position.partition, out


def fold_item(current: StoredItem | None, op: ItemOp) -> StoredItem | None:
    """The item after `op` (which names it): the pure fold every store applies."""
    payload = op.payload
    if not isinstance(payload, ItemPut):
        return None
    expires = None if payload.ttl_minutes is None else op.at + timedelta(minutes=payload.ttl_minutes)
    created = op.at if current is None else current.created_at
    return StoredItem(payload.namespace, payload.key, payload.value, created, op.at, expires)


def session_of(namespace: Sequence[str]) -> str:
    """The helix session id that carries a LangGraph namespace path's items: its labels joined by "/",
    each escaped so that the id is printable, brace-free and tells the path back (`namespace_of`)."""
    sid = "/".join(_escape(label) for label in namespace)
    names.check_session_id(sid, "namespace")
    return sid


def namespace_of(session_id: str) -> tuple[str, ...]:
    from urllib.parse import unquote

    return tuple(unquote(label) for label in session_id.split("/"))


def _escape(label: str) -> str:
    out: list[str] = []
    for ch in label:
        if ch in "%/{}" or not ch.isprintable() or (ch.isspace() and ch != " "):
            out.extend(f"%{b:02X}" for b in ch.encode())
        else:
            out.append(ch)
    return "".join(out)


def check_namespace(namespace: object, field_name: str = "namespace") -> tuple[str, ...]:
    """A LangGraph namespace path: a non-empty tuple of non-empty labels without periods."""
    if not isinstance(namespace, tuple) or not namespace:
        raise InvalidInput(field_name, f"must be a non-empty tuple of strings, got {namespace!r}")
    for label in namespace:
        if not isinstance(label, str) or not label or "." in label:
            raise InvalidInput(field_name, f"labels must be non-empty strings without '.', got {label!r}")
    return namespace


def matches(value: Mapping[str, Any], where: Mapping[str, Any] | None) -> bool:
    """Whether an item's value passes a search filter (every key must match)."""
    return not where or all(_compare(value.get(k), v) for k, v in where.items())


def plain_equalities(where: Mapping[str, Any] | None) -> dict[str, Any]:
    """The part of a filter that JSONB containment (`@>`) can check: objects and scalars compared for
    equality. Containment is looser for lists (and drops operators), so `matches` decides after it."""
    out: dict[str, Any] = {}
    for k, v in (where or {}).items():
        if isinstance(v, dict):
            if not any(str(x).startswith("$") for x in v):
                out[k] = plain_equalities(v)
        elif v is not None and not isinstance(v, list | tuple):  # None also matches a missing key
            out[k] = v
    return out


def _compare(have: Any, want: Any) -> bool:
    if isinstance(want, dict):
        if any(k.startswith("$") for k in want):
            return all(_operator(have, op, arg) for op, arg in want.items())
        return isinstance(have, dict) and all(_compare(have.get(k), v) for k, v in want.items())
    if isinstance(want, list | tuple):
        return isinstance(have, list | tuple) and len(have) == len(want) and all(map(_compare, have, want))
    return bool(have == want)


def _operator(have: Any, op: str, arg: Any) -> bool:
    if op == "$eq":
        return bool(have == arg)
    if op == "$ne":
        return bool(have != arg)
    if op not in OPERATORS:
        raise InvalidInput("filter", f"unknown operator {op!r}; known: {', '.join(OPERATORS)}")
    try:
        a, b = float(have), float(arg)
    except (TypeError, ValueError):
        return False  # a missing or non-numeric field is neither above nor below
    return {"$gt": a > b, "$gte": a >= b, "$lt": a < b, "$lte": a <= b}[op]


def namespace_matches(namespace: tuple[str, ...], conditions: Iterable[tuple[str, tuple[str, ...]]]) -> bool:
    """LangGraph's match conditions: (match_type "prefix" | "suffix", path with "*" wildcards)."""
    for kind, path in conditions:
        if len(namespace) < len(path):
            return False
        if kind not in ("prefix", "suffix"):
            raise InvalidInput("match_conditions", f"match_type must be prefix or suffix, got {kind!r}")
        head = namespace[: len(path)] if kind == "prefix" else namespace[len(namespace) - len(path) :]
        if any(p != "*" and n != p for n, p in zip(head, path, strict=True)):
            return False
    return True


def list_namespaces(
    found: Iterable[tuple[str, ...]],
    conditions: Iterable[tuple[str, tuple[str, ...]]],
    max_depth: int | None,
    limit: int,
    offset: int,
) -> list[tuple[str, ...]]:
    """LangGraph's list_namespaces over the namespaces that hold live items."""
    conditions = list(conditions)
    chosen = [ns for ns in set(found) if namespace_matches(ns, conditions)]
    if max_depth is not None:
        chosen = list({ns[:max_depth] for ns in chosen})
    return sorted(chosen)[offset : offset + limit]


def not_messages(view: str) -> ConfigError:
    return ConfigError("memory.type", f"{view} holds LangGraph store items, not messages: read it with HelixStore")
