"""One way to open Redis: a bounded pool whose callers wait for a free connection.

redis-py's default async pool raises `MaxConnectionsError` once 100 commands are in flight (a
projector reading the checkpoints of hundreds of partitions at once does that); waiting is what
a store should do instead.
"""

from __future__ import annotations

import redis.asyncio as aioredis

MAX_CONNECTIONS = 64
WAIT_SECONDS = 30.0  # for a free connection, then redis.ConnectionError


def redis_client(url: str) -> aioredis.Redis:
    pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=MAX_CONNECTIONS, timeout=WAIT_SECONDS)
    return aioredis.Redis.from_pool(pool)  # closing the client closes its pool


def text(value: object) -> str:
    """A Redis reply as text (replies are bytes: clients here never decode)."""
    return value.decode() if isinstance(value, bytes) else str(value)
