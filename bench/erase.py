"""How long erasing a person takes: `helix-es erase` over a subject spread across 1,000 sessions.

    python bench/erase.py [--log embedded,kafka] [--sessions 1000] [--others 1000] [--turns 10]
                          [--no-encryption] [--json]

For each log, one namespace holds `--sessions` sessions of the subject (every user turn carries
`metadata.user_id` = the subject, and a model's extraction of facts about it is recorded in each) and
`--others` sessions of other people, each with one turn naming the subject; `--turns` turns a session,
sealed by the encryption middleware with a data key per session in a key store (a file directory
embedded, PostgreSQL on Kafka) unless `--no-encryption`. The views: a conversation, a long-term
memory, a vector index (hash embeddings) and a facts view; embedded they are kept in the process
(the erasing process folds them from the log, as any process opening them does), on Kafka in Redis
(conversation) and PostgreSQL (the others), folded by a `helix-es project` process beside it, which
has caught up before the clock starts.

The measure is `erase_subject` (what `helix-es erase` runs) from a fresh runtime: the log read, the
shredding (a key destroyed and a `SessionErased` per session of the subject), the forgettings of the
other sessions' messages and of the facts, the check of every view (on Kafka: once the projector has
applied the erasure) and of the log, and the receipt on the log. The anchor, in the same run, is one
plain read of the namespace's log (decoding every event). Needs HELIX_KAFKA_BOOTSTRAP, HELIX_REDIS_URL
and HELIX_POSTGRES_DSN for `--log kafka` (eval "$(scripts/services up)").

Target: <= 30 s for the erasure and its check (`TARGET_S`), on each log; the check must pass. A miss
is a `MISSED:` line on stderr and exit status 3.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from cli import child_env, delete_topics, missed, parser, run  # bench/, this script's directory

from helix_es.client.encryption import EncryptedMemory
from helix_es.client.protocol import Memory
from helix_es.client.runtime import Runtime
from helix_es.config import load_config
from helix_es.history.subject_erasure import erase_subject
from helix_es.model import names
from helix_es.model.events import Event, ExtractedFact, FactAsserted, FactsExtracted, MessageAdded, SourceTurn
from helix_es.model.message import Message

TARGET_S = 30.0
SUBJECT = "Caroline"
TOPICS = ("Lisbon", "Porto", "the budget", "the offsite", "the hiring plan", "the roadmap", "the launch")


def history(i: int, turns: int, theirs: bool) -> list[Message]:
    """One session's turns: the subject's own (user ids), or someone else's naming the subject once."""
    out = []
    for t in range(turns):
        topic = TOPICS[(i + t) % len(TOPICS)]
        if t % 2 == 0:
            meta = {"user_id": SUBJECT} if theirs else {"user_id": f"user-{i}"}
            text = f"Note {t}: plan {topic} for next week." if theirs or t != 2 else f"Met {SUBJECT} about {topic}."
            out.append(Message("user", text, metadata=meta))
        else:
            out.append(Message("assistant", f"Noted: {topic}, turn {t}."))
    return out


