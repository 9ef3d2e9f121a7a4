"""The LangGraph store's items view (the `store:` mapping): each item put and not deleted since.

A namespace-wide view, like long-term: its store answers get, search and list_namespaces itself.
Every item of one LangGraph namespace path is an event of one helix session (`session_of`), so
one item's puts and deletes keep their order on one partition. `fold_item` is the one fold, pure,
shared by every store kind: a put replaces the value and keeps the item's first `created_at`; a
delete, a clear of the session or its erasure (`helix-es forget`) removes it.

Forgetting: a `MemoryForgotten` naming the view removes the items its `ids` name (`item_id`), as an
`ItemDeleted` would (a later put brings the key back). Only the items of the path its session
carries (the event recorded in `session_of(path)`, as the path's puts are): another path's events
are on another partition, with no order against it, so their ids fold nothing. `session` and
`offsets` mean nothing here; a retried forgetting (`Record.duplicate_of`) is applied as nothing.

Filters follow LangGraph's stores (a JSONB-like match: nested objects, lists equal element by
element, `$eq $ne $gt $gte $lt $lte`); `namespace_matches` is its prefix/suffix rule with `*`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, ClassVar, Final, Literal

import numpy as np

from helix_es.model import names
from helix_es.model.errors import ConfigError, InvalidInput
from helix_es.model.events import (
    ItemDeleted,
    ItemPut,
    ItemTouched,
    MemoryCleared,
    MemoryForgotten,
    Record,
    SessionErased,
)
from helix_es.providers.embed import Embedder, EmbedSpec, parse_embed
from helix_es.views.base import IndexView
from helix_es.views.fusion import Ranked, fuse
from helix_es.views.item_text import texts_at
from helix_es.views.keywords import KeywordIndex
from helix_es.views.vector import model_slug

VIEW_NAME = "langgraph-store"
REFRESH_GRACE = timedelta(seconds=1)
OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte")


@dataclass(frozen=True)
class ItemIndex:
    """`index:` of a `store:` mapping: which texts of each item to embed (`fields`, LangGraph's paths;
    an item's own `index` list wins), and with which embedder (a vector view's `embed:`)."""

    embed: EmbedSpec = field(default_factory=EmbedSpec)
    fields: tuple[str, ...] = ("$",)
    # vector: LangGraph's order (the best cosine of an item's texts), as its own stores rank; hybrid: that
    # order fused with BM25 over the texts at `fields` (helix_es.views.fusion), as `recall` ranks.
    search: str = "vector"


@dataclass(frozen=True)
class Items(IndexView):
    """The items view's options. The service addresses stay out of repr: a DSN may hold a password."""

    kind: ClassVar[str] = VIEW_NAME
    adapter: ClassVar[str | None] = "items"

    store: str = "memory"
    dsn: str | None = field(default=None, repr=False)
    redis_url: str | None = field(default=None, repr=False)
    index: ItemIndex | None = None

    @property
    def name(self) -> str:
        # Other vectors are another materialisation: its own consumer group, rows and checkpoints.
        return self.kind if self.index is None else f"{self.kind}-{model_slug(self.index.embed.model_id)}"

    @classmethod
    def from_config(cls, options: Mapping[str, Any], where: str) -> Items:
        raw = options.get("index")
        index = None
        if raw is not None:
            if not isinstance(raw, Mapping):
                raise ConfigError(f"{where}.index", f"must be a mapping (embed, fields), got {type(raw).__name__}")
            unknown = sorted(set(raw) - {"embed", "fields", "search"})
            if unknown:
                raise ConfigError(f"{where}.index.{unknown[0]}", "unknown key; known: embed, fields, search")
            search = raw.get("search", "vector")
            if search not in ("vector", "hybrid"):
                raise ConfigError(f"{where}.index.search", f"must be vector or hybrid, got {search!r}")
            spec = parse_embed(raw.get("embed"), f"{where}.index.embed")
            if spec.build().paid:
                raise ConfigError(
                    f"{where}.index.embed",
                    f"{spec.model_id} is paid, and a store index re-embeds on every rebuild: use a free embedder",
                )
            fields = raw.get("fields", ["$"])
            if (
                isinstance(fields, str)
                or not isinstance(fields, list)
                or not all(isinstance(f, str) and f for f in fields)
            ):
                raise ConfigError(f"{where}.index.fields", f"must be a list of field paths, got {fields!r}")
            index = ItemIndex(spec, tuple(fields) or ("$",), search)
        store = options.get("store", "memory")
        return cls(store=store, dsn=options.get("dsn"), redis_url=options.get("redis_url"), index=index)


