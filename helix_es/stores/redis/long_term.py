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

`apply` is one Lua script: it reads the partition checkpoint, skips what it covers, folds the
rest (inserts newer than the watermark, clears) and moves the checkpoint, all atomically on one
server. It builds the message keys itself, so it is not Redis Cluster safe (nor is the
checkpoint hash beside session keys in `helix_es.stores.redis.views`).

`get` is one Lua script: the checkpoint (when a `want` is given; no data is sent while behind),
`ZRANGE` of the index and `MGET`s. `search` is the seed's keyspace scan, also in one script, so
it is one round trip and sees one state: `SCAN` with `MATCH helix:memory:<ns>:<view>:m:*`, then
the substring test. The script tests ASCII contents itself (ASCII lower case equals casefold
there) and passes non-ASCII ones on; Python sorts the hits by key and applies `casefold`, so
the result is exactly the memory store's. A scan walks the whole keyspace while Redis waits:
that is the seed's design, fine for an agent's memory in a Redis of moderate size; a namespace
with a large history belongs in PostgreSQL.

Event times before 1970 count as 1970 here (the order key has no sign); helix-es never writes such.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import Any

import redis.asyncio as aioredis

from helix_es.model import names
from helix_es.model.events import Position, Record, micros
from helix_es.model.message import Message, decode_json
from helix_es.stores.ports import Applied, CheckpointLost, SessionKey
from helix_es.stores.redis.pool import redis_client
from helix_es.stores.redis.views import advance_checkpoint, delete_matching, drop_checkpoints
from helix_es.views.long_term import VIEW_NAME, Op, OrderKey, matches, ops

_APPLY = r"""
local field, view = ARGV[1], ARGV[2]
local stored = redis.call('HGET', KEYS[1], field)
if not stored and ARGV[3] == '1' then
  return -1  -- the checkpoint this writer had seen is gone (FLUSHALL): so are the rows under it
end
local checkpoint = tonumber(stored or '-1')
local marks, applied, last = {}, 0, nil
-- One JSON argument of [kind, offset, namespace, at, member, value] rows (numbers as text): one
-- argument to send, not six per event.
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
    end
    marks[base] = mark
  end
end
if last then redis.call('HSET', KEYS[1], field, last) end
return applied
"""

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

