"""Idempotency keys in Redis: a sorted set per view and session, in the session's hash slot.

`helix:memory:<ns>:{<sid>}:<view>:idempotency` scores each key with the offset of its first event;
one script per session (one round trip for a batch: a pipeline) adds the new keys, trims to the
newest `REMEMBERED_KEYS` and returns every key's first offset. One key per script, so it stays
inside one hash slot on a Redis Cluster.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import cast

from redis.exceptions import NoScriptError

from helix_es.model import names
from helix_es.model.events import REMEMBERED_KEYS
from helix_es.stores.ports import Claim, SessionKey
from helix_es.stores.redis.pool import Client, Lazy, is_cluster
from helix_es.stores.redis.views import delete_matching, every_session

# ARGV: remembered, ttl in ms (0: none), then (key, offset) pairs in log order.
_CLAIM = """
local out = {}
local added = false
for i = 3, #ARGV, 2 do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score then
    out[#out + 1] = tonumber(score)
  else
    redis.call('ZADD', KEYS[1], ARGV[i + 1], ARGV[i])
    out[#out + 1] = tonumber(ARGV[i + 1])
    added = true
  end
end
if added then redis.call('ZREMRANGEBYRANK', KEYS[1], 0, -(tonumber(ARGV[1]) + 1)) end
if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return out
"""


class RedisIdempotency:
    kind = "redis"

    def __init__(self, url: str, remembered: int = REMEMBERED_KEYS) -> None:
        self._client = Lazy(url)
        self.remembered = remembered
        self._sha: str | None = None

    def __repr__(self) -> str:
        return "RedisIdempotency()"  # a URL may hold a password

    @property
    def redis(self) -> Client:
        """The client for a look at the keys (tests, tools); calls open theirs with cluster detection."""
        return self._client.now

    async def claim(self, view: str, claims: Sequence[Claim], *, ttl: float | None = None) -> list[int]:
        by_session: dict[SessionKey, list[str | int]] = {}
        ttl_ms = 0 if not ttl else max(1, int(ttl * 1000))
        for c in claims:
            by_session.setdefault(c.key, [self.remembered, ttl_ms]).extend((c.idempotency_key, c.offset))
        try:
            replies = await self._run(view, by_session)
        except NoScriptError:  # the server lost its scripts (a restart, SCRIPT FLUSH): load it again
            self._sha = None
            replies = await self._run(view, by_session)
        firsts = {key: iter(reply) for key, reply in zip(by_session, replies, strict=True)}
        return [int(next(firsts[c.key])) for c in claims]

    async def _run(self, view: str, by_session: dict[SessionKey, list[str | int]]) -> list[list[int]]:
        # EVALSHA by hand: redis-py's pipelined Script asks SCRIPT EXISTS first, a round trip per batch.
        # On a cluster SCRIPT LOAD goes to every master and the pipeline to each node its sessions.
        client = await self._client()
        if self._sha is None:
            self._sha = str(await client.script_load(_CLAIM))
        if len(by_session) == 1:  # a live batch: one session, and a pipeline costs more than it saves
            ((key, args),) = by_session.items()
            name = names.idempotency_key_name(key.namespace, key.session_id, view)
            return [cast(list[int], await client.evalsha(self._sha, 1, name, *args))]
        cluster = is_cluster(client)
        async with client.pipeline(transaction=False) as pipe:
            for key, args in by_session.items():
                name = names.idempotency_key_name(key.namespace, key.session_id, view)
                if cluster:  # redis-py's cluster pipeline refuses EVALSHA; EVAL hits the same script cache
                    pipe.eval(_CLAIM, 1, name, *args)
                else:
                    pipe.evalsha(self._sha, 1, name, *args)
            return cast(list[list[int]], await pipe.execute())

    async def drop(self, view: str, namespaces: Collection[str]) -> None:
        for namespace in namespaces:
            await delete_matching(
                await self._client(), *every_session(names.idempotency_key_name(namespace, "*", view))
            )

    async def close(self) -> None:
        await self._client.close()
        self._sha = None
