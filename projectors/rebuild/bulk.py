"""A rebuild's target is a bulk load: search indexes built once over its rows at the end, not kept up row by row.

A store that can do so (PostgreSQL rows: their trigram indexes) has `start_load`, `defer_indexes`
and `build_indexes` (`helix_es.stores.ports.BulkLoad`), which a row view passes on to it. The
rebuild starts the load before anything folds into the target (an index an earlier target of the
same name left on its empty table goes); every other process folding into it defers; the rebuild
builds them after its last pass, before it reports the target built (so before readers can be
switched to it).
"""

from __future__ import annotations

from helix_es.projection.protocol import Projection


def defer_indexes(projection: Projection) -> None:
    """Before `projection`'s first use: leave its store's search indexes for `build_indexes`."""
    defer = getattr(projection, "defer_indexes", None)  # through IdempotentProjection to the store
    if defer is not None:
        defer()


async def start_load(projection: Projection) -> None:
    """The rebuild's own process, before any process folds into the target: a bulk load begins."""
    start = getattr(projection, "start_load", None)
    if start is not None:
        await start()
    else:
        defer_indexes(projection)


async def build_indexes(projection: Projection) -> None:
    """The search indexes `defer_indexes` left, over every row now in the target."""
    build = getattr(projection, "build_indexes", None)
    if build is not None:
        await build()
