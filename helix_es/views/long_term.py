"""long-term: every message of a namespace (the agent id), across its sessions, until cleared.

YAML `type: long-term` with `store: memory | redis | postgres | file` (default memory; file is the
in-process view over the file-backed embedded log, exported as the file store does), or the seed's
`type: sql-long-term` (PostgreSQL; a DSN from `dsn:` or HELIX_POSTGRES_DSN is required). A
postgres long-term memory lives in `table:` (default `agent_memory`). A custom name must
match `[A-Za-z0-9_]{1,63}` (63 bytes is PostgreSQL's identifier limit; longer names would be
truncated silently) and must not be a PostgreSQL keyword, reserved or not (case-insensitive;
the list is `pg_get_keywords()` of PostgreSQL 15 plus the words 16-18 added). It is refused
with a `ConfigError` naming `memory.table` when the config is read, before any SQL runs.
Names are folded to lower case, as PostgreSQL folds unquoted identifiers, and always quoted
in SQL.

The view is namespace-wide: `get` returns every message of the namespace in event-time order
(timestamp, then topic, partition, offset), `search` a case-insensitive substring match of
`content`, oldest first; a clear from any session of the namespace empties it. The
projections (and the reasons behind their order and clear rules) are in `projectors.long_term`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from helix_es.model.errors import ConfigError
from helix_es.views import IndexView

if TYPE_CHECKING:
    from helix_es.config import MemoryConfig
    from helix_es.projection.protocol import Projection

DEFAULT_TABLE = "agent_memory"
MAX_TABLE = 63  # NAMEDATALEN - 1: PostgreSQL truncates longer identifiers without an error
TABLE_RE = re.compile(r"[A-Za-z0-9_]+")
LONG_TERM_KEYS = frozenset({"table"})

# Every PostgreSQL keyword, reserved or not (`SELECT word FROM pg_get_keywords()` on 15, plus 16-18's).
_KEYWORDS = """
abort absent absolute access action add admin after aggregate all also alter always analyse analyze and any
array as asc asensitive assertion assignment asymmetric at atomic attach attribute authorization backward before
begin between bigint binary bit boolean both breadth by cache call called cascade cascaded case cast catalog
chain char character characteristics check checkpoint class close cluster coalesce collate collation column
columns comment comments commit committed compression concurrently conditional configuration conflict connection
constraint constraints content continue conversion copy cost create cross csv cube current current_catalog
current_date current_role current_schema current_time current_timestamp current_user cursor cycle data database
day deallocate dec decimal declare default defaults deferrable deferred definer delete delimiter delimiters
depends depth desc detach dictionary disable discard distinct do document domain double drop each else empty
enable encoding encrypted end enforced enum error escape event except exclude excluding exclusive execute exists
explain expression extension external extract false family fetch filter finalize first float following for force
foreign format forward freeze from full function functions generated global grant granted greatest group
grouping groups handler having header hold hour identity if ilike immediate immutable implicit import in include
including increment indent index indexes inherit inherits initially inline inner inout input insensitive insert
instead int integer intersect interval into invoker is isnull isolation join json json_array json_arrayagg
json_exists json_object json_objectagg json_query json_scalar json_serialize json_table json_value keep key keys
label language large last lateral leading leakproof least left level like limit listen load local localtime
localtimestamp location lock locked logged mapping match matched materialized maxvalue merge merge_action method
minute minvalue mode month move name names national natural nchar nested new next nfc nfd nfkc nfkd no none
normalize normalized not nothing notify notnull nowait null nullif nulls numeric object objects of off offset
oids old omit on only operator option options or order ordinality others out outer over overlaps overlay
overriding owned owner parallel parameter parser partial partition passing password path period placing plans
policy position preceding precision prepare prepared preserve primary prior privileges procedural procedure
procedures program publication quote quotes range read real reassign recheck recursive ref references
referencing refresh reindex relative release rename repeatable replace replica reset restart restrict return
returning returns revoke right role rollback rollup routine routines row rows rule savepoint scalar schema
schemas scroll search second security select sequence sequences serializable server session session_user set
setof sets share show similar simple skip smallint snapshot some source sql stable standalone start statement
statistics stdin stdout storage stored strict string strip subscription substring support symmetric sysid system
system_user table tables tablesample tablespace target temp template temporary text then ties time timestamp to
trailing transaction transform treat trigger trim true truncate trusted type types uescape unbounded uncommitted
unconditional unencrypted union unique unknown unlisten unlogged until update user using vacuum valid validate
validator value values varchar variadic varying verbose version view views virtual volatile when where
whitespace window with within without work wrapper write xml xmlattributes xmlconcat xmlelement xmlexists
xmlforest xmlnamespaces xmlparse xmlpi xmlroot xmlserialize xmltable year yes zone
"""
SQL_KEYWORDS = frozenset(_KEYWORDS.split())


def check_table(table: object, field: str = "memory.table") -> str:
    """The table name folded to lower case, or `ConfigError` naming `field`; runs no SQL."""
    if not isinstance(table, str) or not TABLE_RE.fullmatch(table):
        raise ConfigError(field, f"must contain only letters, digits and underscores, got {table!r}")
    if len(table) > MAX_TABLE:
        raise ConfigError(field, f"must be at most {MAX_TABLE} characters (PostgreSQL's limit), got {len(table)}")
    if table.lower() in SQL_KEYWORDS:
        raise ConfigError(field, f"{table!r} is an SQL keyword; choose another table name")
    return table.lower()


@dataclass(frozen=True)
class LongTerm(IndexView):
    """The long-term view's options. The service addresses stay out of repr: a DSN may hold a password."""

    kind: ClassVar[str] = "long-term"

    store: str = "memory"
    table: str = DEFAULT_TABLE
    dsn: str | None = field(default=None, repr=False)
    redis_url: str | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        # Another table is another materialisation: its own consumer group and checkpoints.
        if self.store == "postgres" and self.table != DEFAULT_TABLE:
            return f"{self.kind}-{self.table}"
        return self.kind

    def projection(self, memory: MemoryConfig) -> Projection:
        """A new projection owning its connection (opened lazily, on first use).

        Service addresses come from `memory` first: config.py decides between YAML and environment.
        """
        if self.store == "redis":
            from helix_es.stores.redis.long_term import RedisLongTerm

            url = memory.redis_url or self.redis_url
            if not url:
                raise ConfigError("memory.redis_url", "a redis long-term memory needs redis_url (or HELIX_REDIS_URL)")
            return RedisLongTerm(url, name=self.name)
        if self.store == "postgres":
            from helix_es.stores.postgres.long_term import PostgresLongTerm

            dsn = memory.postgres_dsn or self.dsn
            if not dsn:
                raise ConfigError("memory.dsn", "a postgres long-term memory needs dsn (or HELIX_POSTGRES_DSN)")
            return PostgresLongTerm(dsn, table=self.table, name=self.name)
        if self.store in ("memory", "file"):
            # store: file is the embedded log on disk with in-process views, exported to file_path.
            from helix_es.stores.memory.long_term import MemoryLongTerm

            return MemoryLongTerm(name=self.name)
        raise ConfigError("memory.store", f"long-term lives in memory, file, redis or postgres, not {self.store!r}")


