"""Smoke test of the composed stack (docker-compose.yml), run by scripts/ci-docker.

    python scripts/docker/smoke.py demo --config DIR/helix.yaml     # the demo, through the projector service
    python scripts/docker/smoke.py resume --config DIR/helix.yaml   # after `docker-compose restart projector`

The config is the one the composed projector reads (HELIX_CONFIG_DIR): a composite of a
sliding window in Redis and long-term memory in PostgreSQL. Service addresses come from
HELIX_KAFKA_BOOTSTRAP, HELIX_REDIS_URL and HELIX_POSTGRES_DSN (the ports compose published).
Exits 1 with a reason when anything is off.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import uuid


def fail(why: str) -> None:
    print(f"smoke: FAILED: {why}", file=sys.stderr)
    sys.exit(1)


def demo(config: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "helix_es.cli", "demo", "--json", "--config", config],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if run.returncode != 0:
        fail(f"helix-es demo exited {run.returncode}: {run.stderr[-2000:]}")
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    turns = [x for x in lines if x["kind"] == "turn"]
    if len(turns) != 9:
        fail(f"expected 9 turns, got {len(turns)}")
    last = [x for x in turns if x["session"] == "alice"][-1]["get"]
    contents = [m.get("content") for m in last]
    if not last or last[0]["role"] != "system":
        fail(f"alice's last get does not start with the system message: {contents}")
    # Evicted from the 4-message window long before: only the long-term view in PostgreSQL has it.
    if "I want to visit Oslo in March." not in contents or not any("Bergen is milder" in (c or "") for c in contents):
        fail(f"alice's last get misses the Redis window or the PostgreSQL long-term view: {contents}")
    events = [x for x in lines if x["kind"] == "event"]
    if len(events) != 7:
        fail(f"expected alice's 7 events read back from Kafka, got {len(events)}")
    asyncio.run(_stores())
    print(
        f"smoke: demo ok: {len(turns)} turns through the composed projector, {len(events)} events on the log, "
        f"alice's get has {len(last)} messages from Redis and PostgreSQL"
    )


async def _stores() -> None:
    """The views are in the composed Redis and PostgreSQL, not anywhere else."""
    import asyncpg
    from redis.asyncio import Redis

    redis = Redis.from_url(os.environ["HELIX_REDIS_URL"])
    try:
        keys = [k async for k in redis.scan_iter(match="helix:memory:smoke:*", count=1000)]
    finally:
        await redis.aclose()
    if not keys:
        fail("no helix:memory:smoke:* keys in the composed Redis")
    # bob's clear at the end of the demo empties the namespace's long-term rows (a clear is
    # namespace-wide there); its checkpoints and clear watermark stay
    conn = await asyncpg.connect(os.environ["HELIX_POSTGRES_DSN"])
    try:
        checkpoints = await conn.fetchval("select count(*) from helix_checkpoints where view = 'long-term'")
        cleared = await conn.fetchval("select count(*) from helix_long_term_cleared where namespace = 'smoke'")
    finally:
        await conn.close()
    if not checkpoints or not cleared:
        fail(f"the composed PostgreSQL lacks the long-term view: {checkpoints} checkpoints, {cleared} clears")


async def _resume(config: str) -> int:
    from helix_es import Message, open_memory

    sid = f"after-restart-{uuid.uuid4().hex[:6]}"
    sent = [f"message {i} after the projector restarted" for i in range(3)]
    async with open_memory(config, session_id=sid) as mem:
        for text in sent:
            await mem.add(Message("user", text))
        got = [m.content for m in await mem.get()]  # waits until the restarted projector applied them
    if not all(text in got for text in sent):
        fail(f"after the projector restart, get returned {got}")
    import asyncpg

    conn = await asyncpg.connect(os.environ["HELIX_POSTGRES_DSN"])
    try:
        rows = await conn.fetchval("select count(*) from agent_memory where session_id = $1", sid)
    finally:
        await conn.close()
    if rows != len(sent):
        fail(f"{rows} rows of {sid} in agent_memory in the composed PostgreSQL, expected {len(sent)}")
    return len(got)


def resume(config: str) -> None:
    got = asyncio.run(_resume(config))
    for _ in range(30):  # every view of every partition caught up (checkpoints trail views by a batch)
        lag = subprocess.run(
            [sys.executable, "-m", "helix_es.cli", "lag", "--config", config, "--max", "0"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if lag.returncode == 0:
            break
        time.sleep(1)
    else:
        fail(f"helix-es lag --max 0 exited {lag.returncode}: {lag.stdout[-1500:]} {lag.stderr[-1500:]}")
    print(f"smoke: resume ok: the restarted projector served {got} messages; lag 0")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["demo", "resume"])
    p.add_argument("--config", required=True)
    args = p.parse_args()
    (demo if args.step == "demo" else resume)(args.config)


if __name__ == "__main__":
    main()
