"""Row stores (memory, PostgreSQL, Redis, Redis Cluster): the suite is
`tests.contracts.row_store.RowStoreContract`; each class here runs it on one adapter."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from helix_es.stores.memory.rows import MemoryRows
from helix_es.stores.ports import RowStore
from helix_es.views.rows import Table
from tests.contracts.row_store import OpenRows, RowStoreContract


class TestMemoryRows(RowStoreContract):
    @pytest.fixture
    def opened(self) -> OpenRows:
        made: dict[str, MemoryRows] = {}  # the one place a memory store has: itself

        def new(name: str, tables: Sequence[Table]) -> RowStore:
            return made.setdefault(name, MemoryRows(name, tables))

        return new
