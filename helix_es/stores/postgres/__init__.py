"""PostgreSQL: session views, long-term, vector, aliases and data keys, their DDL, and the shared pool."""

from __future__ import annotations

from helix_es.stores.kind import StoreKind
from helix_es.stores.postgres.aliases import PostgresAliases
from helix_es.stores.postgres.checkpoints import PostgresCheckpoints
from helix_es.stores.postgres.idempotency import PostgresIdempotency
from helix_es.stores.postgres.items import PostgresItems
from helix_es.stores.postgres.keys import PostgresKeyStore
from helix_es.stores.postgres.pool import transient
from helix_es.stores.postgres.retired import LONG_TERM
from helix_es.stores.postgres.rows import PostgresRows
from helix_es.stores.postgres.vector import PostgresVectorStore
from helix_es.stores.postgres.views import PostgresStore


def _dsn(dsn: str | None) -> str:
    assert dsn, "a postgres store needs its DSN (config checks it)"
    return dsn


KIND = StoreKind(
    "postgres",
    address="dsn",
    in_process=False,
    views=lambda dsn: PostgresStore(_dsn(dsn)),
    aliases=lambda dsn: PostgresAliases(_dsn(dsn)),
    vectors=lambda dsn: PostgresVectorStore(_dsn(dsn)),
    keys=lambda dsn: PostgresKeyStore(_dsn(dsn)),
    idempotency=lambda dsn: PostgresIdempotency(_dsn(dsn)),
    items=lambda dsn, view: PostgresItems(_dsn(dsn), view),
    checkpoints=lambda dsn, name: PostgresCheckpoints(_dsn(dsn), name),
    rows=lambda dsn, name, tables, *, family="rows": PostgresRows(_dsn(dsn), name, tables, retired=LONG_TERM),
    transient=transient,
    tables=True,
)
