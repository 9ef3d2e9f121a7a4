r"""Redis long-term memory: one key per message, an ordered index, a clear watermark.

Layout, for view `<view>` (`long-term`) of namespace `<ns>`:

- `helix:memory:<ns>:<view>:m:<order>`: one message, a JSON string
  `{"session_id", "at" (event time, µs since 1970), "position" ("<topic>:<partition>:<offset>"),
  "message" (the Message's JSON)}`. `<order>` is `<µs:020d>,<topic>,<partition:010d>,<offset:020d>`:
  its byte order is the view's order (`,` sorts below every topic character), and it is the
  row key, so a re-delivered event rewrites the same key with the same value.
- `helix:memory:<ns>:<view>:index`: a sorted set of those `<order>` members, all scored 0,
  so `ZRANGE` returns them in byte order and a clear finds its range with `ZRANGEBYLEX`.
- `helix:memory:<ns>:<view>:cleared`: the `cleared_at` watermark, µs.
- `helix:checkpoint:<view>`: hash `<topic>:<partition>` -> last applied offset (as every view).

On a Redis Cluster every key of a namespace carries its hash tag, `helix:memory:{<ns>}:<view>:...`
(same layout), so a namespace's rows, index and watermark share one slot. Single servers keep the
names above: nothing moves for existing deployments (no cluster deployment existed before).

`apply` on one server is one Lua script: it reads the partition checkpoint, skips what it covers,
folds the rest (inserts newer than the watermark, clears) and moves the checkpoint, all atomically.
On a cluster it reads the checkpoint, runs one script per namespace (in its slot), waits for a
replica of each (`WAIT`, `helix_es.stores.redis.cluster`), then moves the checkpoint forward: the
checkpoint never covers a row a failover could lose, and a row applied twice is the same row.

`get` is one Lua script: the checkpoint (when a `want` is given; no data is sent while behind),
`ZRANGE` of the index and `MGET`s. `search` walks the namespace's index in the view's order, one
script call per `PAGE` rows (the first also checks the checkpoint), and stops at `limit` hits: each
call does bounded work, so other clients' commands wait at most one page (README, Speed). The script
tests ASCII contents itself (ASCII lower case equals casefold there) and passes non-ASCII ones on;
Python applies `casefold`, so the result is exactly the memory store's. Pages are read one after the
other, so a search that runs while rows are added sees each page as it was when read.

Event times before 1970 count as 1970 here (the order key has no sign); helix-es never writes such.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

from redis.asyncio.cluster import RedisCluster

from helix_es.model import names
from helix_es.model.events import Position, Record, micros
from helix_es.model.message import Message, decode_json
from helix_es.stores.ports import Applied, CheckpointLost, SessionKey
from helix_es.stores.redis.cluster import Script, replicated
from helix_es.stores.redis.pool import Client, Lazy, is_cluster, text
from helix_es.stores.redis.views import ADVANCE, Checkpoints, delete_matching
from helix_es.views.long_term import VIEW_NAME, Op, OrderKey, matches, ops

_RETRACT = r"""
-- A retraction (op: [kind, offset, namespace, at, topic, session id, partition]): the session's newest
-- row on this partition before it (highest offset) goes, once: `retracted` remembers each retraction
-- applied, so a batch applied again (a cluster's checkpoint moves after the rows) takes back no more.
local function retract(base, index, op)
  if redis.call('HSETNX', base .. 'retracted', op[5] .. ':' .. op[7] .. ':' .. op[2], 1) == 0 then return end
  local found = {}
  local members = redis.call('ZRANGE', index, 0, -1)
  for j = 1, #members do
    local t, p, o = string.match(members[j], '^%d+,(.*),(%d+),(%d+)$')
    if t == op[5] and tonumber(p) == tonumber(op[7]) and tonumber(o) < tonumber(op[2]) then
      found[#found + 1] = {tonumber(o), members[j]}
    end
  end
  table.sort(found, function(a, b) return a[1] > b[1] end)
  for j = 1, #found do
    local key = base .. 'm:' .. found[j][2]
    local value = redis.call('GET', key)
    if value and cjson.decode(value)['session_id'] == op[6] then
      redis.call('DEL', key)
      redis.call('ZREM', index, found[j][2])
      return
    end
  end
end
"""

_APPLY = (
    _RETRACT
    + r"""
local field, view = ARGV[1], ARGV[2]
local stored = redis.call('HGET', KEYS[1], field)
if not stored and ARGV[3] == '1' then
  return -1  -- the checkpoint this writer had seen is gone (FLUSHALL): so are the rows under it
end
local checkpoint = tonumber(stored or '-1')
local marks, applied, last = {}, 0, nil
-- One JSON argument of [kind, offset, namespace, at, member, value] rows (numbers as text): one
-- argument to send, not six per event. A retraction's row is [kind, offset, namespace, at, topic,
-- session id, partition]; it scans the namespace's index, as retractions are rare.
local ops = cjson.decode(ARGV[4])
for n = 1, #ops do
  local op = ops[n]
  if tonumber(op[2]) > checkpoint then
    applied = applied + 1
    last = op[2]
    local base = 'helix:memory:' .. op[3] .. ':' .. view .. ':'
    local mark = marks[base]
    if mark == nil then
      mark = tonumber(redis.call('GET', base .. 'cleared') or '-1')
    end
    local at = tonumber(op[4])
    if op[1] == 'a' and at > mark then
      redis.call('SET', base .. 'm:' .. op[5], op[6])
      redis.call('ZADD', base .. 'index', 0, op[5])
    elseif op[1] == 'c' and at > mark then
      mark = at
      redis.call('SET', base .. 'cleared', op[4])
      local index = base .. 'index'
      while true do
        local gone = redis.call('ZRANGEBYLEX', index, '-', op[5], 'LIMIT', 0, 500)
        if #gone == 0 then break end
        local keys = {}
        for j = 1, #gone do keys[j] = base .. 'm:' .. gone[j] end
        redis.call('DEL', unpack(keys))
        redis.call('ZREM', index, unpack(gone))
      end
    elseif op[1] == 'r' then
      retract(base, base .. 'index', op)
    end
    marks[base] = mark
  end
end
if last then redis.call('HSET', KEYS[1], field, last) end
return applied
"""
)

# Both reads start so: {'wait', applied} while the checkpoint (KEYS[1], field ARGV[1]) is behind `want` (ARGV[2]).
_BEHIND = r"""
if ARGV[1] ~= '' then
  local applied = redis.call('HGET', KEYS[1], ARGV[1])
  if not applied or tonumber(applied) < tonumber(ARGV[2]) then return {'wait', applied or ''} end
end
"""

# Returns {'wait', applied} while the view is behind `want`, else {'ok', values...}.
_GET = (
    _BEHIND
    + r"""
local out = {'ok'}
local members = redis.call('ZRANGE', KEYS[2], 0, -1)
for i = 1, #members, 500 do
  local keys = {}
  for j = i, math.min(i + 499, #members) do keys[#keys + 1] = ARGV[3] .. members[j] end
  local values = redis.call('MGET', unpack(keys))
  for k = 1, #values do
    if values[k] then out[#out + 1] = values[k] end
  end
end
return out
"""
)

# One page of a search: {'wait', applied}, or {'ok', last member read, members read, candidate values...}.
# KEYS[2]: the index; ARGV[3..]: from ('-' or '(' .. member), page size, needle, ascii, message key prefix.
# A page reads at most `PAGE` rows, so a search over a big namespace never holds Redis up for long.
_PAGE = (
    _BEHIND
    + r"""
local needle, ascii = ARGV[5], ARGV[6] == '1'
local members = redis.call('ZRANGEBYLEX', KEYS[2], ARGV[3], '+', 'LIMIT', 0, tonumber(ARGV[4]))
local out = {'ok', members[#members] or '', #members}
if #members == 0 then return out end
local keys = {}
for j = 1, #members do keys[j] = ARGV[7] .. members[j] end
local values = redis.call('MGET', unpack(keys))
-- A needle without characters JSON escapes shows verbatim in the stored JSON of an ASCII row that
-- holds it (no \u escapes either): a row without it is skipped undecoded (the common case, and
-- most of the cost).
local plain = ascii and not string.find(needle, '["\\%c]')
for k = 1, #values do
  local value = values[k]
  if value and plain and not string.find(value, '[\128-\255]') and not string.find(value, '\\u', 1, true)
      and not string.find(string.lower(value), needle, 1, true) then
    value = nil
  end
  if value then
    local content = cjson.decode(value)['message']['content']
    local keep
    if string.find(content, '[\128-\255]') then
      keep = true  -- casefold of non-ASCII text is Python's to decide
    else
      keep = ascii and string.find(string.lower(content), needle, 1, true) ~= nil
    end
    if keep then out[#out + 1] = value end
  end
end
return out
"""
)

PAGE = 250  # rows a search reads per script call: a few ms of server time

# A Redis Cluster: the ops of one namespace (all its keys share the hash tag {<ns>}) past the checkpoint
# read before (ARGV[1]); KEYS[1]: the index; ARGV[2]: the key prefix, ARGV[3]: the ops. Applying an op
# twice changes nothing (the same row key and value; a clear again finds nothing older than its mark), so
# a checkpoint that lags or moves meanwhile only makes the count larger.
_APPLY_NAMESPACE = (
    _RETRACT
    + r"""
local checkpoint, base = tonumber(ARGV[1]), ARGV[2]
local mark = tonumber(redis.call('GET', base .. 'cleared') or '-1')
local ops = cjson.decode(ARGV[3])
local applied = 0
for n = 1, #ops do
  local op = ops[n]
  if tonumber(op[2]) > checkpoint then
    applied = applied + 1
    local at = tonumber(op[4])
    if op[1] == 'a' and at > mark then
      redis.call('SET', base .. 'm:' .. op[5], op[6])
      redis.call('ZADD', KEYS[1], 0, op[5])
    elseif op[1] == 'c' and at > mark then
      mark = at
      redis.call('SET', base .. 'cleared', op[4])
      while true do
        local gone = redis.call('ZRANGEBYLEX', KEYS[1], '-', op[5], 'LIMIT', 0, 500)
        if #gone == 0 then break end
        local keys = {}
        for j = 1, #gone do keys[j] = base .. 'm:' .. gone[j] end
        redis.call('DEL', unpack(keys))
        redis.call('ZREM', KEYS[1], unpack(gone))
      end
    elseif op[1] == 'r' then
      retract(base, KEYS[1], op)
    end
  end
end
return applied
"""
)


# A SessionErased: delete the session's rows except those after it on its partition (the `erases` rule).
# KEYS: index; ARGV: message key prefix, session id, topic, partition, offset. A scan of the namespace's
# index, as erasures are rare; it runs before the batch's apply script moves the checkpoint.
_ERASE = r"""
local members = redis.call('ZRANGE', KEYS[1], 0, -1)
local gone = 0
for i = 1, #members do
  local m = members[i]
  local value = redis.call('GET', ARGV[1] .. m)
  if value and cjson.decode(value)['session_id'] == ARGV[2] then
    local t, p, o = string.match(m, '^%d+,(.*),(%d+),(%d+)$')
    if not (t == ARGV[3] and tonumber(p) == tonumber(ARGV[4]) and tonumber(o) > tonumber(ARGV[5])) then
      redis.call('DEL', ARGV[1] .. m)
      redis.call('ZREM', KEYS[1], m)
      gone = gone + 1
    end
  end
end
return gone
"""


def member(order: OrderKey) -> str:
    """The index member (and message key suffix) of a row: byte order is the view's order."""
    at, topic, partition, offset = order
    return f"{max(at, 0):020d},{topic},{partition:010d},{offset:020d}"


def prefix(namespace: str, view: str = VIEW_NAME, *, cluster: bool = False) -> str:
    """`helix:memory:<ns>:<view>:`; on a Redis Cluster `helix:memory:{<ns>}:<view>:`, one slot per namespace."""
    ns = names.check_namespace(namespace)
    return f"helix:memory:{{{ns}}}:{view}:" if cluster else f"helix:memory:{ns}:{view}:"


def _value(op: Op, message: Message, at: int) -> str:
    # json.dumps({...}, ensure_ascii=False, separators=(",", ":")) byte for byte, with the message's own
    # compact JSON spliced in; assembled by hand, as every event of a rebuild passes here.
    p = op.record.position
    return (
        f'{{"session_id":{_encode_str(op.session_id)},"at":{at},"position":'
        f'{_encode_str(f"{p.topic}:{p.partition}:{p.offset}")},"message":{message.to_json()}}}'
    )


_encode_str = json.encoder.encode_basestring  # json.dumps(ensure_ascii=False)'s own string encoder (C)


_MESSAGE_FIELD = b',"message":'  # cannot occur inside a JSON string (its quotes would be escaped)


def _message(value: bytes) -> Message:
    """The stored message, through the shared decode cache: every `get` rereads the same values."""
    start = value.find(_MESSAGE_FIELD)
    if start < 0 or not value.endswith(b"}"):
        return Message.from_record(json.loads(value)["message"])
    return decode_json(value[start + len(_MESSAGE_FIELD) : -1])


class RedisLongTerm:
    kind = "redis"

    @property
    def name(self) -> str:
        """The view's (or its rebuild target's) name: its keys and checkpoints."""
        return self._checkpoints.view

    @name.setter
    def name(self, name: str) -> None:
        self._checkpoints.view = name

    def __init__(self, url: str, *, name: str = VIEW_NAME) -> None:
        self.url = url
        self._client = Lazy(url)  # opened on first use: a projection may be dropped unused
        self._cluster = False  # known once opened: the key names depend on it
        self._scripts: dict[str, Any] = {}
        self._checkpoints = Checkpoints(name)

    @property
    def redis(self) -> Client:
        """The client for a look at the keys (tests, tools); calls open theirs with cluster detection."""
        return self._client.now

    async def _open(self) -> Client:
        client = await self._client()
        if not self._scripts:
            self._cluster = is_cluster(client)
            for key, script in (("apply", _APPLY), ("get", _GET), ("page", _PAGE), ("erase", _ERASE)):
                self._scripts[key] = client.register_script(script)
        return client

    def _prefix(self, namespace: str) -> str:
        return prefix(namespace, self.name, cluster=self._cluster)

    async def _run(self, script: str, keys: list[str], args: list[str | int]) -> Any:
        client = await self._open()
        return await self._scripts[script](keys=keys, args=args, client=client)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        client = await self._open()
        topic, partition, batch = ops(records)
        erasures = [op for op in batch if op.erased]
        for e in erasures:  # first: a crash before the apply script re-delivers the erasure with the batch
            base = self._prefix(e.namespace)
            await self._run("erase", [base + "index"], [base + "m:", e.session_id, topic, partition, e.offset])
        field = f"{topic}:{partition}"
        # A message no newer than a clear of its namespace in this batch is gone once the batch is applied,
        # wherever it stands in the batch (a clear drops the rows up to its time, and no row up to the
        # watermark is added): sent as nothing to do, it is neither written nor deleted again.
        cleared: dict[str, int] = {}
        for op in batch:
            if op.clear:
                cleared[op.namespace] = max(cleared.get(op.namespace, -1), max(micros(op.at), 0))
        rows: list[list[str]] = []
        for op in batch:
            at = max(micros(op.at), 0)
            offset = str(op.offset)
            if (
                op.message is not None
                and at > cleared.get(op.namespace, -1)
                and not any(e.erases(op.session_id, topic, partition, op.offset) for e in erasures)
            ):
                rows.append(["a", offset, op.namespace, str(at), member(op.order), _value(op, op.message, at)])
            elif op.clear:
                rows.append(["c", offset, op.namespace, str(at), f"({at + 1:020d}", ""])  # members with time <= at
            elif op.retract:
                rows.append(["r", offset, op.namespace, str(at), topic, op.session_id, str(partition)])
            else:
                rows.append(["-", offset, op.namespace, str(at), "", ""])  # other events: only the checkpoint moves
        if isinstance(client, RedisCluster):
            applied = await self._apply_on_cluster(client, field, rows, str(batch[-1].offset))
        else:
            ops_json = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
            args: list[str | int] = [field, self.name, int(field in self._checkpoints.seen), ops_json]
            applied = await self._run("apply", [names.checkpoint_key(self.name)], args)
        if applied == -1:
            self._checkpoints.seen.discard(field)
            raise CheckpointLost(f"{self.name}: the checkpoint of {topic}[{partition}] is gone from Redis")
        self._checkpoints.seen.add(field)
        return Applied(int(applied))

    async def _apply_on_cluster(self, client: RedisCluster, field: str, rows: list[list[str]], last: str) -> int:
        # One script per namespace (its own slot), WAIT for the replicas, then the checkpoint: it never
        # covers a row that is not on a replica, and a re-delivered row is rewritten as it was.
        checkpoint, seen = names.checkpoint_key(self.name), int(field in self._checkpoints.seen)
        current = await client.hget(checkpoint, field)
        if seen and current is None:
            return -1
        by_namespace: dict[str, list[list[str]]] = {}
        for row in rows:
            by_namespace.setdefault(row[2], []).append(row)
        scripts: list[Script] = []
        for ns, ns_rows in by_namespace.items():
            base = self._prefix(ns)
            ops_json = json.dumps(ns_rows, ensure_ascii=False, separators=(",", ":"))
            scripts.append((_APPLY_NAMESPACE, [base + "index"], [int(current or -1), base, ops_json]))
        replies = await replicated(client, self.name, scripts)
        applied: int = sum(int(n) for n in replies)
        moved = await client.eval(ADVANCE, 1, checkpoint, field, last, seen)  # forward only, as on one server
        return applied if moved != -1 else -1

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        return await self._checkpoints.read(await self._open(), topic, partition)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        await self._checkpoints.advance(await self._open(), topic, partition, offset)

    async def _reading(self, namespace: str, want: Position | None) -> tuple[list[str], list[str | int]] | None:
        """The keys and `want` arguments of a read script, or None while the view is behind `want`.

        On one server the script checks the checkpoint itself (KEYS[1]); on a cluster the checkpoint is
        in another slot, so it is read first and the script gets the index twice (one slot, no check).
        """
        client = await self._open()
        index = self._prefix(namespace) + "index"
        if want is None:
            return [index, index], ["", 0]
        if not self._cluster:
            return [names.checkpoint_key(self.name), index], [f"{want.topic}:{want.partition}", want.offset]
        applied = await client.hget(names.checkpoint_key(self.name), f"{want.topic}:{want.partition}")
        return None if applied is None or int(applied) < want.offset else ([index, index], ["", 0])

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        reading = await self._reading(key.namespace, want)
        if reading is None:
            return None
        reply = await self._run("get", reading[0], [*reading[1], self._prefix(key.namespace) + "m:"])
        if reply[0] == b"wait":
            return None
        return [_message(v) for v in reply[1:]]

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        needle = query.casefold()
        reading = await self._reading(key.namespace, want)
        if reading is None:
            return None
        keys, behind = reading
        rows = self._prefix(key.namespace) + "m:"
        hits: list[Message] = []
        start = "-"
        while True:  # page by page through the index, in the view's order: each call reads PAGE rows at most
            reply = await self._run("page", keys, [*behind, start, PAGE, needle, int(needle.isascii()), rows])
            if reply[0] == b"wait":
                return None
            behind = ["", 0]  # the first page waited for `want`: the rest need not
            for value in reply[3:]:
                message = _message(value)
                if matches(needle, message.content):
                    hits.append(message)
                    if len(hits) == limit:
                        return hits
            if int(reply[2]) < PAGE:
                return hits
            start = "(" + text(reply[1])

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.checkpoint(want.topic, want.partition)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        client = await self._open()
        for ns in namespaces:
            head = self._prefix(ns)
            await delete_matching(client, head + "*", re.compile(re.escape(head)))
        await self._checkpoints.drop(client, topics)

    async def close(self) -> None:
        await self._client.close()
        self._scripts.clear()
