"""Rows: what a namespace-wide view keeps, in words every store understands.

A view declares its tables (`Table`) and folds events into row changes (`Put`, `Delete`, `Cut`);
a row store (`helix_es.stores.ports.RowStore`) keeps the tables and applies one partition's
changes with its checkpoint in one atomic step. The store knows columns, keys and indexes, never
what an event means, so a new view kind is a fold and a table declaration: no store code.

Every row belongs to one namespace (a tenant: one Redis hash slot on a cluster), and every change
and read stays inside one. A fold may read (`Scan`) only rows its own partition writes (a
session's events share one partition); what other partitions change reaches it through conditions
the store checks inside the atomic step: a `Put` with a `floor` is skipped at or below the mark a
`Cut` raised, whichever partition raised it.

Values are Python's: `text` str, `int` int (64-bit), `time` a timezone-aware datetime kept to the
microsecond, `json` a JSON document as text (or None). Stores keep that text as it is, or, like
PostgreSQL's jsonb, with their own spacing and key order, never another value: a fold encodes once
and a reader decodes once, and no store pays for a document it only passes on.

Rows are identified by their order (`Table.order`, which ends with the key), so a row's order
columns never change: a fold that moves a row deletes it and puts it again.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

ColumnType = Literal["text", "int", "time", "json"]
Row = Mapping[str, Any]
NAMESPACE = "namespace"  # every table's first column: the tenant a row belongs to

_NAME = re.compile(r"[a-z][a-z0-9_]{0,62}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Table:
    """A view's table: its columns in order, primary key, read order, equality lookups, searchable text.

    `key` and `order` start with `namespace`; `order` ends with the key (a row's identity in the
    stores that index by order). `floor` is the `time` or `int` column a `Cut` compares to its mark,
    and then `order[1]`, so a cut is a range of the order index. `lookups` are columns a `Scan` may
    ask equality of; `text` the column a `Scan` may ask a case-insensitive substring of.
    """

    name: str
    columns: tuple[tuple[str, ColumnType], ...]
    key: tuple[str, ...]
    order: tuple[str, ...]
    lookups: tuple[str, ...] = ()
    text: str | None = None
    floor: str | None = None
    _types: dict[str, ColumnType] = field(init=False, repr=False, compare=False)
    _orders: tuple[tuple[str, bool, bool], ...] = field(init=False, repr=False, compare=False)  # (column, time?, text?)
    fits: Callable[[Row], bool] = field(init=False, repr=False, compare=False)
    """Whether `check` accepts a row, as one straight-line test: every put of a rebuild passes here."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_types", dict(self.columns))
        names = [c for c, _ in self.columns]
        for n in (self.name, *names):
            if not _NAME.fullmatch(n):
                raise ValueError(f"table {self.name!r}: {n!r} is not a lower-case identifier")
        if len(set(names)) != len(names) or names[:1] != [NAMESPACE]:
            raise ValueError(f"table {self.name!r}: columns must be unique and start with {NAMESPACE!r}")
        for part, cols in (("key", self.key), ("order", self.order), ("lookups", self.lookups)):
            if unknown := [c for c in cols if c not in names]:
                raise ValueError(f"table {self.name!r}: {part} names unknown columns {unknown}")
        if self.key[:1] != (NAMESPACE,) or self.order[:1] != (NAMESPACE,):
            raise ValueError(f"table {self.name!r}: key and order start with {NAMESPACE!r}")
        if self.order[len(self.order) - len(self.key) + 1 :] != self.key[1:]:
            raise ValueError(f"table {self.name!r}: order must end with the key's columns")
        floor = self.floor
        if floor is not None and (self.order[1:2] != (floor,) or self.type(floor) not in ("int", "time")):
            raise ValueError(f"table {self.name!r}: floor must be order's second column, of type int or time")
        if self.text is not None and self.type(self.text) != "text":
            raise ValueError(f"table {self.name!r}: text must name a text column")
        orders = tuple((c, self._types[c] == "time", self._types[c] == "text") for c in self.order[1:])
        object.__setattr__(self, "_orders", orders)
        object.__setattr__(self, "fits", _compile_fits(self))

    def type(self, column: str) -> ColumnType:
        return self._types[column]

    def check(self, row: Row) -> None:
        """Refuse a row that misses a column or holds a value of the wrong type (a fold's bug, caught early)."""
        for name, kind in self.columns:
            value = row.get(name, _MISSING)
            if value is _MISSING:
                raise ValueError(f"table {self.name!r}: row has no {name!r}")
            if not _fits(kind, value):
                raise ValueError(f"table {self.name!r}: {name!r} must be {kind}, got {value!r}")

    def order_of(self, row: Row) -> tuple[Any, ...]:
        """The row's place in the table, namespace left out (rows of one namespace are compared)."""
        return tuple(
            micros_of(row[c]) if time else row[c].encode() if text else row[c] for c, time, text in self._orders
        )

    def key_of(self, row: Row) -> tuple[Any, ...]:
        return tuple(row[c] for c in self.key[1:])


_MISSING = object()
_TEST = {
    "text": "type(row[{c!r}]) is str",
    "int": "type(row[{c!r}]) is int and -(2**63) <= row[{c!r}] < 2**63",
    "time": "isinstance(row[{c!r}], datetime) and row[{c!r}].tzinfo is not None",
    "json": "(row[{c!r}] is None or type(row[{c!r}]) is str)",
}


