"""Redis items of a LangGraph store (`helix_es.views.items`), folded from the log.

Layout, for view `<view>` (`langgraph-store`, or with an index `langgraph-store-<model>`) of helix
namespace `<ns>`; every key carries the hash tag `{<ns>}`, so a namespace's items share one slot:

- `helix:items:{<ns>}:<view>:i:<path id>`: a hash per LangGraph namespace path (its id is the helix
  session that carries it, `helix_es.views.items.session_of`): key -> JSON
  `[path labels, value (JSON text), created_at, updated_at, expires_at, ttl_minutes]` (ISO times;
  expires_at and ttl_minutes null without a TTL; rows written before refreshes have no ttl_minutes).
- `helix:items:{<ns>}:<view>:v:<path id>`: key -> the item's vectors, float32 bytes (index only).
- `helix:items:{<ns>}:<view>:applied`: the path guards, path id -> the offset it last applied. A
  path's events all go to one partition (its session's), so one offset orders them.
- `helix:checkpoint:<view>`: hash `<topic>:<partition>` -> last applied offset (as every view).

`apply` loads the guards and items of the paths a batch touches (one script), folds the ops past
each guard in Python (`fold_batch`: the fold every store shares), then writes what changed with a
compare-and-set on those guards: one script in the namespace's slot. A guard that moved since the
load (another projector) refuses the whole write, and `apply` loads again. On one server the same
script moves the checkpoint; on a cluster the checkpoint (another slot) moves forward only after
the data is on a replica (`WAIT`, `helix_es.stores.redis.cluster.replicated`). Re-delivered ops are
at or below their path's guard, so a replay is a no-op even when the checkpoint lags.

Expired items stay until replaced or deleted (as in PostgreSQL): reads skip them. A search lists the
paths under its prefix from the guards (HSCAN), reads them `PAGE` paths per script call (so no call
holds Redis up for long, as long-term's search), and filters, orders and ranks in Python: each path
is read as it was at once, a batch that lands meanwhile may show in some paths and not yet in others.

Forgetting: `ops`, given the store's view name, turns the item ids a forgetting names into deletes of
the event's own path, so its guard orders them as any delete.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import numpy as np

from helix_es.model import names
from helix_es.model.events import Position, Record
from helix_es.stores.ports import Applied, CheckpointLost, SessionKey, StaleWrite
from helix_es.stores.redis.cluster import replicated
from helix_es.stores.redis.pool import is_cluster, text
from helix_es.stores.redis.views import ADVANCE, delete_matching
from helix_es.stores.redis.wide import WideStore
from helix_es.views.items import (
    KEEP,
    Ident,
    ItemOp,
    Items,
    NoMessages,
    StoredItem,
    choose,
    embed,
    fold_batch,
    list_namespaces,
    ops,
    order,
    path_id,
    session_of,
)

# KEYS: the guards, the n items hashes of paths ARGV[1..n], then (for vectors) their n vectors hashes.
# Per path: its guard ('' if none), its items, its vectors ({} without).
_READ = """
local n = #ARGV
local out = {}
for i = 1, n do
  out[#out + 1] = redis.call('HGET', KEYS[1], ARGV[i]) or ''
  out[#out + 1] = redis.call('HGETALL', KEYS[i + 1])
  if #KEYS > n + 1 then out[#out + 1] = redis.call('HGETALL', KEYS[n + 1 + i]) else out[#out + 1] = {} end
end
return out
"""

# The compare-and-set of a batch, from KEYS[B + 1] (the guards) on: per path its items and vectors hashes.
# ARGV per path: path id, expected guard, new guard, deletes, sets, the deleted keys, then (key, item,
# vectors, '' for none or '=' to keep them) per set. Every guard is checked before anything is written.
_WRITE = """
local G = KEYS[B + 1]
local n = (#KEYS - B - 1) / 2
local argi = 1
for i = 1, n do
  local cur = redis.call('HGET', G, ARGV[argi]) or ''
  if cur ~= ARGV[argi + 1] then return {'STALE', ARGV[argi], cur} end
  argi = argi + 5 + tonumber(ARGV[argi + 3]) + 3 * tonumber(ARGV[argi + 4])
end
argi = 1
for i = 1, n do
  local items, vectors = KEYS[B + 2 * i], KEYS[B + 2 * i + 1]
  local j = argi + 5
  for d = 1, tonumber(ARGV[argi + 3]) do
    redis.call('HDEL', items, ARGV[j])
    redis.call('HDEL', vectors, ARGV[j])
    j = j + 1
  end
  for s = 1, tonumber(ARGV[argi + 4]) do
    redis.call('HSET', items, ARGV[j], ARGV[j + 1])
    if ARGV[j + 2] == '=' then
      -- a refresh: the item's vectors stay
    elseif ARGV[j + 2] == '' then
      redis.call('HDEL', vectors, ARGV[j])
    else
      redis.call('HSET', vectors, ARGV[j], ARGV[j + 2])
    end
    j = j + 3
  end
  redis.call('HSET', G, ARGV[argi], ARGV[argi + 2])
  argi = j
end
"""

# One server: KEYS[1] is the checkpoint hash; the last 3 ARGV are its field, the batch's last offset, seen.
_APPLY = (
    """
local field, last = ARGV[#ARGV - 2], ARGV[#ARGV - 1]
local stored = redis.call('HGET', KEYS[1], field)
if not stored and ARGV[#ARGV] == '1' then return {'LOST'} end
local B = 1
"""
    + _WRITE
    + """
if tonumber(last) > tonumber(stored or '-1') then redis.call('HSET', KEYS[1], field, last) end
return {'OK'}
"""
)

_APPLY_SLOT = "local B = 0\n" + _WRITE + "return {'OK'}\n"

ATTEMPTS = 10  # loads and compare-and-sets of one batch before its StaleWrite reaches the caller
PAGE = 100  # paths a search reads per script call: each call does bounded work


PathRead = tuple[int, dict[str, Any], dict[str, Any]]  # a path's guard (-1: none), items and vectors by key


def prefix(namespace: str, view: str) -> str:
    """`helix:items:{<ns>}:<view>:`: the head of every key of a namespace's items, in one slot."""
    return f"helix:items:{{{names.check_namespace(namespace)}}}:{view}:"


def _encode(item: StoredItem) -> str:
    expires = None if item.expires_at is None else item.expires_at.isoformat()
    times = [item.created_at.isoformat(), item.updated_at.isoformat(), expires]
    row = [list(item.namespace), item.value, *times, item.ttl_minutes]
    return json.dumps(row, ensure_ascii=False, separators=(",", ":"))


def _decode(key: bytes | str, value: bytes | str) -> StoredItem:
    path, data, created, updated, expires, *ttl = json.loads(value)
    at = datetime.fromisoformat
    ends = None if expires is None else at(expires)
    return StoredItem(tuple(path), text(key), data, at(created), at(updated), ends, ttl_minutes=(ttl or [None])[0])


def _pairs(flat: Sequence[Any]) -> dict[str, Any]:
    """An HGETALL reply inside a script's (a flat list) as a dict with text keys."""
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


class RedisItems(WideStore, NoMessages):
    kind = "redis"
    SCRIPTS = (("read", _READ), ("apply", _APPLY))

    def __init__(self, url: str, view: Items | None = None) -> None:
        self.view = view or Items(store="redis")
        super().__init__(url, self.view.name)
        self.embedder = None if self.view.index is None else self.view.index.embed.build()

    def __repr__(self) -> str:
        return f"RedisItems({self.name!r})"  # a URL may hold a password

    async def _run(self, script: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        client = await self._open()
        return await self._scripts[script](keys=keys, args=args, client=client)

    def _keys(self, namespace: str, path: str) -> tuple[str, str]:
        head = prefix(namespace, self.name)
        return head + "i:" + path, head + "v:" + path

    async def _read(self, namespace: str, paths: Sequence[str], vectors: bool) -> list[PathRead]:
        """Per path: its guard (-1: none), its items' stored JSON and (with `vectors`) their vectors, by key."""
        if not paths:
            return []
        keys = [prefix(namespace, self.name) + "applied"]
        keys += [self._keys(namespace, p)[0] for p in paths]
        keys += [self._keys(namespace, p)[1] for p in paths] if vectors else []
        reply = await self._run("read", keys, paths)
        return [
            (int(reply[i]) if reply[i] else -1, _pairs(reply[i + 1]), _pairs(reply[i + 2]))
            for i in range(0, len(reply), 3)
        ]

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        topic, partition, batch = ops(records, self.name)
        namespace = records[0].event.namespace
        field, last = f"{topic}:{partition}", records[-1].position.offset
        # Embedded before the atomic step (a model's call); ops a guard covers cost a little then.
        embedded = await embed(self.embedder, self.view.index, batch)
        vectors = {op.offset: v for op, v in zip(batch, embedded, strict=True)}
        for attempt in range(ATTEMPTS):
            try:
                applied = await self._attempt(namespace, field, last, batch, vectors)
            except StaleWrite:
                if attempt == ATTEMPTS - 1:
                    raise
                continue
            except CheckpointLost:
                self._checkpoints.seen.discard(field)
                raise
            self._checkpoints.seen.add(field)
            return Applied(applied)
        raise AssertionError("unreachable")

    async def _attempt(
        self, namespace: str, field: str, last: int, batch: Sequence[ItemOp], vectors: Mapping[int, np.ndarray | None]
    ) -> int:
        client = await self._open()
        head = prefix(namespace, self.name)
        paths = sorted({op.session_id for op in batch})
        guards: dict[str, int] = {}
        current: dict[Ident, StoredItem] = {}
        for path, (guard, items, _) in zip(paths, await self._read(namespace, paths, False), strict=True):
            guards[path] = guard
            current.update(((path, key), _decode(key, value)) for key, value in items.items())
        fresh = [op for op in batch if op.offset > guards[op.session_id]]
        state, put = fold_batch(current, fresh, vectors)
        keys: list[str] = [head + "applied"]
        args: list[Any] = []
        for path in sorted({op.session_id for op in fresh}):
            gone = [k for p, k in current if p == path and (p, k) not in state]
            sets = [(k, state[(p, k)], v) for (p, k), v in put.items() if p == path]
            newest = max(op.offset for op in fresh if op.session_id == path)
            expected = guards[path]
            keys += self._keys(namespace, path)
            args += [path, "" if expected < 0 else str(expected), newest, len(gone), len(sets), *gone]
            for k, item, v in sets:
                blob = b"=" if v is KEEP else b"" if v is None else np.asarray(v, dtype=np.float32).tobytes()
                args += [k, _encode(item), blob]
        checkpoint, seen = names.checkpoint_key(self.name), int(field in self._checkpoints.seen)
        if is_cluster(client):
            if seen and await client.hget(checkpoint, field) is None:
                raise CheckpointLost(f"{self.name}: the checkpoint of {field} is gone from Redis")
            if args:
                (reply,) = await replicated(client, self.name, [(_APPLY_SLOT, keys, args)])
                self._refused(reply)
            if await client.eval(ADVANCE, 1, checkpoint, field, last, seen) == -1:  # forward only, as on one server
                raise CheckpointLost(f"{self.name}: the checkpoint of {field} is gone from Redis")
        else:
            reply = await self._run("apply", [checkpoint, *keys], [*args, field, last, seen])
            if reply[0] == b"LOST":
                raise CheckpointLost(f"{self.name}: the checkpoint of {field} is gone from Redis")
            self._refused(reply)
        return len(fresh)

    def _refused(self, reply: Sequence[bytes]) -> None:
        if reply[0] == b"STALE":
            raise StaleWrite(f"{self.name}: guard of path {text(reply[1])!r} moved to {text(reply[2])!r}")

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self._checkpoints.read(await self._open(), topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await self._checkpoints.advance(await self._open(), topic, partition, offset)

    async def behind(self, wants: Iterable[Position]) -> Position | None:
        wants = list(wants)
        if not wants:
            return None
        fields = [f"{w.topic}:{w.partition}" for w in wants]
        found = await (await self._open()).hmget(names.checkpoint_key(self.name), fields)
        return next((w for w, a in zip(wants, found, strict=True) if a is None or int(a) < w.offset), None)

    async def get_item(self, namespace: str, path: tuple[str, ...], key: str, now: datetime) -> StoredItem | None:
        value = await (await self._open()).hget(self._keys(namespace, session_of(path))[0], key)
        item = None if value is None else _decode(key, value)
        return item if item is not None and item.live(now) else None

    async def _live(
        self, namespace: str, under: tuple[str, ...], now: datetime, dims: int = 0
    ) -> list[tuple[StoredItem, np.ndarray | None]]:
        """The live items under path prefix `under`, in `order`, each with its vectors when `dims` is given."""
        # The paths from the guards (every path the view has applied), then a page of paths per call.
        client = await self._open()
        within = path_id(under)
        paths = sorted(
            {
                p
                for p in map(text, [f async for f, _ in client.hscan_iter(prefix(namespace, self.name) + "applied")])
                if not within or p == within or p.startswith(within + "/")
            }
        )
        found = []
        for start in range(0, len(paths), PAGE):
            for _, items, blobs in await self._read(namespace, paths[start : start + PAGE], dims > 0):
                for key, value in items.items():
                    item = _decode(key, value)
                    if item.live(now):
                        blob = blobs.get(key)
                        vectors = None if blob is None else np.frombuffer(blob, np.float32).reshape(-1, dims)
                        found.append((item, vectors))
        found.sort(key=lambda f: order(f[0]))
        return found

    async def find_items(
        self,
        namespace: str,
        prefix: tuple[str, ...],
        where: Mapping[str, Any] | None,
        limit: int,
        offset: int,
        now: datetime,
        query: str | None = None,
    ) -> list[StoredItem]:
        q = None if not query or self.embedder is None else (await self.embedder.embed([query]))[0]
        dims = 0 if q is None or self.embedder is None else self.embedder.dims
        found = await self._live(namespace, prefix, now, dims)
        return choose(found, where, limit, offset, q, text=query, index=self.view.index)

    async def item_namespaces(
        self,
        namespace: str,
        conditions: Sequence[tuple[str, tuple[str, ...]]],
        max_depth: int | None,
        limit: int,
        offset: int,
        now: datetime,
    ) -> list[tuple[str, ...]]:
        held = {item.namespace for item, _ in await self._live(namespace, (), now)}
        return list_namespaces(held, conditions, max_depth, limit, offset)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        client = await self._open()
        for ns in namespaces:
            head = prefix(ns, self.name)
            await delete_matching(client, head + "*", re.compile(re.escape(head)))
        await self._checkpoints.drop(client, topics)

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.checkpoint(want.topic, want.partition)

    async def close(self) -> None:
        await self._client.close()
        self._scripts.clear()