def configure(log_kind: str, tmp: str, ns: str, prefix: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The erasure's config and the projector's (Kafka): the same views, the first with encryption."""
    if log_kind == "embedded":
        log: dict[str, Any] = {"type": "embedded", "path": str(Path(tmp) / "log"), "fsync": True}
        stores: list[dict[str, Any]] = [{}, {}, {}, {}]
    else:
        log = {"type": "kafka", "bootstrap_servers": os.environ["HELIX_KAFKA_BOOTSTRAP"], "topic_prefix": prefix}
        redis = {"store": "redis", "redis_url": os.environ["HELIX_REDIS_URL"]}
        pg = {"store": "postgres", "dsn": os.environ["HELIX_POSTGRES_DSN"]}
        stores = [redis, pg, pg, pg]
    kinds: list[dict[str, Any]] = [{"type": "conversation"}, {"type": "long-term"}, {"type": "vector"}]
    kinds.append({"type": "facts"})
    backends = [{**k, **s} for k, s in zip(kinds, stores, strict=True)]
    memory = {"type": "composite", "namespace": ns, "read_timeout": 60, "backends": backends}
    return {"log": log, "memory": memory}, {"log": log, "memory": memory}


async def write(cfg: dict[str, Any], ns: str, args: Any, encrypted: bool) -> int:
    """Every session's turns, sealed per session when `encrypted`, appended in batches; the event count."""
    config = load_config(cfg)
    events = 0
    async with Runtime() as runtime, runtime.backend(config.log) as backend:
        keys = runtime.keys() if encrypted else None
        facts: list[Event] = []
        sessions = [(f"her-{i}", True) for i in range(args.sessions)] + [
            (f"other-{i}", False) for i in range(args.others)
        ]
        for n, (sid, theirs) in enumerate(sessions):
            messages = history(n, args.turns, theirs)
            if keys is not None:
                await keys.prepare(ns, sid, write=True)  # type: ignore[attr-defined]
                sealer = EncryptedMemory(cast(Memory, object()), keys, namespace=ns, session_id=sid)
                messages = [sealer.encrypt(m) for m in messages]
            added = [Event(ns, sid, MessageAdded(m)) for m in messages]
            positions = await backend.log.append_many(added)
            events += len(added)
            if theirs:  # what an extractor drew from the session's first turn
                turn = SourceTurn(str(added[0].event_id), positions[0], datetime.now(UTC))
                fact = ExtractedFact(SUBJECT, "lives_in", TOPICS[n % 2])
                facts.append(Event(ns, sid, FactsExtracted("facts", "rules/v1", "", (fact,), (turn,))))
        facts += [Event(ns, "facts", FactAsserted(SUBJECT, "likes", f"tea no. {i}")) for i in range(10)]
        for start in range(0, len(facts), 500):
            await backend.log.append_many(facts[start : start + 500])
        events += len(facts)
    return events


async def caught_up(cfg: dict[str, Any], ns: str, timeout: float = 600) -> float:
    """Wait until every view has folded the whole log (the projector's catch-up); the seconds it took."""
    config = load_config(cfg)
    started = time.monotonic()
    async with Runtime() as runtime, runtime.backend(config.log) as backend:
        ends = await backend.log.ends(ns)
        topic = names.topic(ns, backend.log.topic_prefix)
        projections = [await backend.attach(part, ns) for part in config.memory.parts]
        while True:
            behind = 0
            for projection in projections:
                for partition, end in ends.items():
                    done = await projection.checkpoint(topic, partition)
                    behind += end - 1 - (-1 if done is None else done)
            if behind <= 0:
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise TimeoutError(f"the projector is still {behind} records behind after {timeout:.0f} s")
            await asyncio.sleep(0.5)


async def read_once(cfg: dict[str, Any], ns: str) -> float:
    """The anchor: one plain read of the namespace's log, every event decoded."""
    config = load_config(cfg)
    async with Runtime() as runtime, runtime.backend(config.log) as backend:
        started = time.perf_counter()
        n = 0
        async for _ in backend.log.read(ns):
            n += 1
        return time.perf_counter() - started


async def one_log(args: Any, log_kind: str) -> dict[str, Any]:
    ns = f"bench-erase-{uuid.uuid4().hex[:8]}"
    prefix = f"bench-erase-{uuid.uuid4().hex[:8]}"
    projector: subprocess.Popen[bytes] | None = None
    with tempfile.TemporaryDirectory(prefix="helix-bench-erase-") as tmp:
        os.environ["HELIX_KEY_STORE"] = "file" if log_kind == "embedded" else "postgres"
        os.environ["HELIX_KEY_STORE_URL"] = str(Path(tmp) / "keys") if log_kind == "embedded" else ""
        if not os.environ["HELIX_KEY_STORE_URL"]:
            del os.environ["HELIX_KEY_STORE_URL"]  # postgres: HELIX_POSTGRES_DSN
        cfg, projected = configure(log_kind, tmp, ns, prefix)
        if not args.no_encryption:
            cfg["memory_middleware"] = ["encryption"]
        try:
            t0 = time.monotonic()
            events = await write(cfg, ns, args, not args.no_encryption)
            wrote = time.monotonic() - t0
            folded = 0.0
            if log_kind == "kafka":
                path = Path(tmp) / "projector.json"
                path.write_text(json.dumps(projected))
                command = [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path)]
                projector = subprocess.Popen(
                    command, env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
                )
                folded = await caught_up(cfg, ns)
            anchor = await read_once(cfg, ns)
            started = time.monotonic()
            async with Runtime() as runtime:
                receipt = (await erase_subject(cfg, subject=SUBJECT, namespace=ns, runtime=runtime)).to_json()
            took = time.monotonic() - started
        finally:
            if projector is not None:
                projector.terminate()
                projector.wait(timeout=30)
            if log_kind == "kafka":
                await delete_topics(os.environ["HELIX_KAFKA_BOOTSTRAP"], prefix)
    check = receipt["verification"]
    return {
        "log": log_kind,
        "encryption": not args.no_encryption,
        "events": events,
        "sessions": len(receipt["sessions"]),
        "other_sessions": len(receipt["messages"]),
        "messages_forgotten": sum(len(o) for o in receipt["messages"].values()),
        "facts_forgotten": len(receipt["facts"]),
        "keys_destroyed": len(receipt["key_ids"]),
        "write_s": round(wrote, 2),
        "projector_catch_up_s": round(folded, 2),
        "erase_s": round(took, 2),
        "parts_s": receipt["seconds"],
        "check_s": {
            name: {k: v[k] for k in ("waited_s", "read_s") if k in v}
            for name, v in check["scanned"].items()
            if name != "log"
        },
        "passed": check["passed"],
        "failures": check["failures"],
        "read_log_once_s": round(anchor, 2),
    }