def _build(options: Mapping[str, Any], where: str, store: Any) -> LongTerm:
    table = DEFAULT_TABLE
    if "table" in options:
        if store != "postgres":
            raise ConfigError(f"{where}.table", f"only a postgres long-term memory has a table, not store: {store}")
        table = check_table(options["table"], f"{where}.table")
    # As written in the YAML; `projection` prefers the addresses config.py resolved (environment included).
    dsn = options.get("dsn") or options.get("postgres_dsn")
    redis_url = options.get("redis_url")
    return LongTerm(
        store=store if isinstance(store, str) else "memory",  # a bad store is reported by parse_memory
        table=table,
        dsn=dsn if store == "postgres" else None,
        redis_url=redis_url if store == "redis" else None,
    )


def long_term(options: Mapping[str, Any], where: str) -> LongTerm:
    """YAML `type: long-term` (+ `store:`, `table:` for postgres)."""
    return _build(options, where, options.get("store", "memory"))


def sql_long_term(options: Mapping[str, Any], where: str) -> LongTerm:
    """YAML `type: sql-long-term`: the seed's SQLDBLongTermMemory, a long-term memory in PostgreSQL."""
    store = options.get("store", "postgres")
    if store != "postgres":
        raise ConfigError(f"{where}.store", f"sql-long-term lives in PostgreSQL: leave store out, got {store!r}")
    if not (options.get("dsn") or options.get("postgres_dsn") or os.environ.get("HELIX_POSTGRES_DSN")):
        raise ConfigError(f"{where}.dsn", "sql-long-term needs dsn: postgres://... (or HELIX_POSTGRES_DSN)")
    return _build(options, where, "postgres")
