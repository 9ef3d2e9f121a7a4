"""Aliases in Redis: `helix:alias:<view>` (string), `helix:targets:<view>` (set), `helix:served:<view>` (zset).

On one server a switch is one script over the alias and its targets. On a Redis Cluster those two
keys sit in different slots: the compare-and-set runs on the alias alone, then the target joins
the set. A crash between the two leaves the alias switched and the set without it, which only
`targets` shows (rebuilds number the next version from the targets and the current alias alike).
"""

from __future__ import annotations

import time

from helix_es.model.names import alias_key, served_key, targets_key
from helix_es.stores.redis.pool import Client, Lazy, is_cluster, text

_SWITCH = """
local current = redis.call('GET', KEYS[1]) or ARGV[3]
if current ~= ARGV[1] then return current end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[2])
return false
"""

_SWITCH_ALONE = """
local current = redis.call('GET', KEYS[1]) or ARGV[3]
if current ~= ARGV[1] then return current end
redis.call('SET', KEYS[1], ARGV[2])
return false
"""


class RedisAliases:
    kind = "redis"
    cheap = False

    def __init__(self, url: str) -> None:
        self.url = url
        self._client = Lazy(url)  # opened on first use: most views never switch

    async def _redis(self) -> Client:
        return await self._client()

    async def get(self, alias: str) -> str | None:
        value = await (await self._redis()).get(alias_key(alias))
        return None if value is None else text(value)

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        client = await self._redis()
        if is_cluster(client):
            found = await client.eval(_SWITCH_ALONE, 1, alias_key(alias), expect, target, base)
            if found is None:
                await client.sadd(targets_key(alias), target)
        else:
            found = await client.eval(_SWITCH, 2, alias_key(alias), targets_key(alias), expect, target, base)
        return None if found is None else text(found)

    async def targets(self, alias: str) -> set[str]:
        return {text(t) for t in await (await self._redis()).smembers(targets_key(alias))}

    async def add_target(self, alias: str, target: str) -> None:
        await (await self._redis()).sadd(targets_key(alias), target)

    async def forget_target(self, alias: str, target: str) -> None:
        await (await self._redis()).srem(targets_key(alias), target)

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        # A sorted set of target -> until (ms since the epoch): several services may announce.
        if ttl > 0:
            await (await self._redis()).zadd(served_key(alias), {target: time.time() * 1000 + ttl * 1000})
        else:
            await (await self._redis()).zrem(served_key(alias), target)

    async def served(self, alias: str) -> set[str]:
        found = await (await self._redis()).zrangebyscore(served_key(alias), time.time() * 1000, "+inf")
        return {text(t) for t in found}

    async def close(self) -> None:
        await self._client.close()
