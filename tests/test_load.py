"""Load: 50 concurrent sessions x 300 adds, a read-your-writes get after every add.

Through Kafka and a real projector process (`helix-es project`) into a Redis view, and, smaller
(PostgreSQL commits one transaction per small batch: about 4x slower here), a PostgreSQL view.
The sessions are split over two namespaces that use the same session ids, so a view that mixed
namespaces up, or sessions, or served a stale window, would show it at once: every get must
return exactly the session's last N messages, the one just added last, with its metadata.
Afterwards the log itself is read back: each session's events, in order, in its own namespace's
topic, and nothing else.

HELIX_LOAD_SESSIONS and HELIX_LOAD_ADDS scale the Redis run (defaults 50 and 300; 1,000 adds
takes about a minute here).
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, open_memory
from helix_es.log.kafka import KafkaLog
from helix_es.model.events import MessageAdded
from tests.conftest import start_projector, unique

SCALE = {  # store: (sessions, adds per session)
    "redis": (int(os.environ.get("HELIX_LOAD_SESSIONS", "50")), int(os.environ.get("HELIX_LOAD_ADDS", "300"))),
    "postgres": (10, 100),
}
WINDOW = 8
# Raised by HELIX_LOAD_ADDS, it can take several minutes on a busy machine: more than the 300 s default.
pytestmark = pytest.mark.timeout(900)


def text(ns: str, sid: str, i: int) -> str:
    return f"{ns}|{sid}|{i}"


async def session(config: dict[str, Any], ns: str, sid: str, adds: int, latencies: list[float]) -> int:
    """`adds` adds, each followed by a get that must show exactly this session's last WINDOW messages."""
    async with open_memory(config, session_id=sid) as mem:
        for i in range(adds):
            started = time.perf_counter()
            await mem.add(Message("user", text(ns, sid, i), metadata={"ns": ns, "sid": sid}))
            got = await mem.get()
            latencies.append(time.perf_counter() - started)
            want = [text(ns, sid, j) for j in range(max(0, i + 1 - WINDOW), i + 1)]
            if [m.content for m in got] != want:
                strangers = [m.content for m in got if not m.content.startswith(f"{ns}|{sid}|")]
                raise AssertionError(
                    f"{ns}/{sid} get #{i}: want {want[-3:]}..., got {[m.content for m in got]}"
                    + (f"; from other sessions: {strangers}" if strangers else "")
                )
            assert all(m.metadata == {"ns": ns, "sid": sid} for m in got)
    return adds


@pytest.mark.parametrize("store", ["redis", "postgres"])
async def test_concurrent_sessions_read_their_own_writes_and_nothing_else(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    kafka_bootstrap: str,
    store: str,
    procs: list[subprocess.Popen[str]],
) -> None:
    sessions, adds = SCALE[store]
    prefix = unique("load")  # only this test's projector reads these topics
    log = {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 6, "topic_prefix": prefix}
    where = (
        {"redis_url": request.getfixturevalue("redis_url")}
        if store == "redis"
        else {"dsn": request.getfixturevalue("postgres_dsn")}
    )
    memory = {"type": "sliding-window", "window_size": WINDOW, "store": store, "read_timeout": 60, **where}
    namespaces = [unique("load-a"), unique("load-b")]

    def config(ns: str) -> dict[str, Any]:
        return {"log": log, "memory": {**memory, "namespace": ns}}

    # One view (one consumer group) projects both agents' namespaces: both share its store. Two
    # projector processes share the partitions (one core each), rebalancing while the sessions write.
    served = {"log": log, "agents": [{"id": ns, "memory": memory} for ns in namespaces]}
    procs += [start_projector(served, tmp_path, batch_size=500) for _ in range(2)]
    sids = [f"s-{i:02d}" for i in range(sessions // len(namespaces))]  # the same ids in both namespaces
    latencies: list[float] = []
    started = time.perf_counter()
    done = await asyncio.gather(*(session(config(ns), ns, sid, adds, latencies) for sid in sids for ns in namespaces))
    seconds = time.perf_counter() - started
    assert sum(done) == len(sids) * len(namespaces) * adds
    latencies.sort()
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99)]
    print(
        f"\nload ({store}): {sum(done)} adds + gets by {len(done)} sessions in {seconds:.1f}s "
        f"({sum(done) / seconds:.0f}/s); add+get p50 {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms"
    )
    assert all(p.poll() is None for p in procs), "a projector died"

    # The log: every session's events in order, in its own namespace's topic, and nothing else.
    kafka = KafkaLog(kafka_bootstrap, topic_prefix=prefix)
    try:
        assert sorted(await kafka.namespaces()) == sorted(namespaces)
        for ns in namespaces:
            seen: dict[str, list[str]] = {}
            async for record in kafka.read(ns):
                event = record.event
                assert event.namespace == ns and isinstance(event.payload, MessageAdded)
                seen.setdefault(event.session_id, []).append(event.payload.message.content)
            assert sorted(seen) == sids
            for sid, contents in seen.items():
                assert contents == [text(ns, sid, i) for i in range(adds)], f"{ns}/{sid} on the log"
    finally:
        await kafka.close()
