"""One way to open Redis: a bounded pool whose callers wait for a free connection; a cluster if the node is one.

redis-py's default async pool raises `MaxConnectionsError` once 100 commands are in flight (a
projector reading the checkpoints of hundreds of partitions at once does that); waiting is what
a store should do instead.

`connect(url)` asks the node once (`INFO cluster`): with `cluster_enabled:1` it returns a
`RedisCluster` on the same URL (it finds the other nodes itself), else the plain client it asked
with. Stores call it on first use, so a store can be made while Redis is down, as before. The
cluster client turns a failover's `ClusterDownError`/`SlotNotCoveredError` into a
`ConnectionError`, which callers (the projector's retry loop) already treat as "wait and retry".
"""

from __future__ import annotations

import asyncio
from typing import Any, TypeAlias, TypeGuard, cast

import redis.asyncio as aioredis
from redis import exceptions as redis_errors
from redis.asyncio.cluster import ClusterPipeline, RedisCluster
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

MAX_CONNECTIONS = 64
WAIT_SECONDS = 30.0  # for a free connection, then redis.ConnectionError

Client: TypeAlias = "aioredis.Redis | RedisCluster"

# A failover in progress (a master gone, its replica not yet promoted): waiting cures it.
_FAILOVER = (redis_errors.ClusterDownError, redis_errors.SlotNotCoveredError, redis_errors.MasterDownError)


def redis_client(url: str) -> aioredis.Redis:
    """A plain client (no cluster detection): `connect` is what stores use."""
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=WAIT_SECONDS)
    return aioredis.Redis.from_pool(pool)  # closing the client closes its pool


class _Pipeline(ClusterPipeline):
    async def execute(self, raise_on_error: bool = True, allow_redirections: bool = True) -> list[Any]:
        try:
            return await super().execute(raise_on_error, allow_redirections)
        except _FAILOVER as exc:
            raise redis_errors.ConnectionError(f"Redis Cluster failover: {exc}") from exc


class Cluster(RedisCluster):
    """`RedisCluster`, with a failover's errors as `ConnectionError` (transient to every caller), and
    callers waiting for one of `MAX_CONNECTIONS` slots: its nodes' pools raise when full, as
    redis-py's default pool does (a projector reads hundreds of checkpoints, all on one node, at once)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)

    async def execute_command(self, *args: Any, **kwargs: Any) -> Any:
        try:
            async with self._slots:
                return await super().execute_command(*args, **kwargs)
        except _FAILOVER as exc:
            raise redis_errors.ConnectionError(f"Redis Cluster failover: {exc}") from exc

    def pipeline(self, transaction: Any | None = None, shard_hint: Any | None = None) -> ClusterPipeline:
        if shard_hint:
            raise redis_errors.RedisClusterException("shard_hint is deprecated in cluster mode")
        return _Pipeline(self, transaction)  # type: ignore[abstract]  # as RedisCluster.pipeline makes it


def cluster_client(url: str) -> Cluster:
    # Retries with backoff inside the client ride out a short failover (cluster-node-timeout + election);
    # a longer one reaches the caller as ConnectionError.
    retry = Retry(ExponentialBackoff(cap=1.0, base=0.05), retries=6)
    # Pipelines take a connection per node beside the MAX_CONNECTIONS commands: room for them.
    return cast(Cluster, Cluster.from_url(url, retry=retry, max_connections=4 * MAX_CONNECTIONS))


def is_cluster(client: Client) -> TypeGuard[RedisCluster]:
    return isinstance(client, RedisCluster)


async def connect(url: str) -> Client:
    """The client for `url`: a `Cluster` if the node runs in cluster mode, else a plain client."""
    plain = redis_client(url)
    try:
        info = await plain.info("cluster")
    except BaseException:
        await plain.aclose()
        raise
    if not int(info.get("cluster_enabled", 0)):
        return plain
    await plain.aclose()
    cluster = cluster_client(url)
    try:
        await cluster.initialize()  # the slot map now: writes consult it for their replicas
    except BaseException:
        await cluster.aclose()
        raise
    return cluster


class Lazy:
    """A client opened on first use (`await lazy()`): callers that race for it share one `connect`."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.client: Client | None = None
        self._opening: asyncio.Task[Client] | None = None
        self._plain: aioredis.Redis | None = None

    @property
    def now(self) -> Client:
        """The client without awaiting: the one opened, else a plain client (detection takes a round trip)."""
        if self.client is not None:
            return self.client
        if self._plain is None:
            self._plain = redis_client(self.url)
        return self._plain

    async def __call__(self) -> Client:
        if self.client is not None:
            return self.client
        if self._opening is None:
            self._opening = asyncio.ensure_future(connect(self.url))
        opening = self._opening
        try:
            client = await asyncio.shield(opening)  # one caller cancelled does not cancel the others' open
        except BaseException:
            if self._opening is opening and opening.done():
                self._opening = None  # failed (Redis down?): the next call tries again
            raise
        self.client = client
        return client

    async def close(self) -> None:
        opening, self._opening = self._opening, None
        if opening is not None and not opening.done():
            opening.cancel()
        for client in (self.client, self._plain):
            if client is not None:
                await client.aclose()
        self.client = self._plain = None


def text(value: object) -> str:
    """A Redis reply as text (replies are bytes: clients here never decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)


_TRANSIENT: tuple[type[BaseException], ...] = (
    redis_errors.ConnectionError,  # includes BusyLoadingError (a restarted Redis loading its data)
    redis_errors.TimeoutError,
    redis_errors.ReadOnlyError,  # a replica while a failover promotes another server
    redis_errors.TryAgainError,
)


def transient(exc: BaseException) -> bool:
    """A Redis failure that waiting cures: the server down, restarting, loading or failing over."""
    return isinstance(exc, _TRANSIENT)
