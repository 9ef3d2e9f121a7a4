"""In-process stores: session views, long-term, vector, aliases, LangGraph store items; tests and embedded mode."""

from __future__ import annotations

from helix_es.stores.kind import StoreKind
from helix_es.stores.memory.aliases import MemoryAliases
from helix_es.stores.memory.checkpoints import MemoryCheckpoints
from helix_es.stores.memory.idempotency import MemoryIdempotency
from helix_es.stores.memory.items import MemoryItems
from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.memory.vector import MemoryVectorStore
from helix_es.stores.memory.views import MemoryStore

KIND = StoreKind(
    "memory",
    address=None,
    in_process=True,
    views=lambda _: MemoryStore(),
    rows=lambda _, name, tables, *, family="rows": MemoryRows(name, tables),
    aliases=lambda _: MemoryAliases(),
    vectors=lambda _: MemoryVectorStore(),
    idempotency=lambda _: MemoryIdempotency(),
    items=lambda _, view: MemoryItems(view),
    checkpoints=lambda _, name: MemoryCheckpoints(name),
)