@dataclass(frozen=True, slots=True)
class StoredItem:
    namespace: tuple[str, ...]
    key: str
    value: str  # JSON text of an object
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None = None
    score: float | None = None  # a semantic search's cosine similarity to its query
    ttl_minutes: float | None = None  # what a refresh (`ItemTouched`) extends `expires_at` by

    def live(self, now: datetime) -> bool:
        return self.expires_at is None or self.expires_at > now

    def refreshable(self, now: datetime) -> bool:
        """Whether a read at `now` with refresh extends the TTL. Not within a tenth of the TTL (at most
        a second) of the last put or refresh: hot reads do not each append an event, and the expiry
        they leave is at most that much short of a full TTL from the read."""
        if self.ttl_minutes is None or self.expires_at is None or not self.live(now):
            return False
        ttl = timedelta(minutes=self.ttl_minutes)
        return self.expires_at - now <= ttl - min(ttl / 10, REFRESH_GRACE)

    def data(self) -> dict[str, Any]:
        return dict(json.loads(self.value))


@dataclass(frozen=True, slots=True)
class Expired:
    """A TTL sweep's forgetting of an item (`MemoryForgotten` with policy `ttl`): the item goes only if it
    has expired by the op's time, so a put that came after the sweep looked keeps it."""

    namespace: tuple[str, ...]
    key: str


@dataclass(frozen=True, slots=True)
class ItemOp:
    """One event of the view, as every store applies it."""

    offset: int
    session_id: str
    at: datetime
    payload: ItemPut | ItemDeleted | ItemTouched | Expired | None  # None: the session's items go (a clear, an erasure)

    @property
    def ident(self) -> tuple[tuple[str, ...], str] | None:
        return None if self.payload is None else (self.payload.namespace, self.payload.key)

    @property
    def refresh(self) -> bool:
        """A read's refresh: the item's expiry moves, its vectors stay."""
        return isinstance(self.payload, ItemTouched)

    def keeps_vectors(self, item: StoredItem | None) -> bool:
        """Whether the item's stored vectors stay after this op left it as `item`: a refresh, or a sweep
        that found it live."""
        return self.refresh or (item is not None and isinstance(self.payload, Expired))


def rank(
    found: Sequence[tuple[StoredItem, np.ndarray | None]], query: np.ndarray, limit: int, offset: int
) -> list[StoredItem]:
    """A semantic search's page, as LangGraph's stores rank: by the best cosine of an item's texts to
    the query (ties in `order`), then, if the page is short, items without vectors unscored."""
    scored = []
    unscored = []
    query = np.asarray(query, dtype=np.float64)
    q_norm = float(np.linalg.norm(query))
    for item, found_vectors in found:
        if found_vectors is None or not len(found_vectors):
            unscored.append(item)
            continue
        vectors = np.asarray(found_vectors, dtype=np.float64)
        norms = np.linalg.norm(vectors, axis=1) * q_norm
        sims = np.divide(vectors @ query, norms, out=np.zeros(len(vectors)), where=norms != 0)
        scored.append(replace(item, score=float(sims.max())))
    scored.sort(key=lambda i: -(i.score or 0.0))  # stable: ties keep `order`
    page = scored[offset : offset + limit]
    return page + unscored[: max(0, limit - len(page))]


def order(item: StoredItem) -> tuple[datetime, tuple[str, ...], str]:
    """A search's order in every store: items first put earliest first (a re-put keeps its place)."""
    return item.created_at, item.namespace, item.key


