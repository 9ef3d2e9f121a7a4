"""Redis layouts this version no longer reads: it refuses their data, telling what to run, and drops it.

Up to 0.6 the Redis long-term view had an adapter of its own, with keys
`helix:memory:<ns>:<view>:index` (its rows' order), `...:m:<order>` (one per message), `...:cleared`
(the clear watermark) and a few more under the same prefix; on a Redis Cluster
`helix:memory:{<ns>}:<view>:...`. The view is now kept as rows (`helix_es.stores.redis.rows`),
under `helix:rows:{<ns>}:<view>:...`, and its checkpoints keep their name
(`helix:checkpoint:<view>`): rows folded on top of the old checkpoints would miss every message the
old keys hold. So a namespace of a view that still has the old index or watermark is refused with
`RetiredLayout` (`helix_es.stores.ports`), by reads and writes alike, until the view is rebuilt into
a new target (`helix-es rebuild`); `drop` deletes the old keys with the rows (`--drop-old` after
the switch).
"""

from __future__ import annotations

from helix_es.model import names


def long_term(namespace: str, view: str, cluster: bool) -> tuple[str, list[str]]:
    """The key prefix of `namespace`'s data in the old long-term layout of `view`, and the keys whose
    presence tells it holds some: its index (rows) or its clear watermark (a namespace cleared whole
    still floors what its other partitions add)."""
    ns = names.check_namespace(namespace)
    head = f"helix:memory:{{{ns}}}:{view}:" if cluster else f"helix:memory:{ns}:{view}:"
    return head, [head + "index", head + "cleared"]