# Returns {'wait', applied} or {'ok', key, value, key, value, ...} of the candidates.
_SEARCH = (
    _BEHIND
    + r"""
local needle, ascii = ARGV[4], ARGV[5] == '1'
local out = {'ok'}
local cursor = '0'
repeat
  local page = redis.call('SCAN', cursor, 'MATCH', ARGV[3], 'COUNT', 1000)
  cursor = page[1]
  local found = page[2]
  for i = 1, #found, 500 do
    local keys = {}
    for j = i, math.min(i + 499, #found) do keys[#keys + 1] = found[j] end
    local values = redis.call('MGET', unpack(keys))
    for k = 1, #values do
      local value = values[k]
      if value then
        local content = cjson.decode(value)['message']['content']
        local keep
        if string.find(content, '[\128-\255]') then
          keep = true  -- casefold of non-ASCII text is Python's to decide
        else
          keep = ascii and string.find(string.lower(content), needle, 1, true) ~= nil
        end
        if keep then
          out[#out + 1] = keys[k]
          out[#out + 1] = value
        end
      end
    end
  end
until cursor == '0'
return out
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


def prefix(namespace: str, view: str = VIEW_NAME) -> str:
    return f"helix:memory:{names.check_namespace(namespace)}:{view}:"


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

    def __init__(self, url: str, *, name: str = VIEW_NAME) -> None:
        self.url = url
        self.name = name
        self._redis: aioredis.Redis | None = None  # opened on first use: a projection may be dropped unused
        self._scripts: dict[str, Any] = {}
        self._seen: set[str] = set()  # checkpoint fields read or written: if one vanishes, `apply` refuses

    @property
    def redis(self) -> aioredis.Redis:
        """The client, created (with the scripts) on first use."""
        if self._redis is None:
            self._redis = redis_client(self.url)
            for key, script in (("apply", _APPLY), ("get", _GET), ("search", _SEARCH), ("erase", _ERASE)):
                self._scripts[key] = self._redis.register_script(script)
        return self._redis

    async def _run(self, script: str, keys: list[str], args: list[str | int]) -> Any:
        client = self.redis
        return await self._scripts[script](keys=keys, args=args, client=client)

    async def apply(self, records: Sequence[Record], *, live: bool = True) -> Applied:
        if not records:
            return Applied(0)
        topic, partition, batch = ops(records)
        erasures = [op for op in batch if op.erased]
        for e in erasures:  # first: a crash before the apply script re-delivers the erasure with the batch
            base = prefix(e.namespace, self.name)
            await self._run("erase", [base + "index"], [base + "m:", e.session_id, topic, partition, e.offset])
        field = f"{topic}:{partition}"
        rows: list[list[str]] = []
        for op in batch:
            at = max(micros(op.at), 0)
            offset = str(op.offset)
            if op.message is not None and not any(
                e.erases(op.session_id, topic, partition, op.offset) for e in erasures
            ):
                rows.append(["a", offset, op.namespace, str(at), member(op.order), _value(op, op.message, at)])
            elif op.clear:
                rows.append(["c", offset, op.namespace, str(at), f"({at + 1:020d}", ""])  # members with time <= at
            else:
                rows.append(["-", offset, op.namespace, str(at), "", ""])  # other events: only the checkpoint moves
        ops_json = json.dumps(rows, ensure_ascii=False, separators=(",", ":"))
        args: list[str | int] = [field, self.name, int(field in self._seen), ops_json]
        applied = await self._run("apply", [names.checkpoint_key(self.name)], args)
        if applied == -1:
            self._seen.discard(field)
            raise CheckpointLost(f"{self.name}: the checkpoint of {topic}[{partition}] is gone from Redis")
        self._seen.add(field)
        return Applied(int(applied))

    async def checkpoint(self, topic: str, partition: int) -> int | None:
        field = f"{topic}:{partition}"
        value = await self.redis.hget(names.checkpoint_key(self.name), field)
        if value is None:
            return None
        self._seen.add(field)  # from now on `apply` refuses to write it afresh
        return int(value)

    async def advance(self, topic: str, partition: int, offset: int) -> None:
        field = f"{topic}:{partition}"
        try:
            await advance_checkpoint(self.redis, self.name, topic, partition, offset, seen=field in self._seen)
        except CheckpointLost:
            self._seen.discard(field)
            raise
        self._seen.add(field)

    @staticmethod
    def _want(want: Position | None) -> list[str | int]:
        return ["", 0] if want is None else [f"{want.topic}:{want.partition}", want.offset]

    async def get(self, key: SessionKey, want: Position | None) -> list[Message] | None:
        base = prefix(key.namespace, self.name)
        keys = [names.checkpoint_key(self.name), base + "index"]
        reply = await self._run("get", keys, [*self._want(want), base + "m:"])
        if reply[0] == b"wait":
            return None
        return [_message(v) for v in reply[1:]]

    async def search(self, key: SessionKey, query: str, limit: int, want: Position | None) -> list[Message] | None:
        needle = query.casefold()
        pattern = prefix(key.namespace, self.name) + "m:*"  # namespaces hold no glob characters
        reply = await self._run(
            "search", [names.checkpoint_key(self.name)], [*self._want(want), pattern, needle, int(needle.isascii())]
        )
        if reply[0] == b"wait":
            return None
        found = dict(zip(reply[1::2], reply[2::2], strict=True))  # SCAN may return a key twice
        hits = []
        for name in sorted(found):
            message = _message(found[name])
            if matches(needle, message.content):
                hits.append(message)
                if len(hits) == limit:
                    break
        return hits

    async def applied(self, key: SessionKey, want: Position) -> int | None:
        return await self.checkpoint(want.topic, want.partition)

    async def drop(self, namespaces: Collection[str], topics: Collection[str]) -> None:
        for ns in namespaces:
            head = prefix(ns, self.name)
            await delete_matching(self.redis, head + "*", re.compile(re.escape(head)))
        await drop_checkpoints(self.redis, self.name, topics)
        self._seen.difference_update([f for f in self._seen if f.rpartition(":")[0] in topics])

    async def close(self) -> None:
        client, self._redis = self._redis, None
        self._scripts.clear()
        if client is not None:
            await client.aclose()
