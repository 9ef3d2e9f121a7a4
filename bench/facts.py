"""What a facts view costs: on the hot path, per model call, and on a rebuild.

    python bench/facts.py [--part add,rebuild] [--log embedded,kafka] [--sessions 20] [--turns 40]
                          [--rounds 5] [--delay 0.5] [--pause 0.005] [--no-fsync]
                          [--events 100000] [--stores memory,redis,postgres] [--json]

(a) `add` latency with a facts view beside the conversation, next to the conversation alone, on
    the embedded log (the default install: views fold in the process) and on Kafka (views in Redis;
    `helix-es project`, which runs the extraction worker, in a process beside it each round):
    `--sessions` sessions of `--turns` turns each (a user saying where they live, work, what they
    like; the assistant answering), in `--rounds` rounds that alternate the two configs, as the
    machine's speed drifts; `--pause` seconds (untimed) after each add stand for the agent's own
    work between turns. The extractor is the OpenAI-compatible stand-in (tests/model_server.py) in
    a process of its own, answering each extraction after `--delay` seconds, so the worker has
    calls in flight while `add` is timed. After each embedded facts round the worker's batches are
    read back off the log: model calls per batch (the stand-in counts calls; a batch is one
    `FactsExtracted`) and prompt tokens per turn (the stand-in counts a prompt's words).
    Each round also runs the conversation alone a second time (the control): its ratio to the first
    is what two identical configs give on this machine, the noise the facts ratio must be read against.
    Targets: add p99 <= 1.1x the conversation alone's (the median of the rounds' ratios: one round's
    disk hiccup moves a pooled p99 by more than that); <= 1 model call per batch.
(b) A rebuild of the facts view from a log of `--events` events (chat turns, and one `FactsExtracted`
    per 8 turns of a session, landing after the next 8 turns, as the worker writes them) with 0
    model calls: into Redis and PostgreSQL with `projectors.rebuild.rebuild` (what `helix-es
    rebuild` runs), and into the in-process store by opening a memory on the embedded log (the open
    folds the whole log; the first `facts()` after it, which computes the timeline, is reported
    apart). The extractor is the stand-in; it must see no call. The anchor, in the same run on the
    same bytes, is `fastavro.schemaless_reader` alone. Target: >= 10,000 events/s.

Needs HELIX_KAFKA_BOOTSTRAP, HELIX_REDIS_URL and HELIX_POSTGRES_DSN for the Kafka rounds and the
Redis and PostgreSQL rebuilds (eval "$(scripts/services up)"). A miss is a `MISSED:` line on stderr and exit status 3.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cli import child_env, delete_topics, missed, parser  # bench/, this script's directory
from rebuild import anchor

from helix_es import Message, open_memory
from helix_es.log.codec import Codec
from helix_es.log.embedded import EmbeddedLog
from helix_es.model.events import Event, ExtractedFact, FactsExtracted, MessageAdded, SourceTurn
from projectors.rebuild import rebuild
from projectors.rebuild.selection import select

ROOT = Path(__file__).resolve().parent.parent
P99_RATIO_TARGET = 1.1
CALLS_PER_BATCH_TARGET = 1.0
REBUILD_TARGET_PER_S = 10_000
MODEL = "stand-in"
CITIES = ("Lisbon", "Porto", "Berlin", "Madrid", "Oslo", "Quito", "Lima", "Kyoto")
LIKES = ("jazz", "hiking", "tea", "chess", "sushi", "cycling", "poetry", "tennis")

STAND_IN = """
import json, sys
from tests.model_server import serve_model
with serve_model() as server:
    server.extract_delay = float(sys.argv[1])
    print(server.base_url, flush=True)
    sys.stdin.read()  # until the bench closes it
    print(json.dumps({"extractions": server.extractions}), flush=True)
"""


class StandIn:
    """The stand-in model in a process of its own: its thread must not share the timed loop's GIL."""

    def __init__(self, delay: float) -> None:
        env = child_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", STAND_IN, str(delay)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()

    def stop(self) -> int:
        """Ends the process; the number of extraction calls it answered."""
        out, _ = self.proc.communicate("", timeout=30)
        return int(json.loads(out.strip().splitlines()[-1])["extractions"])


