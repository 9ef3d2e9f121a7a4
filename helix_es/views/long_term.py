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
`content`, oldest first; a clear from any session of the namespace empties it. One fold into
rows (`helix_es.views.long_term_rows`), applied by every store's row adapter, follows the rules
below, so a view rebuilt from the log is the same in every store and under every delivery order.

- **Scope.** Messages belong to the namespace (the agent id). Each keeps the session id that
  wrote it and its event time, for audit; `get` does not return them (a `Message` has no such
  fields).
- **Order.** A namespace's events spread over partitions with no total order, so `get` orders
  by event time, then topic, partition and offset (`order_key`): every projector agrees,
  whatever it applied first. Event times are the producers' clocks.
- **Clear.** A `MemoryCleared` from any session clears the whole namespace (the seed's
  `LongTermMemory.Clear` deletes everything of the agent). Each namespace keeps a `cleared_at`
  watermark, the latest clear time applied: a clear deletes every message with time <= it, and
  a message with time <= the watermark is never inserted. So the view is "the messages newer
  than the newest clear" whichever order partitions are applied in. A message stamped at or
  before a clear by a producer whose clock runs behind is cleared with it: the price of a
  deterministic view without a total order.
- **Erasure.** A `SessionErased` (`helix-es forget`) deletes every row of its session written
  before it: the rows of that session except those after it on its own partition (a session's
  events share one partition, the one its key hashes to, so offsets order them). It is applied
  atomically with the checkpoint, or before it, and deleting twice deletes nothing more, so a
  re-delivery is safe and a replay of the log ends without the session's erased rows.
