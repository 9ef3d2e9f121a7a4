"""How Redis rows are encoded (`helix_es.stores.redis.rows` keeps the layout): a row's order
encoding (bytes that sort as `Table.order_of` does), its lookup tokens, and its stored value, the
latter two compiled per table into straight-line functions; `LazyRow` decodes a stored value only
for the columns a reader asks.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from helix_es.views.rows import NAMESPACE, ColumnType, Row, Table, micros_of

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
SHIFT = 2**63
MEMO = 4096  # texts of an order column a codec remembers the encoding of
_loads = json.JSONDecoder().decode  # json.loads of a str, less its checks of the argument
_encode_str = json.encoder.encode_basestring  # json.dumps(ensure_ascii=False)'s string encoder (C)


def _text_order(value: str) -> bytes:
    return value.encode().replace(b"\x01", b"\x01\x02").replace(b"\x00", b"\x01\x01") + b"\x00"


def _remember(memo: dict[str, bytes], value: str) -> bytes:
    """A text's order encoding, kept in `memo` (of at most `MEMO` texts: emptied when full)."""
    if len(memo) >= MEMO:
        memo.clear()
    encoded = memo[value] = _text_order(value)
    return encoded


_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_canonical = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True).encode


def tokens(kind: ColumnType, *, canonical: bool = False) -> Callable[[Any], str]:
    """A value as the row's JSON holds it (a lookup's json canonical, keys sorted, so equal values match)."""
    if kind == "text":
        return _encode_str
    if kind == "int":
        return int.__repr__  # digits, for an int subclass too (`str` of an IntEnum is its name)
    if kind == "time":
        return lambda v: str(micros_of(v))
    return _canonical if canonical else _json


def lookup(token: str) -> str:
    """A lookup set's `<value>`: the JSON token, a string's without its quotes (as the scripts strip them)."""
    return token[1:-1] if token.startswith('"') else token


def fits(kind: ColumnType, value: Any) -> bool:
    """Whether a `where` value can equal a column's (a lookup set is named by it)."""
    if kind == "text":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "time":
        return isinstance(value, datetime) and value.tzinfo is not None
    return True


_GAP = b"\x01"  # between a stored row's JSON and each json column's text: no JSON text holds it
ROWS_GAP = b"\x00"  # between the rows of a scan's page: neither does any stored row


def _document(column: str, document: str | None) -> str:
    """A json column's share of a stored value: 0x01, then its text."""
    if document is None:
        return "\x01"
    if document and "\x00" not in document and "\x01" not in document:
        return "\x01" + document
    # no JSON document is empty or holds a bare control character
    raise ValueError(f"column {column!r} is not a JSON document: {document[:80]!r}")


