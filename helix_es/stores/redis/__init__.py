"""Redis: session views, long-term, LangGraph store items, aliases and data keys, and the shared connection pool."""

from __future__ import annotations

from helix_es.stores.kind import StoreKind
from helix_es.stores.redis.aliases import RedisAliases
from helix_es.stores.redis.checkpoints import RedisCheckpoints
from helix_es.stores.redis.idempotency import RedisIdempotency
from helix_es.stores.redis.items import RedisItems
from helix_es.stores.redis.keys import RedisKeyStore
from helix_es.stores.redis.pool import transient
from helix_es.stores.redis.retired import long_term
from helix_es.stores.redis.rows import RedisRows
from helix_es.stores.redis.views import RedisStore


def _url(url: str | None) -> str:
    assert url, "a redis store needs its URL (config checks it)"
    return url


KIND = StoreKind(
    "redis",
    address="redis_url",
    in_process=False,
    views=lambda url: RedisStore(_url(url)),
    aliases=lambda url: RedisAliases(_url(url)),
    keys=lambda url: RedisKeyStore(_url(url)),
    idempotency=lambda url: RedisIdempotency(_url(url)),
    items=lambda url, view: RedisItems(_url(url), view),
    checkpoints=lambda url, name: RedisCheckpoints(_url(url), name),
    rows=lambda url, name, tables, *, family="rows": RedisRows(
        _url(url), name, tables, retired=long_term if family == "rows" else None, family=family
    ),
    transient=transient,
)