def ops(records: Sequence[Record], view: str = VIEW_NAME) -> tuple[str, int, list[ItemOp]]:
    """The operations of view `view` in a batch of one topic-partition; other events (messages) pass."""
    position = records[0].position
    out: list[ItemOp] = []
    for r in records:
        payload, sid, at = r.event.payload, r.event.session_id, r.event.timestamp
        if isinstance(payload, ItemPut | ItemDeleted | ItemTouched):
            if session_of(payload.namespace) == sid:  # a foreign writer's mismatch folds nothing
                out.append(ItemOp(r.position.offset, sid, at, payload))
        elif isinstance(payload, MemoryCleared | SessionErased):
            out.append(ItemOp(r.position.offset, sid, at, None))
        elif isinstance(payload, MemoryForgotten) and payload.names(view) and r.duplicate_of is None:
            # A forgotten item goes as a delete does: only on its path's own partition is it ordered.
            named = [parse_item_id(i) for i in payload.ids]
            gone = Expired if payload.policy == "ttl" else ItemDeleted
            out += [ItemOp(r.position.offset, sid, at, gone(p, k)) for p, k in named if path_id(p) == sid]
    return position.topic, position.partition, out


def item_id(namespace: Sequence[str], key: str) -> str:
    """How a `MemoryForgotten` names a store item in its `ids`."""
    return json.dumps([list(namespace), key])


def parse_item_id(text: str) -> tuple[tuple[str, ...], str]:
    """The (namespace path, key) an `item_id` names; ((), "") for a malformed one (it names no item)."""
    try:
        path, key = json.loads(text)
    except (ValueError, TypeError):
        return (), ""
    if not isinstance(path, list) or not all(isinstance(label, str) for label in path) or not isinstance(key, str):
        return (), ""
    return tuple(path), key


def fold_item(current: StoredItem | None, op: ItemOp) -> StoredItem | None:
    """The item after `op` (which names it): the pure fold every store applies. A touch extends a
    live item's TTL from the touch's time; of a missing or expired item, or one without a TTL, it
    changes nothing (a refresh never brings an item back)."""
    payload = op.payload
    if isinstance(payload, ItemTouched):
        if current is None or current.ttl_minutes is None or not current.live(op.at):
            return current
        return replace(current, expires_at=op.at + timedelta(minutes=current.ttl_minutes))
    if isinstance(payload, Expired):
        return current if current is not None and current.live(op.at) else None
    if not isinstance(payload, ItemPut):
        return None
    ttl = payload.ttl_minutes
    expires = None if ttl is None else op.at + timedelta(minutes=ttl)
    created = op.at if current is None else current.created_at
    return StoredItem(payload.namespace, payload.key, payload.value, created, op.at, expires, ttl_minutes=ttl)


Ident = tuple[str, str]  # (path id: the session that carries the path, key)
KEEP: Final = "keep"  # a written item's vectors stay as stored: only its expiry changed (a refresh)
Vectors = np.ndarray | None | Literal["keep"]


def fold_batch(
    current: Mapping[Ident, StoredItem], fresh: Sequence[ItemOp], vectors: Mapping[int, np.ndarray | None]
) -> tuple[dict[Ident, StoredItem], dict[Ident, Vectors]]:
    """The items of the paths `fresh` touches after it (from their `current` items), and of every item
    the batch changed, the vectors to store (by offset in `vectors`, from the put that left it; `KEEP`
    after a refresh alone): the batch step of the stores that load a batch's paths, fold and write
    back what changed (PostgreSQL, Redis)."""
    state = dict(current)
    put: dict[Ident, Vectors] = {}
    for op in fresh:
        ident = op.ident
        if ident is None:  # a clear or an erasure: every item of the session's path goes
            for k in [k for k in state if k[0] == op.session_id]:
                del state[k]
                put.pop(k, None)
            continue
        k = (op.session_id, ident[1])
        before = state.get(k)
        item = fold_item(before, op)
        if item is not None and isinstance(op.payload, Expired):
            continue  # still live: a sweep's forgetting leaves it as it is, vectors and all (`keeps_vectors`)
        if op.refresh:
            if item is not None and item != before:
                state[k] = item
                put.setdefault(k, KEEP)  # after a put in this batch, that put's vectors
            continue
        if item is None:
            state.pop(k, None)
            put.pop(k, None)
        else:
            state[k] = item
            put[k] = vectors.get(op.offset)
    return state, put


