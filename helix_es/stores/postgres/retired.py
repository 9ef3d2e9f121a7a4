"""PostgreSQL layouts this version no longer reads: it refuses their data, telling what to run, and drops it.

Up to 0.6 the PostgreSQL long-term view had an adapter of its own: the configured table (default
`agent_memory`) with columns `namespace, topic, partition (integer), "offset", session_id,
created_at, role, content, message` and a `UNIQUE` constraint for its order, and each namespace's
clear watermark in `helix_long_term_cleared (view, namespace, cleared_at)`, a row for every
namespace it ever wrote. The view is now kept as rows (`helix_es.stores.postgres.rows`): a table of
the same name in another layout, the watermark in `helix_row_marks`, and checkpoints that keep
their name (`helix_checkpoints` rows of the view): rows folded on top of the old checkpoints would
miss every message the old table holds. So a view whose table is still in the old layout is
refused whole (the table is every namespace's), and a namespace with a row in
`helix_long_term_cleared` on its own, with `RetiredLayout` (`helix_es.stores.ports`), until the
view is rebuilt into a new target (`helix-es rebuild`); `drop` deletes the old rows with the new
(`--drop-old` after the switch), and an old table left empty goes, so its name can be used again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class RetiredTables:
    """A layout a view's tables once had: the columns that tell a table is in it, and the table of
    (view, namespace) rows that tell a namespace still holds data in it."""

    columns: Mapping[str, str]  # name -> format_type(): a table with exactly these is in the layout
    marks: str
    what: str  # the layout, as an error names it

    def layout(self, table: str | None = None) -> str:
        where = f"table {table!r}" if table is not None else self.marks
        return f"{self.what} ({where})"


LONG_TERM = RetiredTables(
    columns={
        "namespace": "text",
        "topic": "text",
        "partition": "integer",
        "offset": "bigint",
        "session_id": "text",
        "created_at": "timestamp with time zone",
        "role": "text",
        "content": "text",
        "message": "jsonb",
    },
    marks="helix_long_term_cleared",
    what="the PostgreSQL long-term layout of helix-es 0.6 and before",
)