def _compile_fits(table: Table) -> Callable[[Row], bool]:
    """`Table.fits`: column names are identifiers (`Table` checks them), safe in the source."""
    test = " and ".join(_TEST[kind].format(c=c) for c, kind in table.columns)
    source = f"def fits(row):\n    try:\n        return {test}\n    except KeyError:\n        return False\n"
    scope: dict[str, Any] = {"datetime": datetime}
    exec(compile(source, f"<row test of {table.name}>", "exec"), scope)  # our own source, of checked names
    fits: Callable[[Row], bool] = scope["fits"]
    return fits


def _fits(kind: ColumnType, value: Any) -> bool:
    if kind == "text":
        return type(value) is str
    if kind == "int":
        return type(value) is int and -(2**63) <= value < 2**63
    if kind == "time":
        return isinstance(value, datetime) and value.tzinfo is not None
    return value is None or type(value) is str  # json: the document's text


def micros_of(value: datetime) -> int:
    """A timezone-aware time as µs since the epoch: how every store orders and compares times."""
    delta = value - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def sortable(kind: ColumnType, value: Any) -> Any:
    """A value as the stores order it: times by µs, text by its UTF-8 bytes (PostgreSQL's "C" collation)."""
    if kind == "time":
        return micros_of(value)
    if kind == "text":
        return value.encode()
    return value


# --- changes: what a fold asks a store to do, in order, for one partition's batch ---


@dataclass(frozen=True, slots=True)
class Put:
    """Insert `row` unless a row of the same key is there (`replace`: overwrite it), and, with
    `floor`, only while its floor column is above that mark of its namespace."""

    table: str
    row: Row
    floor: str | None = None
    replace: bool = False


@dataclass(frozen=True, slots=True)
class Delete:
    """Delete the row of `row`'s key, if any; `row` is the row as read (its order and lookup columns)."""

    table: str
    row: Row


@dataclass(frozen=True, slots=True)
class Cut:
    """Raise the namespace's mark `mark` to `upto` (never lower it) and delete every row of `table`
    whose floor column is at or below the mark: a clear, whatever partition it came from."""

    table: str
    namespace: str
    mark: str
    upto: int  # the floor column's sortable value (µs for a time)


RowChange = Put | Delete | Cut

_new = object.__new__
_PUT_SET = tuple(getattr(Put, f).__set__ for f in ("table", "row", "floor", "replace"))


def put(table: str, row: Row, floor: str | None = None, replace: bool = False) -> Put:
    """`Put(table, row, floor, replace)`, faster: a rebuild makes one a row, and a frozen dataclass's
    `__init__` sets each field through `object.__setattr__`."""
    change = _new(Put)
    s_table, s_row, s_floor, s_replace = _PUT_SET
    s_table(change, table)
    s_row(change, row)
    s_floor(change, floor)
    s_replace(change, replace)
    return change


def namespace_of(change: RowChange) -> str:
    return change.namespace if isinstance(change, Cut) else str(change.row[NAMESPACE])


# --- reads ---


@dataclass(frozen=True, slots=True)
class Scan:
    """Rows of one namespace's table in order (`newest_first`: reversed), those whose `where`
    columns equal the values given and whose text column holds `contains` (case-insensitive), at
    most `limit`. `columns`: the columns the reader uses (None: all); a store may answer more."""

    table: str
    namespace: str
    where: Mapping[str, Any] = field(default_factory=dict)
    contains: str | None = None
    limit: int | None = None
    newest_first: bool = False
    columns: tuple[str, ...] | None = None

    def test(self, table: Table) -> Callable[[Row], bool]:
        """The filter, as the stores that filter rows themselves apply it."""
        where = tuple(self.where.items())
        needle = None if self.contains is None or table.text is None else self.contains.casefold()
        text = table.text or ""

        def passes(row: Row) -> bool:
            for column, value in where:
                if row.get(column) != value:
                    return False
            return needle is None or needle in row[text].casefold()

        return passes


def check_scan(tables: Mapping[str, Table], scan: Scan) -> Table:
    """The scanned table, or `ValueError` for a scan the table's indexes cannot serve."""
    table = tables.get(scan.table)
    if table is None:
        raise ValueError(f"no table {scan.table!r}")
    if unknown := [c for c in scan.where if c not in table.lookups]:
        raise ValueError(f"table {table.name!r}: {unknown} are not lookup columns")
    if scan.contains is not None and table.text is None:
        raise ValueError(f"table {table.name!r} has no text column to search")
    if scan.columns is not None and (unknown := [c for c in scan.columns if c not in dict(table.columns)]):
        raise ValueError(f"table {table.name!r}: no columns {unknown}")
    if scan.limit is not None and scan.limit < 0:
        raise ValueError(f"limit must be >= 0, got {scan.limit}")
    return table


def check_changes(tables: Mapping[str, Table], changes: Sequence[RowChange]) -> None:
    """Refuse changes to unknown tables, rows of the wrong shape, cuts of a table with no floor."""
    for change in changes:
        table = tables.get(change.table)
        if table is None:
            raise ValueError(f"no table {change.table!r}")
        if isinstance(change, Cut):
            if table.floor is None:
                raise ValueError(f"table {table.name!r} has no floor column to cut")
        elif isinstance(change, Put):
            if not table.fits(change.row):
                table.check(change.row)  # says what is wrong
            if change.floor is not None and table.floor is None:
                raise ValueError(f"table {table.name!r} has no floor column for a floored put")
