"""Redis store: a session's view is a list of JSON messages at `helix:memory:<ns>:{<sid>}[:<view>]`.

Beside it, in the same hash slot, `...:<view>:applied` holds the session guard. One Lua
script checks every guard of a batch, applies the list edits, sets the guards and the
partition checkpoint (`helix:checkpoint:<view>`), so the step is atomic on one server.

A view with a `ttl` (the seed's Redis TTL) has every session it writes expire that long after
its last write: the same script sets the data and guard keys to expire together, so an expired
session reads as empty and starts afresh. The checkpoints never expire. Without a ttl the keys
are made persistent again. Only this store expires sessions; memory and PostgreSQL keep them.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence

import redis.asyncio as aioredis

from helix_es.model import names
from helix_es.model.message import decode_json
from helix_es.stores.ports import Change, CheckpointLost, SessionKey, Snapshot, StaleWrite, list_edit
from helix_es.stores.redis.pool import redis_client, text
from helix_es.views.base import View

_APPLY = """
local ttl = tonumber(ARGV[#ARGV - 1])
if ARGV[#ARGV] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[#ARGV - 3]) == 0 then
  return {'LOST'}  -- the checkpoint this writer had seen is gone (FLUSHALL): so is the data under it
end
local argi = 1
local n = (#KEYS - 1) / 2
for i = 1, n do
  local cur = redis.call('GET', KEYS[2 * i + 1]) or ''
  if cur ~= ARGV[argi] then
    return {'STALE', KEYS[2 * i], cur}
  end
  argi = argi + 5 + tonumber(ARGV[argi + 4])
end
argi = 1
for i = 1, n do
  local data, guard = KEYS[2 * i], KEYS[2 * i + 1]
  local keep, drop, nadd = tonumber(ARGV[argi + 2]), tonumber(ARGV[argi + 3]), tonumber(ARGV[argi + 4])
  if drop < 0 then
    redis.call('DEL', data)
  elseif drop > 0 then
    local head = {}
    if keep > 0 then head = redis.call('LRANGE', data, 0, keep - 1) end
    redis.call('LTRIM', data, keep + drop, -1)
    for j = #head, 1, -1 do redis.call('LPUSH', data, head[j]) end
  end
  local first = argi + 5
  while first < argi + 5 + nadd do
    local last = math.min(first + 999, argi + 4 + nadd)
    redis.call('RPUSH', data, unpack(ARGV, first, last))
    first = last + 1
  end
  if ttl > 0 then
    redis.call('SET', guard, ARGV[argi + 1], 'PX', ttl)
    redis.call('PEXPIRE', data, ttl)
  else
    redis.call('SET', guard, ARGV[argi + 1])
    redis.call('PERSIST', data)
  end
  argi = argi + 5 + nadd
end
redis.call('HSET', KEYS[1], ARGV[argi], ARGV[argi + 1])
return {'OK'}
"""

# Move a checkpoint forward only (past dead letters): never back over applied events. With ARGV[3]
# '1' the caller had seen the checkpoint: if it is gone, write nothing and return -1 (CheckpointLost).
ADVANCE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current and ARGV[3] == '1' then return -1 end
if tonumber(ARGV[2]) > tonumber(current or '-1') then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0
"""


async def advance_checkpoint(
    client: aioredis.Redis, view: str, topic: str, partition: int, offset: int, *, seen: bool = False
) -> None:
    if await client.eval(ADVANCE, 1, names.checkpoint_key(view), f"{topic}:{partition}", offset, int(seen)) == -1:
        raise CheckpointLost(f"{view}: the checkpoint of {topic}[{partition}] is gone from Redis")


async def delete_matching(client: aioredis.Redis, pattern: str, exact: re.Pattern[str]) -> int:
    """Delete the keys SCAN finds for `pattern` that `exact` matches (a glob is looser than the key scheme)."""
    batch: list[bytes] = []
    gone = 0
    async for key in client.scan_iter(match=pattern, count=1000):
        if exact.match(key.decode()):
            batch.append(key)
        if len(batch) >= 500:
            gone += await client.delete(*batch)
            batch = []
    if batch:
        gone += await client.delete(*batch)
    return gone


async def drop_checkpoints(client: aioredis.Redis, view: str, topics: Collection[str]) -> None:
    """Delete `view`'s checkpoints of every partition of `topics` (other deployments' topics stay)."""
    key = names.checkpoint_key(view)
    fields = [f for f in await client.hkeys(key) if text(f).rpartition(":")[0] in topics]
    if fields:
        await client.hdel(key, *fields)


def every_session(key: str) -> tuple[str, re.Pattern[str]]:
    """A session key made with session id `*`: the SCAN glob of that key of every session, and its exact form."""
    return key, re.compile(re.escape(key).replace(re.escape("{*}"), r"\{[^{}]*\}") + "$")


_READ = """
return {redis.call('GET', KEYS[2]) or '', redis.call('LRANGE', KEYS[1], 0, -1)}
"""


def _snapshot(applied: bytes | None, items: list[bytes]) -> Snapshot:
    return Snapshot(tuple(map(decode_json, items)), int(applied) if applied else None)


class RedisStore:
    kind = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self.redis = redis_client(url)
        self._apply = self.redis.register_script(_APPLY)
        self._read = self.redis.register_script(_READ)
        # Checkpoints (key, field) this store has read or written: if one vanishes, `apply` refuses.
        self._seen: set[tuple[str, str]] = set()

    @staticmethod
    def keys(view: View, key: SessionKey) -> tuple[str, str]:
        return (
            names.session_key(key.namespace, key.session_id, view.key_suffix),
            names.applied_key(key.namespace, key.session_id, view.name),
        )

    async def load(self, view: View, keys: Sequence[SessionKey]) -> dict[SessionKey, Snapshot]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                data, guard = self.keys(view, key)
                pipe.get(guard)
                pipe.lrange(data, 0, -1)
            replies = await pipe.execute()
        return {key: _snapshot(replies[2 * i], replies[2 * i + 1]) for i, key in enumerate(keys)}

    async def apply(self, view: View, topic: str, partition: int, changes: Sequence[Change], checkpoint: int) -> None:
        keys: list[str] = [names.checkpoint_key(view.name)]
        args: list[str | int] = []
        for c in changes:
            keys.extend(self.keys(view, c.key))
            edit = list_edit(c.before.state, c.after)
            expected = "" if c.before.applied is None else str(c.before.applied)
            args += [expected, c.applied, edit.keep, edit.drop, len(edit.append)]
            args += [m.to_json() for m in edit.append]
        ttl = getattr(view, "ttl", None)  # views without the option never expire
        seen = (keys[0], f"{topic}:{partition}")
        args += [seen[1], checkpoint, max(1, round(ttl * 1000)) if ttl else 0, int(seen in self._seen)]
        reply = await self._apply(keys=keys, args=args)
        if reply[0] == b"LOST":
            self._seen.discard(seen)
            raise CheckpointLost(f"{view.name}: the checkpoint of {topic}[{partition}] is gone from Redis")
        if reply[0] == b"STALE":
            raise StaleWrite(f"{view.name}: guard of {reply[1].decode()} moved to {reply[2].decode()!r}")
        self._seen.add(seen)

    async def checkpoint(self, view: View, topic: str, partition: int) -> int | None:
        key, field = names.checkpoint_key(view.name), f"{topic}:{partition}"
        value = await self.redis.hget(key, field)
        if value is None:
            return None
        self._seen.add((key, field))  # from now on `apply` refuses to write it afresh
        return int(value)

    async def read(self, view: View, key: SessionKey, *, guard: bool = True) -> Snapshot:
        data, applied_key = self.keys(view, key)
        if not guard:  # one plain LRANGE: the cost of reading a Redis list at all
            return Snapshot(tuple(map(decode_json, await self.redis.lrange(data, 0, -1))), None)
        applied, items = await self._read(keys=(data, applied_key))
        return _snapshot(applied, items)

    async def drop(self, view: View, namespaces: Collection[str], topics: Collection[str]) -> None:
        for ns in namespaces:
            for key in (names.session_key(ns, "*", view.key_suffix), names.applied_key(ns, "*", view.name)):
                await delete_matching(self.redis, *every_session(key))
        await drop_checkpoints(self.redis, view.name, topics)
        key = names.checkpoint_key(view.name)
        self._seen = {(k, f) for k, f in self._seen if k != key or f.rpartition(":")[0] not in topics}

    async def sessions(self, view: View, namespace: str) -> list[str]:
        # Every session the view has applied an event of keeps a guard beside its data (one SCAN, no Lua).
        glob, exact = every_session(names.applied_key(namespace, "*", view.name))
        found = set()
        async for key in self.redis.scan_iter(match=glob, count=1000):
            name = text(key)
            if exact.match(name):
                found.add(name[name.index("{") + 1 : name.index("}")])
        return sorted(found)

    async def forget_checkpoints(self, view: View, partitions: Collection[tuple[str, int]]) -> None:
        if partitions:
            key = names.checkpoint_key(view.name)
            fields = [f"{t}:{p}" for t, p in sorted(partitions)]
            await self.redis.hdel(key, *fields)
            self._seen.difference_update((key, f) for f in fields)

    async def close(self) -> None:
        await self.redis.aclose()
