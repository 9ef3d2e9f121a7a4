"""Data keys in Redis: a hash per session, `helix:keys:<ns>:{<sid>}`, beside its views in one slot."""

from __future__ import annotations

import json
from datetime import datetime

from helix_es.model import names
from helix_es.stores.key_rows import key_row_from, key_row_json
from helix_es.stores.ports import KeyRow
from helix_es.stores.redis.pool import Client, Lazy, text

_LIVE = "~live"  # the hash field naming the live key; key ids never contain "~"

_REDIS_INSERT = """
if redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then return 0 end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end  -- a tombstone keeps its id
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2], ARGV[3], ARGV[1])
return 1
"""

_REDIS_ERASE = """
local erased = {}
local all = redis.call('HGETALL', KEYS[1])
for i = 1, #all, 2 do
  if all[i] ~= ARGV[2] then
    local row = cjson.decode(all[i + 1])
    if row['erased_at'] == nil or row['erased_at'] == cjson.null then
      row['wrapped_key'] = cjson.null
      row['erased_at'] = ARGV[1]
      redis.call('HSET', KEYS[1], all[i], cjson.encode(row))
      erased[#erased + 1] = all[i]
    end
  end
end
redis.call('HDEL', KEYS[1], ARGV[2])
return erased
"""


class RedisKeyStore:
    """A hash per session, `helix:keys:<ns>:{<sid>}`: key id -> JSON row, and `~live` -> the live id.

    Redis keeps erased values in RDB snapshots and the AOF until they are rewritten: useless
    without the master key, but see docs/operations/erasure.md on backups.
    """

    kind = "redis"

    def __init__(self, url: str) -> None:
        self.url = url
        self._client = Lazy(url)  # one key per call: the same on a cluster

    def __repr__(self) -> str:
        return "RedisKeyStore()"

    async def _redis(self) -> Client:
        return await self._client()

    @staticmethod
    def key(namespace: str, session_id: str) -> str:
        # The session's hash tag: beside its views in one Redis Cluster slot.
        return f"helix:keys:{names.check_namespace(namespace)}:{{{names.check_session_id(session_id)}}}"

    async def rows(self, namespace: str, session_id: str) -> list[KeyRow]:
        found = await (await self._redis()).hgetall(self.key(namespace, session_id))
        rows = [
            key_row_from(namespace, session_id, text(k), json.loads(v)) for k, v in found.items() if text(k) != _LIVE
        ]
        return sorted(rows, key=lambda r: (r.created_at, r.key_id))

    async def insert(self, row: KeyRow) -> None:
        await (await self._redis()).eval(
            _REDIS_INSERT, 1, self.key(row.namespace, row.session_id), row.key_id, key_row_json(row), _LIVE
        )

    async def erase(self, namespace: str, session_id: str, at: datetime) -> list[str]:
        erased = await (await self._redis()).eval(
            _REDIS_ERASE, 1, self.key(namespace, session_id), at.isoformat(), _LIVE
        )
        return sorted(text(e) for e in erased)

    async def close(self) -> None:
        await self._client.close()