def _compile(
    table: Table, documents: tuple[str, ...]
) -> tuple[Callable[[Row], bytes], Callable[[Row], tuple[bytes, str, list[str]]]]:
    """A table's `member(row)` (its order encoding) and `put(row)` (its order encoding, stored value
    and lookup values) as straight-line functions: every put of a rebuild passes here. Column names
    are identifiers (`Table` checks them), safe in the source as names and in string literals."""

    def micros(columns: Sequence[str]) -> list[str]:  # each time's µs once, for the order and the value alike
        lines = []
        for c in columns:
            if table.type(c) == "time":
                lines += [
                    f"    t_{c} = row[{c!r}] - EPOCH",
                    f"    t_{c} = (t_{c}.days * 86400 + t_{c}.seconds) * 1000000 + t_{c}.microseconds",
                ]
        return lines

    # the order encoding: runs of 8-byte columns packed at once, a text column's bytes remembered
    # (an order's text is often one of few values: a topic), the rest as `Table.order_of` orders
    parts: list[str] = []
    packs: dict[int, Any] = {}
    eights: list[str] = []
    memos: list[str] = []

    def pack() -> None:
        if eights:
            packs.setdefault(len(eights), struct.Struct(">" + "Q" * len(eights)).pack)
            parts.append(f"pack_{len(eights)}({', '.join(eights)})")
            eights.clear()

    for c in table.order[1:]:
        kind = table.type(c)
        if kind == "text":
            pack()
            memos += [
                f"    o_{c} = memo_{c}.get(row[{c!r}])",
                f"    if o_{c} is None:",
                f"        o_{c} = remember(memo_{c}, row[{c!r}])",
            ]
            parts.append(f"o_{c}")
        elif kind == "int":
            eights.append(f"row[{c!r}] + SHIFT")
        elif kind == "time":
            eights.append(f"t_{c} + SHIFT")
        else:
            raise ValueError("a json column cannot be ordered")
    pack()
    member = " + ".join(parts) or "b''"
    fields = [
        *table.lookups,
        *(c for c, kind in table.columns if c != NAMESPACE and c not in table.lookups and kind != "json"),
    ]
    tokens = {}
    for c in fields:
        kind = table.type(c)
        tokens[c] = {"text": f"encode_str(row[{c!r}])", "int": f"int_repr(row[{c!r}])", "time": f"str(t_{c})"}.get(
            kind, f"canonical(row[{c!r}])"
        )
    body = [f"    v_{c} = {tokens[c]}" for c in fields]
    body += [f"    d_{c} = document({c!r}, row[{c!r}])" for c in documents]
    pieces = ",".join(f'"{c}":{{v_{c}}}' for c in fields)
    value = "f'{{" + pieces + "}}" + "".join(f"{{d_{c}}}" for c in documents) + "'"
    found = ", ".join(f"v_{c}[1:-1]" if table.type(c) == "text" else f"lookup(v_{c})" for c in table.lookups)
    source = "\n".join(
        [
            "def member(row):",
            *micros(table.order[1:]),
            *memos,
            f"    return {member}",
            "def put(row):",
            *micros([c for c, _ in table.columns]),
            *memos,
            *body,
            f"    return {member}, {value}, [{found}]",
        ]
    )
    scope: dict[str, Any] = {
        "EPOCH": _EPOCH,
        "SHIFT": SHIFT,
        "text_order": _text_order,
        "encode_str": _encode_str,
        "int_repr": int.__repr__,
        "canonical": _canonical,
        "document": _document,
        "lookup": lookup,
        "remember": _remember,
        **{f"pack_{n}": p for n, p in packs.items()},
        **{f"memo_{c}": {} for c in table.order[1:] if table.type(c) == "text"},
    }
    exec(compile(source, f"<rows codec of {table.name}>", "exec"), scope)  # our own source, of checked names
    return scope["member"], scope["put"]


class RowCodec:
    """One table's encodings: a row's order encoding, its stored value (JSON of its other columns,
    lookups first, then each json column's text as it is) and lookup values, and back."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.lookups = table.lookups
        self.documents = tuple(c for c, kind in table.columns if kind == "json")
        self._times = [c for c, kind in table.columns if kind == "time"]
        self.fits = table.fits
        self.member, self.put = _compile(table, self.documents)

    def document(self, value: bytes, column: str) -> str | None:
        """One json column of a stored value, its text as it was put, nothing else decoded."""
        if len(self.documents) == 1:
            text = value[value.index(_GAP) + 1 :]
        else:
            text = value.split(_GAP)[1 + self.documents.index(column)]
        return text.decode() if text else None

    def row(self, namespace: str, value: bytes) -> dict[str, Any]:
        head, *documents = value.split(_GAP)
        stored: dict[str, Any] = _loads(head.decode())
        stored[NAMESPACE] = namespace
        for c in self._times:
            stored[c] = _EPOCH + timedelta(microseconds=stored[c])
        for c, document in zip(self.documents, documents, strict=True):
            stored[c] = document.decode() if document else None
        return stored


class LazyRow(Mapping[str, Any]):
    """A row as read: a json column is cut from the stored value when asked for, the rest is decoded
    (once) only when another column is: a reader of documents pays for no other column."""

    __slots__ = ("_codec", "_namespace", "_row", "_value")

    def __init__(self, codec: RowCodec, namespace: str, value: bytes) -> None:
        self._codec, self._namespace, self._value = codec, namespace, value
        self._row: dict[str, Any] | None = None

    def _decoded(self) -> dict[str, Any]:
        if self._row is None:
            self._row = self._codec.row(self._namespace, self._value)
        return self._row

    def __getitem__(self, column: str) -> Any:
        if self._row is None and column in self._codec.documents:
            return self._codec.document(self._value, column)
        return self._decoded()[column]

    def __iter__(self) -> Iterator[str]:
        return iter(self._decoded())

    def __len__(self) -> int:
        return len(self._decoded())

    def __eq__(self, other: object) -> bool:
        return self._decoded() == other

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._decoded())