async def main(args: Any) -> dict[str, Any]:
    if not args.no_encryption and not os.environ.get("HELIX_ENCRYPTION_KEY"):
        os.environ["HELIX_ENCRYPTION_KEY"] = base64.b64encode(os.urandom(32)).decode()
    out: dict[str, Any] = {"target_s": TARGET_S, "runs": []}
    for log_kind in args.log.split(","):
        out["runs"].append(await one_log(args, log_kind))
        print(f"{log_kind}: done", file=sys.stderr, flush=True)
    return out


def report(out: dict[str, Any], say: Any = print) -> list[str]:
    misses = []
    for r in out["runs"]:
        p = r["parts_s"]
        say(
            f"{r['log']} ({'encrypted' if r['encryption'] else 'plaintext'}): erased {r['sessions']:,} sessions of the "
            f"subject ({r['keys_destroyed']:,} keys), {r['messages_forgotten']:,} messages in {r['other_sessions']:,} "
            f"other sessions, {r['facts_forgotten']:,} facts, from {r['events']:,} events: {r['erase_s']} s "
            f"(scan {p['scan']} s, erase {p['erase']} s, verify {p['verify']} s; target <= {TARGET_S:g} s), "
            f"check {'passed' if r['passed'] else 'FAILED'}"
        )
        views = ", ".join(f"{name} {v.get('waited_s', 0)} + {v.get('read_s', 0)} s" for name, v in r["check_s"].items())
        say(f"  the check, view by view (waiting for it to apply the erasure + reading it): {views}")
        say(f"  anchor: one plain read of the log {r['read_log_once_s']} s; written in {r['write_s']} s")
        if r["erase_s"] > TARGET_S:
            misses.append(f"{r['log']}: the erasure took {r['erase_s']} s")
        if not r["passed"]:
            misses.append(f"{r['log']}: the check failed: {r['failures'][:3]}")
    return misses


if __name__ == "__main__":
    cli = parser(__doc__)
    cli.add_argument("--log", default="embedded,kafka", help="the logs to run on: embedded, kafka")
    cli.add_argument("--sessions", type=int, default=1_000, help="sessions of the subject")
    cli.add_argument("--others", type=int, default=1_000, help="other sessions, each naming the subject once")
    cli.add_argument("--turns", type=int, default=10, help="turns a session")
    cli.add_argument("--no-encryption", action="store_true", help="plaintext messages (nothing to shred)")
    done = run(cli, main)
    if done is not None:
        raise SystemExit(missed(report(done[1])))
