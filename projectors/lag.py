"""`helix-es lag`: how far each view is behind the log, per partition, and the dead letters parked.

A view's lag on a partition is the log's end offset minus the next offset the view would
apply (its checkpoint + 1). It is read from the views' own checkpoints, not from Kafka's
consumer offsets, which are only advisory here.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

from helix_es.model import names


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

    def total(self, view: str | None = None) -> int:
        return sum(p.lag for p in self.partitions if view is None or p.view == view)


async def _ends(bootstrap: str, pattern: str) -> dict[TopicPartition, int]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        wanted = re.compile(pattern)
        topics = sorted(t for t in await admin.list_topics() if wanted.match(t))
        described = await admin.describe_topics(topics) if topics else []
    finally:
        await admin.close()
    tps = [TopicPartition(d["topic"], p["partition"]) for d in described if d["error_code"] == 0
           for p in d["partitions"]]
    if not tps:
        return {}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        return dict(await consumer.end_offsets(tps))
    finally:
        await consumer.stop()


async def lag(source: str) -> LagReport:
    """The lag of every view a config's projectors serve (all agents, all parts)."""
    from helix_es.cli import served_projections
    from helix_es.projection.aliases import current_target, target_projection
    from helix_es.projection.factory import open_store
    from helix_es.views import View

    log_config, parts = served_projections(source)
    bootstrap, prefix = log_config.bootstrap_servers, log_config.topic_prefix
    ends = await _ends(bootstrap, names.topic_pattern(prefix))
    rows = []
    for part in parts:
        store = open_store(part) if isinstance(part.view, View) else None
        # The target readers use now (a rebuild may have switched it), not the view's first name.
        projection = target_projection(part, await current_target(part, prefix), store)
        try:
            for tp, end in sorted(ends.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
                applied = await projection.checkpoint(tp.topic, tp.partition)
                rows.append(PartitionLag(projection.name, projection.kind, tp.topic, tp.partition, end, applied,
                                         max(0, end - (applied + 1 if applied is not None else 0))))
        finally:
            await projection.close()
            if store is not None:
                await store.close()
    dlq_prefix = "helix.dlq." if prefix == names.DEFAULT_TOPIC_PREFIX else prefix + "-dlq."
    dead: dict[str, int] = {}
    for tp, end in (await _ends(bootstrap, names.dlq_pattern(prefix))).items():
        ns = tp.topic[len(dlq_prefix) :]
        dead[ns] = dead.get(ns, 0) + end
    return LagReport(rows, dict(sorted(dead.items())))


def _print(report: LagReport) -> None:
    if not report.partitions:
        print("no namespace topics yet: nothing to project")
    width = max([len(f"{p.view} ({p.store})") for p in report.partitions] + [4])
    print(f"{'view':<{width}}  {'topic[partition]':<48} {'end':>9} {'applied':>9} {'lag':>9}")
    for p in report.partitions:
        applied = "-" if p.applied is None else str(p.applied)
        where = f"{p.topic}[{p.partition}]"
        print(f"{p.view + ' (' + p.store + ')':<{width}}  {where:<48} {p.end:>9} {applied:>9} {p.lag:>9}")
    for view in sorted({p.view for p in report.partitions}):
        print(f"total lag of {view}: {report.total(view)}")
    for ns, count in report.dead_letters.items():
        print(f"dead letters in {ns}: {count} (see helix.dlq topics; headers name the source and error)")


async def _run(args: argparse.Namespace) -> int:
    report = await lag(args.config)
    if args.json:
        print(json.dumps({"partitions": [asdict(p) for p in report.partitions], "dead_letters": report.dead_letters,
                          "total": report.total()}))
    else:
        _print(report)
    return 1 if args.max is not None and report.total() > args.max else 0


def add_command(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("lag", help="how far each view is behind the log, and the dead letters parked")
    p.add_argument("--config", required=True, help="YAML file (log: kafka, memory or agents: ...)")
    p.add_argument("--json", action="store_true", help="one JSON document")
    p.add_argument("--max", type=int, help="exit 1 if the total lag is above this (for health checks)")
    p.set_defaults(run=_run)

