"""Smoke test of the composed stack (docker-compose.yml), run by scripts/ci-docker.

    python scripts/docker/smoke.py demo --config DIR/helix.yaml     # the demo, through the projector service
    python scripts/docker/smoke.py resume --config DIR/helix.yaml   # after `docker-compose restart projector`
    python scripts/docker/smoke.py server --config DIR/helix.yaml --url http://127.0.0.1:PORT --key KEY

The config is the one the composed projector reads (HELIX_CONFIG_DIR): a composite of a
sliding window in Redis and long-term memory in PostgreSQL. Service addresses come from
HELIX_KAFKA_BOOTSTRAP, HELIX_REDIS_URL and HELIX_POSTGRES_DSN (the ports compose published).
`server` talks to the composed `helix-es serve` over HTTP only: /readyz, a message added and
read back, and a request without the key refused.
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
import urllib.error
import urllib.request
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
    # namespace-wide there); its checkpoints and clear watermark (a row mark) stay
    conn = await asyncpg.connect(os.environ["HELIX_POSTGRES_DSN"])
    try:
        checkpoints = await conn.fetchval("select count(*) from helix_checkpoints where view = 'long-term'")
        cleared = await conn.fetchval(
            "select count(*) from helix_row_marks where view = 'long-term' and namespace = 'smoke' and mark = 'cleared'"
        )
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


def _http(url: str, key: str | None = None, body: dict[str, object] | None = None) -> tuple[int, dict[str, object]]:
    headers = {"Content-Type": "application/json"} if body is not None else {}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, text = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    try:
        parsed = json.loads(text) if text else {}
    except json.JSONDecodeError:
        parsed = {"text": text[:500].decode(errors="replace")}
    return status, parsed if isinstance(parsed, dict) else {"value": parsed}


def server(config: str, url: str, key: str) -> None:
    from helix_es import load_config

    namespace = load_config(config).memory.namespace
    deadline = time.monotonic() + 90
    while True:  # the container's health check and /readyz: up, and its log and views reachable
        try:
            status, body = _http(f"{url}/readyz")
        except OSError as exc:
            status, body = 0, {"error": repr(exc)}
        if status == 200:
            break
        if time.monotonic() > deadline:
            fail(f"the server's /readyz did not answer 200 within 90 s: {status} {body}")
        time.sleep(1)
    status, body = _http(f"{url}/healthz")
    if status != 200:
        fail(f"/healthz answered {status}: {body}")
    sid = f"over-http-{uuid.uuid4().hex[:6]}"
    messages = f"{url}/v1/{namespace}/sessions/{sid}/messages"
    text = f"added through the server's HTTP port ({sid})"
    status, body = _http(messages, None, {"role": "user", "content": "not without a key"})
    if status != 401:
        fail(f"an add without a key answered {status}, not 401: {body}")
    status, body = _http(messages, key, {"role": "user", "content": text})
    if status not in (200, 201, 202):
        fail(f"POST {messages} answered {status}: {body}")
    status, body = _http(messages, key)  # read-your-writes: the server waits for the projector's fold
    got = [m.get("content") for m in body.get("messages", [])] if isinstance(body.get("messages"), list) else []
    if status != 200 or text not in got:
        fail(f"GET {messages} answered {status} without the message just added: {body}")
    print(f"smoke: server ok: /readyz, /healthz; a message added and read back over HTTP ({sid}), 401 without a key")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("step", choices=["demo", "resume", "server"])
    p.add_argument("--config", required=True)
    p.add_argument("--url", help="server: the composed server's base URL")
    p.add_argument("--key", help="server: an API key of its keys file")
    args = p.parse_args()
    if args.step == "server":
        if not args.url or not args.key:
            p.error("server needs --url and --key")
        server(args.config, args.url.rstrip("/"), args.key)
    else:
        (demo if args.step == "demo" else resume)(args.config)


if __name__ == "__main__":
    main()
