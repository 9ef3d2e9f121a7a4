"""Files: `store: file` keeps its views in the process (over the embedded log on disk, exported as
JSON by the client) and its data keys in one file per session."""

from __future__ import annotations

from helix_es.stores.file.keys import DEFAULT_DIRECTORY, FileKeyStore
from helix_es.stores.kind import StoreKind
from helix_es.stores.memory.aliases import MemoryAliases
from helix_es.stores.memory.idempotency import MemoryIdempotency
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.memory.views import MemoryStore

KIND = StoreKind(
    "file",
    address=None,
    in_process=True,
    views=lambda _: MemoryStore(),
    rows=lambda _, name, tables, *, family="rows": MemoryRows(name, tables),
    aliases=lambda _: MemoryAliases(),
    keys=lambda directory: FileKeyStore(directory or DEFAULT_DIRECTORY),
    idempotency=lambda _: MemoryIdempotency(),
    exported=True,
    views_from="memory",
)
