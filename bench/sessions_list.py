"""The console's sessions listing (`GET /v1/{namespace}/sessions`) and a session's audit (asked
again at every cut the console moves to) on a big namespace: the first call reads the log; later
calls read only what came since (`helix_es.service.sessions`, `helix_es.service.histories`).

    python bench/sessions_list.py [--events 100000] [--sessions 1000] [--partitions 3] [--calls 20] [--json]

Needs HELIX_KAFKA_BOOTSTRAP (eval "$(scripts/services up)"). Figures, in one run: the first
listing; a later listing after one new add (p50 over `--calls`); one session's audit, asked
first, then again after one new add (p50), and the same without keeping what was read; and the
anchor, raw aiokafka reading the same topic from its beginning to its end without decoding
anything. The topic is deleted at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient

try:
    from bench import cli as bench_cli
except ModuleNotFoundError:  # run as `python bench/<script>.py`: bench/ itself is on the path
    import cli as bench_cli  # type: ignore[no-redef]
from helix_es import Event, Message, MessageAdded
from helix_es.config import load_config
from helix_es.history.audit import audit
from helix_es.log.kafka import KafkaLog
from helix_es.model import names
from helix_es.service.histories import SessionHistories
from helix_es.service.sessions import MAX_PAGE, SessionLists


async def raw_read(bootstrap: str, topic: str) -> int:
    """Every record of `topic` from its beginning to its end, not decoded: how many."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, isolation_level="read_committed")
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        if not tps:
            await consumer._client.force_metadata_update()
            tps = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic) or [])]
        ends = await consumer.end_offsets(tps)
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        seen = 0
        while [tp for tp in tps if await consumer.position(tp) < ends[tp]]:
            batch = await consumer.getmany(timeout_ms=1000, max_records=10_000)
            seen += sum(len(v) for v in batch.values())
        return seen
    finally:
        await consumer.stop()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    bootstrap = os.environ.get("HELIX_KAFKA_BOOTSTRAP")
    if not bootstrap:
        raise SystemExit('sessions_list: set HELIX_KAFKA_BOOTSTRAP (eval "$(bash scripts/services up)")')
    prefix, ns = f"bench-list-{uuid.uuid4().hex[:8]}", "listing"
    log_cfg = {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": args.partitions, "topic_prefix": prefix}
    # Only the log is read; the memory section is there because a config needs one.
    memory = {"type": "conversation", "namespace": ns, "store": "redis", "redis_url": "redis://127.0.0.1:6379/0"}
    config = load_config({"log": log_cfg, "memory": memory})
    topic = names.topic(ns, prefix)
    log = KafkaLog(bootstrap, topic_prefix=prefix, partitions=args.partitions)
    try:
        print(f"sessions_list: writing {args.events:,} events over {args.sessions:,} sessions", file=sys.stderr)
        chunk = 2000
        for start in range(0, args.events, chunk):
            n = min(chunk, args.events - start)
            events = [
                Event(ns, f"s{(start + i) % args.sessions}", MessageAdded(Message("user", f"turn {start + i}")))
                for i in range(n)
            ]
            await asyncio.gather(*(log.append(e) for e in events))
        started = time.perf_counter()
        raw = await raw_read(bootstrap, topic)
        raw_s = time.perf_counter() - started
        lists = SessionLists()
        started = time.perf_counter()
        first = await lists.sessions(config, ns, limit=MAX_PAGE)
        first_s = time.perf_counter() - started
        later: list[float] = []
        for i in range(args.calls):
            await log.append(Event(ns, f"s{i % args.sessions}", MessageAdded(Message("user", f"later {i}"))))
            started = time.perf_counter()
            listed = await lists.sessions(config, ns, limit=MAX_PAGE)
            later.append(time.perf_counter() - started)
        histories = SessionHistories()
        started = time.perf_counter()
        await audit(config, session_id="s1", namespace=ns, reader=histories.read)
        audit_first_s = time.perf_counter() - started
        audit_later: list[float] = []
        audit_plain: list[float] = []
        for i in range(args.calls):
            await log.append(Event(ns, "s1", MessageAdded(Message("user", f"audited {i}"))))
            started = time.perf_counter()
            kept = await audit(config, session_id="s1", namespace=ns, reader=histories.read)
            audit_later.append(time.perf_counter() - started)
            started = time.perf_counter()
            plain = await audit(config, session_id="s1", namespace=ns)
            audit_plain.append(time.perf_counter() - started)
            assert kept.to_json() == plain.to_json()
        assert raw == args.events and first["total"] == min(args.sessions, args.events)
        assert sum(s["events"] for s in listed["sessions"]) == args.events + args.calls  # nothing counted twice
    finally:
        await log.close()
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await admin.start()
        try:
            await admin.delete_topics([topic])
        finally:
            await admin.close()
    later_p50 = statistics.median(later)
    return {
        "events": args.events,
        "sessions": args.sessions,
        "partitions": args.partitions,
        "first_listing_ms": round(first_s * 1000, 1),
        "later_listing_p50_ms": round(later_p50 * 1000, 2),
        "raw_aiokafka_full_read_ms": round(raw_s * 1000, 1),
        "first_over_raw": round(first_s / raw_s, 2),
        "later_over_first": round(later_p50 / first_s, 4),
        "audit_first_ms": round(audit_first_s * 1000, 1),
        "audit_later_p50_ms": round(statistics.median(audit_later) * 1000, 2),
        "audit_unkept_p50_ms": round(statistics.median(audit_plain) * 1000, 1),
    }


def cli() -> None:
    parsed = bench_cli.parser(__doc__)
    parsed.add_argument("--events", type=int, default=100_000)
    parsed.add_argument("--sessions", type=int, default=1000)
    parsed.add_argument("--partitions", type=int, default=3)
    parsed.add_argument("--calls", type=int, default=20)
    ran = bench_cli.run(parsed, main)
    if ran is None:
        return
    args, result = ran
    print(f"{args.events:,} events, {args.sessions:,} sessions, {args.partitions} partitions")
    print(f"  first listing (whole log read)      {result['first_listing_ms']:>10.1f} ms")
    print(f"  later listing, one new event, p50   {result['later_listing_p50_ms']:>10.2f} ms")
    print(f"  anchor: raw aiokafka full read      {result['raw_aiokafka_full_read_ms']:>10.1f} ms")
    print(f"  first / anchor {result['first_over_raw']}x; later / first {result['later_over_first']}x")
    print(f"  one session's audit, first ask       {result['audit_first_ms']:>10.1f} ms")
    print(f"  asked again, one new event, p50     {result['audit_later_p50_ms']:>10.2f} ms")
    print(f"  the same, nothing kept, p50         {result['audit_unkept_p50_ms']:>10.1f} ms")


if __name__ == "__main__":
    cli()
