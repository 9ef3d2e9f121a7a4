"""How far each view is behind the log, per partition, and the dead letters parked.

A view's lag on a partition is the log's end offset minus the next offset the view would
apply (its checkpoint + 1). It is read from the views' own checkpoints, not from Kafka's
consumer offsets (projectors commit none). `helix-es lag` prints it (helix_es.cli.lag).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from helix_es.log.kafka import ends_of
from helix_es.log.port import Partition
from helix_es.model import names
from helix_es.projection.aliases import current_target, target_projection
from helix_es.projection.factory import open_store
from helix_es.projection.facts import facts_rows_of
from helix_es.views.base import View
from projectors.service import served_projections


@dataclass(frozen=True)
class PartitionLag:
    view: str
    store: str
    topic: str
    partition: int
    end: int  # the log's next offset
    applied: int | None  # the view's checkpoint
    lag: int


@dataclass(frozen=True)
class LagReport:
    partitions: list[PartitionLag]
    dead_letters: dict[str, int]  # namespace -> records parked (one copy per view that parked it)
    pending: dict[str, dict[str, int]] = field(default_factory=dict)  # facts view -> namespace -> turns to extract

    def total(self, view: str | None = None) -> int:
        return sum(p.lag for p in self.partitions if view is None or p.view == view)


async def _ends(bootstrap: str, pattern: str) -> dict[Partition, int]:
    return await ends_of(bootstrap, pattern, committed_only=False)  # the high watermarks, as always


async def lag(source: str) -> LagReport:
    """The lag of every view a config's projectors serve (all agents, all parts), over its namespaces' topics."""
    log_config, parts = served_projections(source)
    bootstrap, prefix = log_config.bootstrap_servers, log_config.topic_prefix
    ends = await _ends(bootstrap, names.topic_pattern(prefix))
    rows = []
    pending: dict[str, dict[str, int]] = {}
    for part in parts:
        store = open_store(part) if isinstance(part.view, View) else None
        # The target readers use now (a rebuild may have switched it), not the view's first name.
        projection = target_projection(part, await current_target(part, prefix), store)
        mine = re.compile(names.topic_pattern(prefix, part.served))  # a view lags only on its own namespaces
        try:
            for tp, end in sorted(ends.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
                if not mine.match(tp.topic):
                    continue
                applied = await projection.checkpoint(tp.topic, tp.partition)
                facts = facts_rows_of(projection)
                ns = names.namespace_of(tp.topic, prefix)
                if facts is not None and ns not in pending.get(projection.name, {}):
                    # turns no extraction covered yet: a slow or absent model shows here, never on add
                    pending.setdefault(projection.name, {})[ns] = len(await facts.pending(ns) or [])
                rows.append(
                    PartitionLag(
                        projection.name,
                        projection.kind,
                        tp.topic,
                        tp.partition,
                        end,
                        applied,
                        max(0, end - (applied + 1 if applied is not None else 0)),
                    )
                )
        finally:
            await projection.close()
            if store is not None:
                await store.close()
    dlq_prefix = "helix.dlq." if prefix == names.DEFAULT_TOPIC_PREFIX else prefix + "-dlq."
    served = names.namespace_matcher(ns for part in parts for ns in part.served)
    dead: dict[str, int] = {}
    for tp, end in (await _ends(bootstrap, names.dlq_pattern(prefix))).items():
        ns = tp.topic[len(dlq_prefix) :]
        if served.match(ns):  # parked by this config's views, not another deployment's
            dead[ns] = dead.get(ns, 0) + end
    return LagReport(rows, dict(sorted(dead.items())), pending)