def said(session: int, turn: int) -> Message:
    k = session * 31 + turn
    if turn % 2:
        return Message("assistant", f"Noted, thanks for telling me (turn {turn}).")
    texts = (
        f"I live in {CITIES[k % len(CITIES)]} these days",
        f"I like {LIKES[k % len(LIKES)]} a lot",
        f"I work at Company {k % 13}",
        f"What's a good plan for the weekend, turn {turn}?",
    )
    return Message("user", texts[(turn // 2) % len(texts)], name=f"person{session}")


def extract_config(base_url: str) -> dict[str, Any]:
    return {"provider": "openai", "base_url": base_url, "model": MODEL}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def add_round(
    log_cfg: dict[str, Any], ns: str, memory: dict[str, Any], sessions: int, turns: int, pause: float = 0.0
) -> list[float]:
    """Every session's turns, one `add` at a time (sessions interleaved), each timed and followed by
    `pause` seconds untimed (an agent calls its model between turns); then the worker's tail."""
    cfg = {"log": log_cfg, "memory": {**memory, "namespace": ns}}
    took: list[float] = []
    async with AsyncExitStack() as stack:
        mems = [await stack.enter_async_context(open_memory(cfg, session_id=f"s{i}")) for i in range(sessions)]
        for turn in range(turns):
            for i, mem in enumerate(mems):
                message = said(i, turn)
                started = time.perf_counter()
                await mem.add(message)
                took.append(time.perf_counter() - started)
                await asyncio.sleep(pause)
        if memory["type"] == "composite":
            await mems[0].extract_now()  # type: ignore[attr-defined]  # embedded: the rest; Kafka: nothing
    return took


async def batches(path: str, ns: str) -> list[FactsExtracted]:
    log = EmbeddedLog(path, fsync=False)
    try:
        return [r.event.payload async for r in log.read(ns) if isinstance(r.event.payload, FactsExtracted)]
    finally:
        await log.close()


class Projector:
    """`helix-es project` for one round's config, as a deployment on Kafka runs it (facts worker included)."""

    def __init__(self, cfg: dict[str, Any], folder: str) -> None:
        path = Path(folder) / f"{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps(cfg))
        env = child_env()
        command = [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path)]
        self.proc = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


async def part_add(args: Any, log_kind: str) -> dict[str, Any]:
    stand_in = StandIn(args.delay)
    alone: list[float] = []
    facts: list[float] = []
    ratios: list[float] = []  # each round's p99 with facts / alone: the disk's and the machine's drift cancel
    control: list[float] = []  # the conversation alone once more: how far two identical configs land apart
    controls: list[float] = []
    found: list[FactsExtracted] = []
    redis_url = os.environ.get("HELIX_REDIS_URL", "redis://127.0.0.1:6379/0")
    store = {} if log_kind == "embedded" else {"store": "redis", "redis_url": redis_url}
    conversation = {"type": "conversation", **store}
    with_facts = {
        "type": "composite",
        "backends": [conversation, {"type": "facts", **store, "extract": extract_config(stand_in.base_url)}],
    }
    prefix = f"bench-facts-{uuid.uuid4().hex[:8]}"
    bootstrap = os.environ.get("HELIX_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    try:
        with tempfile.TemporaryDirectory(prefix="helix-bench-facts-") as tmp:
            if log_kind == "embedded":
                log_cfg: dict[str, Any] = {"type": "embedded", "path": tmp, "fsync": not args.no_fsync}
            else:
                log_cfg = {"type": "kafka", "bootstrap_servers": bootstrap, "topic_prefix": prefix}
            for r in range(args.rounds):
                configs = [
                    ("alone", conversation, alone),
                    ("facts", with_facts, facts),
                    ("control", conversation, control),
                ]
                configs = configs[r % 3 :] + configs[: r % 3]  # each takes each place in turn
                for name, memory, into in configs:
                    ns = f"bench-facts-{name}-{r}-{uuid.uuid4().hex[:6]}"
                    projector = None
                    if log_kind == "kafka":  # its projector (and worker) share the machine, as they would
                        projector = Projector({"log": log_cfg, "memory": {**memory, "namespace": ns}}, tmp)
                        await asyncio.sleep(3)
                    try:
                        into += await add_round(log_cfg, ns, memory, args.sessions, args.turns, args.pause)
                    finally:
                        if projector is not None:
                            projector.stop()
                    if name == "facts" and log_kind == "embedded":
                        found += await batches(tmp, ns)
                    print(
                        f"{log_kind} round {r + 1}/{args.rounds} {name}: {args.sessions * args.turns} adds",
                        file=sys.stderr,
                    )
                n = args.sessions * args.turns
                ratios.append(percentile(facts[-n:], 0.99) / percentile(alone[-n:], 0.99))
                controls.append(percentile(control[-n:], 0.99) / percentile(alone[-n:], 0.99))
    finally:
        calls = stand_in.stop()
        if log_kind == "kafka":
            await delete_topics(bootstrap, prefix)
    turns = sum(len(b.sources) for b in found)
    out: dict[str, Any] = {
        "adds": len(alone),
        "alone_p50_ms": round(statistics.median(alone) * 1000, 3),
        "alone_p99_ms": round(percentile(alone, 0.99) * 1000, 3),
        "facts_p50_ms": round(statistics.median(facts) * 1000, 3),
        "facts_p99_ms": round(percentile(facts, 0.99) * 1000, 3),
        "p99_ratio_pooled": round(percentile(facts, 0.99) / percentile(alone, 0.99), 3),
        "p99_ratio": round(statistics.median(ratios), 3),
        "p99_ratio_rounds": [round(r, 3) for r in ratios],
        "control_p99_ms": round(percentile(control, 0.99) * 1000, 3),
        "control_ratio": round(statistics.median(controls), 3),
        "control_ratio_rounds": [round(r, 3) for r in controls],
        "delay_s": args.delay,
        "pause_s": args.pause,
        "fsync": not args.no_fsync if log_kind == "embedded" else None,
    }
    if log_kind == "embedded":  # the worker's own log, read back
        out.update(
            batches=len(found),
            model_calls=calls,
            calls_per_batch=round(calls / max(1, len(found)), 3),
            turns_per_batch=round(turns / max(1, len(found)), 2),
            facts=sum(len(b.facts) for b in found),
            prompt_tokens_per_turn=round(sum(b.prompt_tokens or 0 for b in found) / max(1, turns), 1),
        )
    return out


def history(ns: str, events: int) -> tuple[list[Event], list[list[int]]]:
    """Chat turns in batches of 8 of one session, and per batch the indexes of its turns."""
    sessions = max(1, events // 180)
    turns_per = 8
    out: list[Event] = []
    groups: list[list[int]] = []
    n = 0
    while len(out) + len(groups) < events:
        i = n % sessions
        turn0 = (n // sessions) * turns_per
        group = []
        for t in range(turn0, turn0 + turns_per):
            group.append(len(out))
            out.append(Event(ns, f"s{i}", MessageAdded(said(i, t))))
        groups.append(group)
        n += 1
    return out, groups


async def write_history(log: EmbeddedLog, view: str, turns: list[Event], groups: list[list[int]]) -> list[Event]:
    """The log as the worker leaves it: each batch's FactsExtracted lands after the next batch's turns."""
    positions: list[Any] = [None] * len(turns)
    written: list[Event] = []
    late: Event | None = None
    for group in groups:
        batch = [turns[j] for j in group]
        for j, p in zip(group, await log.append_many(batch), strict=True):
            positions[j] = p
        written += batch
        if late is not None:
            await log.append(late)
            written.append(late)
        late = extracted(view, turns, group, positions)
    if late is not None:
        await log.append(late)
        written.append(late)
    return written


def extracted(view: str, turns: list[Event], group: list[int], positions: list[Any]) -> Event:
    first = turns[group[0]]
    facts = tuple(
        ExtractedFact(f"person{first.session_id[1:]}", predicate, value)
        for predicate, value in (("lives_in", CITIES[group[0] % len(CITIES)]), ("likes", LIKES[group[0] % len(LIKES)]))
    )
    sources = tuple(
        SourceTurn(str(turns[j].event_id), positions[j], turns[j].timestamp, turns[j].timestamp) for j in group
    )
    payload = FactsExtracted(view, f"openai/{MODEL}", "0" * 64, facts, sources, 900, 40)
    return Event(first.namespace, first.session_id, payload, timestamp=datetime.now(UTC))


async def part_rebuild(args: Any) -> dict[str, Any]:
    redis_url = os.environ.get("HELIX_REDIS_URL", "redis://127.0.0.1:6379/0")
    dsn = os.environ.get("HELIX_POSTGRES_DSN", "postgresql://helix:helix@127.0.0.1:5432/helix")
    run = uuid.uuid4().hex[:8]
    ns, prefix = f"bench-facts-{run}", f"bench-facts-{run}"
    turns, groups = history(ns, args.events)
    stand_in = StandIn(0.0)
    table = f"bench_facts_{run}"  # PostgreSQL's tables of this run; it names the view too

    def config(store: str, log_cfg: dict[str, Any]) -> dict[str, Any]:
        memory = {"type": "facts", "namespace": ns, "store": store, "redis_url": redis_url, "dsn": dsn}
        memory.update(table=table, extract=extract_config(stand_in.base_url))
        return {"log": log_cfg, "memory": memory}

    view = select(config("memory", {"type": "embedded"}))[1].view.name
    result: dict[str, Any] = {"rebuild_per_s": {}, "anchor_per_s": {}}
    with tempfile.TemporaryDirectory(prefix="helix-bench-facts-") as tmp:
        log = EmbeddedLog(tmp, fsync=False, topic_prefix=prefix)
        written = await write_history(log, view, turns, groups)
        await log.close()
        codec = Codec()
        data = [codec.encode(e) for e in written]
        result.update(events=len(data), turns=len(turns), batches=len(groups))
        log_cfg = {"type": "embedded", "path": tmp, "topic_prefix": prefix, "fsync": False}
        built: list[tuple[dict[str, Any], str]] = []
        try:
            for store in args.stores.split(","):
                cfg = config(store, log_cfg)
                before = anchor(data)
                if store == "memory":
                    started = time.perf_counter()
                    async with open_memory(cfg, session_id="s0") as mem:
                        rate = round(len(data) / (time.perf_counter() - started))  # the open folded the log
                        started = time.perf_counter()
                        known = await mem.facts()  # type: ignore[attr-defined]
                        result["first_read_s"] = round(time.perf_counter() - started, 3)
                    assert known, "the rebuilt view knows no fact of s0"
                else:
                    report = await rebuild(cfg, switch=False, batch_size=args.batch_size, workers=1)
                    built.append((cfg, report.target))
                    rate = round(report.events_per_second)
                result["anchor_per_s"][store] = round((before + anchor(data)) / 2)
                result["rebuild_per_s"][store] = rate
                print(f"facts rebuild into {store}: {rate:,} events/s", file=sys.stderr)
        finally:
            result["model_calls"] = stand_in.stop()
            await cleanup(built, ns, redis_url, dsn, run)
    return result


async def cleanup(built: list[tuple[dict[str, Any], str]], ns: str, redis_url: str, dsn: str, run: str) -> None:
    import asyncpg
    import redis.asyncio as aioredis

    from projectors.rebuild import drop_target

    for cfg, target in built:
        log_config, part = select(cfg)
        await drop_target(part, log_config, target, [ns])
    client = aioredis.Redis.from_url(redis_url)
    async for key in client.scan_iter(match=f"helix:*{ns}*", count=1000):
        await client.delete(key)
    await client.aclose()
    conn = await asyncpg.connect(dsn)
    try:
        for (name,) in await conn.fetch(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE $1", f"bench_facts_{run}%"
        ):
            await conn.execute(f'DROP TABLE IF EXISTS "{name}"')
    finally:
        await conn.close()


async def main(args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    parts = args.part.split(",")
    if "add" in parts:
        out["add"] = {log: await part_add(args, log) for log in args.log.split(",")}
    if "rebuild" in parts:
        out["rebuild"] = await part_rebuild(args)
    return out


def report(out: dict[str, Any], say: Any = print) -> list[str]:
    """Prints the figures with `say`; the targets missed."""
    misses = []
    for log_kind, a in out.get("add", {}).items():
        say(
            f"add on the {log_kind} log, {a['adds']:,} per config: conversation alone p50 {a['alone_p50_ms']} ms,"
            f" p99 {a['alone_p99_ms']} ms; with a facts view p50 {a['facts_p50_ms']} ms, p99 {a['facts_p99_ms']} ms"
            f" ({a['p99_ratio_pooled']}x pooled)"
        )
        say(
            f"  p99 with / without, round by round: {', '.join(f'{r}x' for r in a['p99_ratio_rounds'])};"
            f" median {a['p99_ratio']}x (target <= {P99_RATIO_TARGET}x)"
        )
        say(
            f"  control, the conversation alone again (p99 {a['control_p99_ms']} ms) / alone: "
            f"{', '.join(f'{r}x' for r in a['control_ratio_rounds'])}; median {a['control_ratio']}x"
            " (what the machine's noise alone gives)"
        )
        if a["p99_ratio"] > P99_RATIO_TARGET:
            misses.append(f"add p99 on {log_kind} with a facts view {a['p99_ratio']}x the conversation alone's")
        if "batches" in a:
            say(
                f"extraction ({a['delay_s']} s stand-in): {a['batches']} batches of {a['turns_per_batch']} turns,"
                f" {a['model_calls']} model calls ({a['calls_per_batch']} per batch; target <= 1),"
                f" {a['facts']} facts, {a['prompt_tokens_per_turn']} prompt tokens per turn"
            )
            if a["calls_per_batch"] > CALLS_PER_BATCH_TARGET:
                misses.append(f"{a['calls_per_batch']} model calls per batch")
    if "rebuild" in out:
        r = out["rebuild"]
        say(
            f"facts rebuild of {r['events']:,} events ({r['batches']:,} FactsExtracted),"
            f" {r['model_calls']} model calls:"
        )
        for store, rate in r["rebuild_per_s"].items():
            near = r["anchor_per_s"][store]
            say(f"  {store:>8}: {rate:,} events/s ({rate / near:.2f}x raw fastavro decode, {near:,}/s)")
            if store == "memory" and "first_read_s" in r:
                say(f"            the first facts() after the open: {r['first_read_s']} s")
            if rate < REBUILD_TARGET_PER_S:
                misses.append(f"facts rebuild into {store}: {rate:,} events/s, target >= {REBUILD_TARGET_PER_S:,}")
        if r["model_calls"]:
            misses.append(f"a rebuild called the model {r['model_calls']} times")
    return misses


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--part", default="add,rebuild")
    p.add_argument("--sessions", type=int, default=20)
    p.add_argument("--turns", type=int, default=40)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--delay", type=float, default=0.5)
    p.add_argument("--pause", type=float, default=0.005, help="seconds between two adds, untimed")
    p.add_argument("--log", default="embedded,kafka", help="the logs the add part runs on")
    p.add_argument("--no-fsync", action="store_true", help="the embedded log without fsync (the disk's noise out)")
    p.add_argument("--events", type=int, default=100_000)
    p.add_argument("--stores", default="memory,redis,postgres")
    p.add_argument("--batch-size", type=int, default=5000)
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args()
    result = asyncio.run(main(args))
    if args.json:
        print(json.dumps(result))
    sys.exit(missed(report(result, (lambda _: None) if args.json else print)))
