"""Aliases in Redis: `helix:alias:<view>` (string), `helix:targets:<view>` (set), `helix:served:<view>` (zset)."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

from helix_es.model.names import alias_key, served_key, targets_key
from helix_es.stores.redis.pool import redis_client, text

_SWITCH = """
local current = redis.call('GET', KEYS[1]) or ARGV[3]
if current ~= ARGV[1] then return current end
redis.call('SET', KEYS[1], ARGV[2])
redis.call('SADD', KEYS[2], ARGV[2])
return false
"""


class RedisAliases:
    kind = "redis"
    cheap = False

    def __init__(self, url: str) -> None:
        self.url = url
        self._redis: aioredis.Redis | None = None

    @property
    def redis(self) -> aioredis.Redis:
        if self._redis is None:  # opened on first use: most views never switch
            self._redis = redis_client(self.url)
        return self._redis

    async def get(self, alias: str) -> str | None:
        value = await self.redis.get(alias_key(alias))
        return None if value is None else text(value)

    async def switch(self, alias: str, target: str, *, expect: str, base: str) -> str | None:
        found = await self.redis.eval(_SWITCH, 2, alias_key(alias), targets_key(alias), expect, target, base)
        return None if found is None else text(found)

    async def targets(self, alias: str) -> set[str]:
        return {text(t) for t in await self.redis.smembers(targets_key(alias))}

    async def add_target(self, alias: str, target: str) -> None:
        await self.redis.sadd(targets_key(alias), target)

    async def forget_target(self, alias: str, target: str) -> None:
        await self.redis.srem(targets_key(alias), target)

    async def announce(self, alias: str, target: str, ttl: float) -> None:
        # A sorted set of target -> until (ms since the epoch): several services may announce.
        if ttl > 0:
            await self.redis.zadd(served_key(alias), {target: time.time() * 1000 + ttl * 1000})
        else:
            await self.redis.zrem(served_key(alias), target)

    async def served(self, alias: str) -> set[str]:
        found = await self.redis.zrangebyscore(served_key(alias), time.time() * 1000, "+inf")
        return {text(t) for t in found}

    async def close(self) -> None:
        if self._redis is not None:
            await self._redis.aclose()
            self._redis = None