- **Forgetting.** A `MemoryForgotten` naming the view (`LongTerm.name`; a rebuild target folds its
  base's) deletes rows of its session written before it, like an erasure: with `session`, all of them
  (later adds stay); else the rows at its `offsets` on its own partition, if the view holds them.
  Other views' forgettings and retries change nothing; deleting twice deletes nothing more.
- **Retraction.** A `MessageRetracted` deletes the newest row of its session on its own partition
  written before it (highest offset), if there is one: what the session's views take back, as far
  as the namespace still holds it (a clear may have taken it already). It moves nothing else, and
  it is applied once, in log order with the partition's other events, under the checkpoint.
- **Idempotence.** `apply` gets one topic-partition's records, skips those at or below the
  stored checkpoint of (view, topic, partition), and writes rows, watermark and checkpoint in
  one atomic step. Rows are keyed by (namespace, topic, partition, offset), so even a
  re-delivery past a lost checkpoint inserts nothing twice; inserts are idempotent and the
  watermark only grows, so the fold also commutes between partitions.
- **Read-your-writes.** `get`/`search` with a `want` position answer None until the checkpoint of
  (view, want.topic, want.partition) reaches want.offset, read in the same round trip as the data.
- **Search.** Case-insensitive substring of `content`, oldest first, at most `limit`: Python's
  `casefold` in memory and Redis, `ILIKE` (wildcards escaped) in PostgreSQL, whose case folding
  follows the database's collation.
- **Recall index.** `search: hybrid | vector | keyword` (stores memory and postgres) adds a vector view
  of the namespace beside the rows (`LongTerm.index`, listed by `MemoryConfig.parts`), fed by the
  same events; `search` and `recall` read it, `get` the rows. Ranking stays the vector view's
  meaning; these rows stay the seed's. The index is a view of its own name (`vector-<model>`): a
  forgetting names it beside this view (`MemoryConfig.parts`, as the policy worker does).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from helix_es.model.errors import ConfigError
from helix_es.model.events import (
    MemoryCleared,
    MemoryForgotten,
    MessageAdded,
    MessageRetracted,
    Record,
    SessionErased,
    micros,
)
from helix_es.model.message import Message
from helix_es.model.recall import SEARCH_MODES
from helix_es.providers.embed import parse_embed
from helix_es.views.base import IndexView
from helix_es.views.vector import Vector

DEFAULT_TABLE = "agent_memory"
MAX_TABLE = 63  # NAMEDATALEN - 1: PostgreSQL truncates longer identifiers without an error
TABLE_RE = re.compile(r"[A-Za-z0-9_]+")
LONG_TERM_KEYS = frozenset({"table", "search", "embed"})
INDEXED = ("hybrid", "vector", "keyword")  # the modes a long-term view keeps a recall index for

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


def target_table(table: str, view: str, target: str) -> str:
    """The PostgreSQL table of a long-term target: the view's table for its own name, else `<table>_<tag>`."""
    if target == view:
        return table
    tag = target[len(view) + 1 :] if target.startswith(view + "@") else target
    slug = re.sub(r"[^a-z0-9_]+", "_", tag.lower()).strip("_") or "t"
    name = f"{table}_{slug}"
    if len(name) > MAX_TABLE:  # PostgreSQL would truncate it silently: keep it unique instead
        name = f"{name[: MAX_TABLE - 9]}_{hashlib.sha256(target.encode()).hexdigest()[:8]}"
    return check_table(name, "target table")


@dataclass(frozen=True)
class LongTerm(IndexView):
    """The long-term view's options. The service addresses stay out of repr: a DSN may hold a password."""

    kind: ClassVar[str] = "long-term"

    store: str = "memory"
    table: str = DEFAULT_TABLE
    dsn: str | None = field(default=None, repr=False)
    redis_url: str | None = field(default=None, repr=False)
    # `search: hybrid | vector | keyword`: the vector view that ranks the namespace's messages for this
    # view, fed by the same events (`MemoryConfig.parts` lists it beside the rows).
    index: Vector | None = None

    @property
    def name(self) -> str:
        # Another table is another materialisation: its own consumer group and checkpoints. Only a
        # store kind with tables has one (`helix_es.config` refuses `table:` for the others).
        if self.table != DEFAULT_TABLE:
            return f"{self.kind}-{self.table}"
        return self.kind


def recall_index(options: Mapping[str, Any], where: str) -> Vector | None:
    """The recall index `search:` asks for (None for `substring`, the seed's own search); `embed:` picks
    its model (default the hash embedder: keyword recall needs no model)."""
    search = options.get("search", "substring")
    if search not in SEARCH_MODES:
        raise ConfigError(f"{where}.search", f"must be one of {list(SEARCH_MODES)}, got {search!r}")
    if search == "substring":
        if "embed" in options:
            raise ConfigError(f"{where}.embed", f"embed is for search: {' | '.join(INDEXED)}, not substring")
        return None
    return Vector(top_k=10, embed=parse_embed(options.get("embed"), f"{where}.embed"), search=search)


def _build(options: Mapping[str, Any], where: str, store: Any) -> LongTerm:
    # As written in the YAML; `projection` prefers the addresses config.py resolved (environment included).
    # Which of them the store kind uses, and its `table:` where the kind has tables, config.py sets from
    # the registry (`check_table` there), and whether it can keep the recall index.
    return LongTerm(
        store=store if isinstance(store, str) else "memory",  # a bad store is reported by parse_memory
        dsn=options.get("dsn") or options.get("postgres_dsn"),
        redis_url=options.get("redis_url"),
        index=recall_index(options, where),
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


# --- the rules every long-term store applies ---

VIEW_NAME = "long-term"

OrderKey = tuple[int, str, int, int]  # (event time in µs, topic, partition, offset)


@dataclass(frozen=True, slots=True)
class Op:
    """One record as the long-term view sees it: a message to keep, a clear, or nothing to do."""

    record: Record
    message: Message | None  # MessageAdded
    clear: bool  # MemoryCleared
    retract: bool = False  # MessageRetracted (not a retry): the session's newest row before it goes
    forget: MemoryForgotten | None = None  # one naming this view (not a retry) that forgets messages

    @property
    def offset(self) -> int:
        return self.record.position.offset

    @property
    def namespace(self) -> str:
        return self.record.event.namespace

    @property
    def session_id(self) -> str:
        return self.record.event.session_id

    @property
    def at(self) -> datetime:
        return self.record.event.timestamp

    @property
    def order(self) -> OrderKey:
        p = self.record.position
        return (micros(self.at), p.topic, p.partition, p.offset)

    @property
    def erased(self) -> bool:
        """SessionErased: the session's rows written before it leave the view."""
        return isinstance(self.record.event.payload, SessionErased)

    def erases(self, session_id: str, topic: str, partition: int, offset: int) -> bool:
        """Whether this erasure removes the row of `session_id` at (topic, partition, offset)."""
        p = self.record.position
        return session_id == self.session_id and not (
            (topic, partition) == (p.topic, p.partition) and offset > p.offset
        )

    def forgotten(self, held: Iterable[tuple[str, int, int]]) -> list[tuple[str, int, int]]:
        """Which of `held` (places of this session's rows: topic, partition, offset) this forgetting removes."""
        forget, p = self.forget, self.record.position
        if forget is None:
            return []
        if forget.session:
            return [k for k in held if self.erases(self.session_id, *k)]
        named = {(p.topic, p.partition, o) for o in forget.offsets if o < p.offset}  # only what it follows
        return [k for k in held if k in named]


_new = object.__new__
_OP_SET = tuple(getattr(Op, f).__set__ for f in ("record", "message", "clear", "retract", "forget"))


def ops(records: Sequence[Record], view: str) -> tuple[str, int, list[Op]]:
    """The batch's topic-partition and its records as ops for the view named `view` (what forgettings
    name); refuses a batch that mixes partitions."""
    topic, partition = records[0].position.topic, records[0].position.partition
    s_record, s_message, s_clear, s_retract, s_forget = _OP_SET  # `Op(...)` without a frozen __init__
    out = []
    for r in records:
        p = r.position
        if p.partition != partition or p.topic != topic:
            raise ValueError(f"a batch holds one topic-partition: {topic}[{partition}], then {p}")
        op = _new(Op)
        s_record(op, r)
        payload = r.event.payload
        kind = type(payload)
        if r.duplicate_of is not None:  # a retried write: applied as nothing
            s_message(op, None)
            s_clear(op, False)
            s_retract(op, False)
            s_forget(op, None)
        else:
            s_message(op, payload.message if isinstance(payload, MessageAdded) else None)
            s_clear(op, kind is MemoryCleared)
            s_retract(op, kind is MessageRetracted)
            if isinstance(payload, MemoryForgotten) and (payload.session or payload.offsets) and payload.names(view):
                s_forget(op, payload)
            else:
                s_forget(op, None)
        out.append(op)
    return topic, partition, out


def retracted_row(op: Op, rows: Sequence[tuple[OrderKey, str]]) -> OrderKey | None:
    """Which of `rows` ((order key, session id)) the retraction `op` deletes: its session's newest on its
    partition before it."""
    p = op.record.position
    mine = [k for k, sid in rows if sid == op.session_id and (k[1], k[2]) == (p.topic, p.partition) and k[3] < p.offset]
    return max(mine, key=lambda k: k[3]) if mine else None


def matches(needle: str, content: str) -> bool:
    """The memory and Redis stores' search test; `needle` is already casefolded."""
    return needle in content.casefold()


def escape_like(query: str) -> str:
    r"""An ILIKE pattern matching `query` literally anywhere: `\`, `%` and `_` escaped with `\`."""
    escaped = query.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"