def choose(
    found: Sequence[tuple[StoredItem, np.ndarray | None]],
    where: Mapping[str, Any] | None,
    limit: int,
    offset: int,
    query: np.ndarray | None,
    *,
    text: str | None = None,
    index: ItemIndex | None = None,
) -> list[StoredItem]:
    """A search's page of `found` (live items in `order`, each with its vectors): those `where` passes,
    ranked by `query` when given (`rank`, or `hybrid` for an index with `search: hybrid`), else in order."""
    passing = [(item, v) for item, v in found if matches(item.data(), where)]
    if query is not None and text and index is not None and index.search == "hybrid":
        return hybrid(passing, query, text, index.fields, limit, offset)
    if query is not None:
        return rank(passing, query, limit, offset)
    return [item for item, _ in passing[offset : offset + limit]]


def hybrid(
    found: Sequence[tuple[StoredItem, np.ndarray | None]],
    query: np.ndarray,
    text: str,
    fields: Sequence[str],
    limit: int,
    offset: int,
) -> list[StoredItem]:
    """`rank`'s cosine order fused with BM25 over the texts at `fields` (reciprocal rank, as recall
    fuses): an item's `score` is the fused one. Items neither ranker found fill a short page, in order."""
    ranked = rank(found, query, len(found), 0)
    scored = [i for i, item in enumerate(ranked) if item.score is not None]
    keywords = KeywordIndex()
    keywords.add(range(len(ranked)), [" ".join(t for f in fields for t in texts_at(i.data(), f)) for i in ranked])
    ids, scores = keywords.top(text, len(ranked))
    rankings = [
        Ranked("vector", np.array(scored, np.int64), np.array([ranked[i].score or 0.0 for i in scored], np.float32)),
        Ranked("keyword", ids, scores),
    ]
    fused = fuse(rankings, {}, limit=len(ranked))
    seen = {f.id for f in fused}
    page = [replace(ranked[f.id], score=f.score) for f in fused]
    page += [item for i, item in enumerate(ranked) if i not in seen]
    return page[offset : offset + limit]


def texts(index: ItemIndex | None, payload: ItemPut) -> list[str]:
    """What an item put embeds: nothing without an index or with `index: False`, else the texts at
    the put's own field paths or the index's."""
    if index is None or payload.index is False:
        return []
    value = json.loads(payload.value)
    paths = payload.index if isinstance(payload.index, tuple) else index.fields
    return [t for path in paths for t in texts_at(value, path)]


async def embed(embedder: Embedder | None, index: ItemIndex | None, batch: Sequence[ItemOp]) -> list[np.ndarray | None]:
    """Per op, the vectors of the texts its put embeds (None: no vectors), in one call for the batch."""
    per_op = [texts(index, op.payload) if isinstance(op.payload, ItemPut) else [] for op in batch]
    flat = [t for ts in per_op for t in ts]
    if embedder is None or not flat:
        return [None] * len(batch)
    vectors = await embedder.embed(flat)
    out: list[np.ndarray | None] = []
    at = 0
    for ts in per_op:
        out.append(vectors[at : at + len(ts)] if ts else None)
        at += len(ts)
    return out


def session_of(namespace: Sequence[str]) -> str:
    """The helix session id that carries a LangGraph namespace path's items: its labels joined by "/",
    each escaped so that the id is printable, brace-free and tells the path back (`namespace_of`)."""
    sid = path_id(namespace)
    names.check_session_id(sid, "namespace")
    return sid


def path_id(namespace: Sequence[str]) -> str:
    """`session_of` unchecked: the ids of the paths under a prefix are this one, or start with it and "/"."""
    return "/".join(_escape(label) for label in namespace)


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


class NoMessages:
    """A `Projection`'s message reads, which every items store refuses: HelixStore reads items."""

    name: str

    async def get(self, key: object, want: object) -> None:
        raise not_messages(self.name)

    async def search(self, key: object, query: str, limit: int, want: object) -> None:
        raise not_messages(self.name)
