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
from typing import Any

from helix_es.model import names
from helix_es.model.message import decode_json
from helix_es.stores.list_edit import list_edit
from helix_es.stores.ports import Change, CheckpointLost, SessionKey, Snapshot, StaleWrite
from helix_es.stores.redis.cluster import EDITS, apply_on_cluster
from helix_es.stores.redis.pool import Client, Lazy, is_cluster, text
from helix_es.views.base import View

# One server: KEYS[1] is the checkpoint hash, moved in the same script as every session of the batch.
_APPLY = (
    """
if ARGV[#ARGV] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[#ARGV - 3]) == 0 then
  return {'LOST'}  -- the checkpoint this writer had seen is gone (FLUSHALL): so is the data under it
end
local B = 1
"""
    + EDITS
    + """
redis.call('HSET', KEYS[1], ARGV[#ARGV - 3], ARGV[#ARGV - 2])
return {'OK'}
"""
)

# Move a checkpoint forward only (past dead letters): never back over applied events. With ARGV[3]
# '1' the caller had seen the checkpoint: if it is gone, write nothing and return -1 (CheckpointLost).
ADVANCE = """
local current = redis.call('HGET', KEYS[1], ARGV[1])
if not current and ARGV[3] == '1' then return -1 end
if tonumber(ARGV[2]) > tonumber(current or '-1') then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0
"""


async def advance_checkpoint(
    client: Client, view: str, topic: str, partition: int, offset: int, *, seen: bool = False
) -> None:
    if await client.eval(ADVANCE, 1, names.checkpoint_key(view), f"{topic}:{partition}", offset, int(seen)) == -1:
        raise CheckpointLost(f"{view}: the checkpoint of {topic}[{partition}] is gone from Redis")


class Checkpoints:
    """A namespace-wide view's partition checkpoints (`helix:checkpoint:<view>`), and the fields this
    writer has read or written (`seen`): if one of those vanishes (FLUSHALL), its writes refuse."""

    def __init__(self, view: str) -> None:
        self.view = view  # its owner renames it for a rebuild target (`open_projection(name=)`)
        self.seen: set[str] = set()

    @property
    def key(self) -> str:
        return names.checkpoint_key(self.view)

    async def read(self, client: Client, topic: str, partition: int) -> int | None:
        field = f"{topic}:{partition}"
        value = await client.hget(self.key, field)
        if value is None:
            return None
        self.seen.add(field)  # from now on `apply` refuses to write it afresh
        return int(value)

    async def advance(self, client: Client, topic: str, partition: int, offset: int) -> None:
        field = f"{topic}:{partition}"
        try:
            await advance_checkpoint(client, self.view, topic, partition, offset, seen=field in self.seen)
        except CheckpointLost:
            self.seen.discard(field)
            raise
        self.seen.add(field)

    async def drop(self, client: Client, topics: Collection[str]) -> None:
        await drop_checkpoints(client, self.view, topics)
        self.seen.difference_update([f for f in self.seen if f.rpartition(":")[0] in topics])


async def delete_matching(client: Client, pattern: str, exact: re.Pattern[str]) -> int:
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


