"""Redis Cluster writes of session views: one script per hash slot, then the checkpoint.

A batch's sessions live in many slots, its partition checkpoint `helix:checkpoint:<view>` in
another, and one script touches one slot only. So `apply_on_cluster` runs the edits of each slot
as one script (every session's guard checked first, as on one server), all of them in one
pipeline (redis-py sends each node its share on one connection), followed on every master that
has a replica by `WAIT 1`: the checkpoint moves only once each edit is on a replica. A failover
promotes the most up-to-date replica, so losing one master loses no edit the checkpoint covers;
an edit it lost (replication is asynchronous) is re-delivered from the checkpoint, and the
session guards make whatever did survive a no-op. A checkpoint write lost in a failover only
moves the checkpoint back: re-delivery again, no-ops again.

All guards are read before any slot is written, so a batch with a stale guard writes nothing. A
projector racing in between those steps can leave some slots written and others refused
(`StaleWrite`): each written session is its own correct fold, guarded, and the reload skips it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis import exceptions as redis_errors
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from helix_es.stores.ports import StaleWrite

# The session edits, shared by both scripts below. Keys from KEYS[B + 1] on are (data, guard) pairs;
# ARGV per session: expected guard, new guard, keep, drop, count, messages...; then 4 trailing ARGV
# (field, checkpoint, ttl ms, seen). Any guard that moved stops the script before it writes.
EDITS = """
local ttl = tonumber(ARGV[#ARGV - 1])
local argi = 1
local n = (#KEYS - B) / 2
for i = 1, n do
  local cur = redis.call('GET', KEYS[B + 2 * i]) or ''
  if cur ~= ARGV[argi] then
    return {'STALE', KEYS[B + 2 * i - 1], cur}
  end
  argi = argi + 5 + tonumber(ARGV[argi + 4])
end
argi = 1
for i = 1, n do
  local data, guard = KEYS[B + 2 * i - 1], KEYS[B + 2 * i]
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
"""

_APPLY_SLOT = "local B = 0\n" + EDITS + "return {'OK'}\n"

# The checkpoint of a cluster batch, once its sessions are written: -1 if a seen one is gone.
MOVE = """
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
return 0
"""

WAIT_MS = 1000  # for a replica to acknowledge a batch's edits before its checkpoint moves

Session = tuple[list[str], list[str | int]]  # (data, guard) keys and the script's arguments of one session


async def apply_on_cluster(
    client: RedisCluster, view: str, checkpoint_key: str, sessions: Sequence[Session], tail: list[str | int]
) -> bool:
    """Write `sessions` slot by slot, then the checkpoint; False if a checkpoint seen before is gone
    (checked first, so nothing is written then). `tail`: field, checkpoint, ttl ms, seen."""
    field, offset, seen = str(tail[0]), tail[1], tail[3]
    if sessions:
        if seen and await client.eval(MOVE, 1, checkpoint_key, field, "", 1) == -1:
            return False
        await _check(client, view, sessions)
        await _edit(client, view, sessions, tail)
    return bool(await client.eval(MOVE, 1, checkpoint_key, field, offset, seen) != -1)


async def _check(client: RedisCluster, view: str, sessions: Sequence[Session]) -> None:
    # Every guard first, so a stale batch writes nothing (as one script on one server refuses it whole);
    # the slot scripts check again, atomically, for a projector that races in between.
    async with client.pipeline(transaction=False) as pipe:
        for keys, _ in sessions:
            pipe.get(keys[1])
        found = await pipe.execute()
    for (keys, args), guard in zip(sessions, found, strict=True):
        current = "" if guard is None else guard.decode()
        if current != args[0]:
            raise StaleWrite(f"{view}: guard of {keys[0]} moved to {current!r}")


async def _edit(client: RedisCluster, view: str, sessions: Sequence[Session], tail: list[str | int]) -> None:
    by_slot: dict[int, tuple[list[str], list[str | int]]] = {}
    for keys, args in sessions:
        slot_keys, slot_args = by_slot.setdefault(key_slot(keys[0].encode()), ([], []))
        slot_keys += keys
        slot_args += args
    scripts = [(_APPLY_SLOT, keys, [*args, *tail]) for keys, args in by_slot.values()]
    for reply in await replicated(client, view, scripts):
        if reply[0] == b"STALE":
            raise StaleWrite(f"{view}: guard of {reply[1].decode()} moved to {reply[2].decode()!r}")


Script = tuple[str, list[str], list[str | int]]  # Lua, keys (one slot), arguments


async def replicated(client: RedisCluster, what: str, scripts: Sequence[Script]) -> list[Any]:
    """Run `scripts` (each inside one slot) in one pipeline, then `WAIT 1` on every master that has a
    replica; their replies, once each is on a replica (else ConnectionError: the caller retries)."""
    masters = {}
    for _, keys, _ in scripts:
        nodes = client.nodes_manager.slots_cache.get(key_slot(keys[0].encode()), [])
        if len(nodes) > 1:  # a master with a replica: WAIT for it below
            masters[nodes[0].name] = nodes[0]
    async with client.pipeline(transaction=False) as pipe:
        for script, keys, args in scripts:
            pipe.eval(script, len(keys), *keys, *args)
        for node in masters.values():  # after that node's scripts, on the same connection
            pipe.execute_command("WAIT", 1, WAIT_MS, target_nodes=node)
        replies = await pipe.execute(raise_on_error=False)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    if any(int(acked) < 1 for acked in replies[len(scripts) :]):
        await client.nodes_manager.initialize()  # a replica gone? the next try sees the cluster as it is
        raise redis_errors.ConnectionError(f"{what}: no replica acknowledged a write within {WAIT_MS} ms")
    return list(replies[: len(scripts)])