async def drop_checkpoints(client: Client, view: str, topics: Collection[str]) -> None:
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
        self._client = Lazy(url)  # a plain client or a cluster one, as the node says on first use
        self._apply: Any = None
        self._read: Any = None
        # Checkpoints (key, field) this store has read or written: if one vanishes, `apply` refuses.
        self._seen: set[tuple[str, str]] = set()

    @property
    def redis(self) -> Client:
        """The client for a look at the keys (tests, tools); calls open theirs with cluster detection."""
        return self._client.now

    async def _open(self) -> Client:
        client = await self._client()
        if self._apply is None:
            self._apply = client.register_script(_APPLY)
            self._read = client.register_script(_READ)
        return client

    @staticmethod
    def keys(view: View, key: SessionKey) -> tuple[str, str]:
        return (
            names.session_key(key.namespace, key.session_id, view.key_suffix),
            names.applied_key(key.namespace, key.session_id, view.name),
        )

    async def load(self, view: View, keys: Sequence[SessionKey]) -> dict[SessionKey, Snapshot]:
        client = await self._open()
        async with client.pipeline(transaction=False) as pipe:  # on a cluster: one pipeline per node
            for key in keys:
                data, guard = self.keys(view, key)
                pipe.get(guard)
                pipe.lrange(data, 0, -1)
            replies = await pipe.execute()
        return {key: _snapshot(replies[2 * i], replies[2 * i + 1]) for i, key in enumerate(keys)}

    async def apply(self, view: View, topic: str, partition: int, changes: Sequence[Change], checkpoint: int) -> None:
        client = await self._open()
        ttl = getattr(view, "ttl", None)  # views without the option never expire
        seen = (names.checkpoint_key(view.name), f"{topic}:{partition}")
        tail: list[str | int] = [seen[1], checkpoint, max(1, round(ttl * 1000)) if ttl else 0, int(seen in self._seen)]
        if is_cluster(client):
            sessions = [self._session(view, c) for c in changes]
            if not await apply_on_cluster(client, view.name, seen[0], sessions, tail):
                self._seen.discard(seen)
                raise CheckpointLost(f"{view.name}: the checkpoint of {topic}[{partition}] is gone from Redis")
        else:
            keys: list[str] = [seen[0]]
            args: list[str | int] = []
            for c in changes:
                session_keys, session_args = self._session(view, c)
                keys += session_keys
                args += session_args
            reply = await self._apply(keys=keys, args=args + tail)
            if reply[0] == b"STALE":
                raise StaleWrite(f"{view.name}: guard of {reply[1].decode()} moved to {reply[2].decode()!r}")
            if reply[0] == b"LOST":
                self._seen.discard(seen)
                raise CheckpointLost(f"{view.name}: the checkpoint of {topic}[{partition}] is gone from Redis")
        self._seen.add(seen)

    def _session(self, view: View, c: Change) -> tuple[list[str], list[str | int]]:
        edit = list_edit(c.before.state, c.after)
        expected = "" if c.before.applied is None else str(c.before.applied)
        args: list[str | int] = [expected, c.applied, edit.keep, edit.drop, len(edit.append)]
        return list(self.keys(view, c.key)), args + [m.to_json() for m in edit.append]

    async def checkpoint(self, view: View, topic: str, partition: int) -> int | None:
        client = await self._open()
        key, field = names.checkpoint_key(view.name), f"{topic}:{partition}"
        value = await client.hget(key, field)
        if value is None:
            return None
        self._seen.add((key, field))  # from now on `apply` refuses to write it afresh
        return int(value)

    async def read(self, view: View, key: SessionKey, *, guard: bool = True) -> Snapshot:
        client = await self._open()
        data, applied_key = self.keys(view, key)
        if not guard:  # one plain LRANGE: the cost of reading a Redis list at all
            return Snapshot(tuple(map(decode_json, await client.lrange(data, 0, -1))), None)
        applied, items = await self._read(keys=(data, applied_key))
        return _snapshot(applied, items)

    async def drop(self, view: View, namespaces: Collection[str], topics: Collection[str]) -> None:
        client = await self._open()
        for ns in namespaces:
            for key in (names.session_key(ns, "*", view.key_suffix), names.applied_key(ns, "*", view.name)):
                await delete_matching(client, *every_session(key))
        await drop_checkpoints(client, view.name, topics)
        key = names.checkpoint_key(view.name)
        self._seen = {(k, f) for k, f in self._seen if k != key or f.rpartition(":")[0] not in topics}

    async def sessions(self, view: View, namespace: str) -> list[str]:
        # Every session the view has applied an event of keeps a guard beside its data (one SCAN, no Lua;
        # on a cluster redis-py scans every master).
        client = await self._open()
        glob, exact = every_session(names.applied_key(namespace, "*", view.name))
        found = set()
        async for key in client.scan_iter(match=glob, count=1000):
            name = text(key)
            if exact.match(name):
                found.add(name[name.index("{") + 1 : name.index("}")])
        return sorted(found)

    async def forget_checkpoints(self, view: View, partitions: Collection[tuple[str, int]]) -> None:
        if partitions:
            client = await self._open()
            key = names.checkpoint_key(view.name)
            fields = [f"{t}:{p}" for t, p in sorted(partitions)]
            await client.hdel(key, *fields)
            self._seen.difference_update((key, f) for f in fields)

    async def close(self) -> None:
        await self._client.close()
        self._apply = self._read = None
