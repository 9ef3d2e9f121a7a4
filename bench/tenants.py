"""Many tenants: one projector process serving 1,000 namespaces while new ones appear.

    python bench/tenants.py [--namespaces 1000] [--partitions 6] [--seconds 60] [--sessions 20] [--pause 0.25]
                            [--projector-nice N] [--json]

Needs HELIX_KAFKA_BOOTSTRAP and HELIX_REDIS_URL. Creates `--namespaces` namespace topics
(`--partitions` each, the log's default is 6) with one add in each, starts a real
`helix-es project` for a sliding window in Redis over all of them (namespace glob), and measures:

1. **start**: how long the projector takes from start until every view checkpoint is at the end;
2. **idle**: the projector's CPU (share of one core, over 20 s, once the partitions that had
   records went back to the idle consumer) and resident memory;
3. **new namespace**: one new namespace per second for `--seconds` seconds; each one's first
   add, until a read-your-writes `get` returns it (topic creation included), next to the anchor:
   creating a topic and a first acked produce with raw aiokafka, in the same run;
4. **existing namespaces under churn**: meanwhile `--sessions` sessions in existing namespaces
   add and `get` in turn (add-to-visible), one turn every `--pause` seconds each (an agent's
   pace), p50 / p99 / max, next to the same before the churn and to raw aiokafka
   produce-to-consume in the same run (target: the p99 under churn <= 2x the raw anchor's p99
   under the same churn);
5. **broker memory**: where the broker listens on this machine, its heap live after a full
   collection (`jcmd`) and its resident memory, before the namespaces and after them: the cost of
   a thousand namespaces at `--partitions` each.

Everything it made (topics, keys) is deleted at the end; its empty consumer group expires.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ProcessPoolExecutor
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, TypeVar

import redis.asyncio as aioredis
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from helix_es import Message, open_memory
from helix_es.log.kafka import TOPIC_CONFIGS
from helix_es.log.live.tiers import IDLE_SECONDS
from projectors import heap
from projectors.lag import lag

T = TypeVar("T")
ROOT = Path(__file__).resolve().parent.parent


def say(text: str) -> None:
    print(f"tenants {time.strftime('%H:%M:%S')}: {text}", file=sys.stderr, flush=True)


def broker_memory(bootstrap: str) -> dict[str, float] | None:
    """The local broker's heap live after a full collection and its resident memory, in MB (None
    where no broker of this machine listens on `bootstrap`'s port, or the JDK's jcmd is missing)."""
    port = bootstrap.split(",")[0].rsplit(":", 1)[-1]
    try:
        listening = subprocess.run(["ss", "-Htlnp", f"sport = :{port}"], capture_output=True, text=True).stdout
        pid = int(re.search(r"pid=(\d+)", listening).group(1))  # type: ignore[union-attr]
        subprocess.run(["jcmd", str(pid), "GC.run"], capture_output=True, timeout=60, check=True)
        info = subprocess.run(["jcmd", str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60).stdout
        heap = int(re.search(r"heap\s+total \d+K, used (\d+)K", info).group(1)) / 1024  # type: ignore[union-attr]
    except (OSError, AttributeError, subprocess.SubprocessError):
        return None
    rss = next(
        int(x.split()[1]) for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:")
    )
    return {"heap_live_mb": heap, "rss_mb": rss / 1024}


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary(samples: list[float]) -> dict[str, float]:
    return {
        "n": len(samples),
        "p50_ms": statistics.median(samples) * 1000,
        "p99_ms": pct(samples, 0.99) * 1000,
        "max_ms": max(samples) * 1000,
    }


class Bench:
    def __init__(self, args: argparse.Namespace, run: str | None = None) -> None:
        self.args = args
        self.bootstrap = os.environ["HELIX_KAFKA_BOOTSTRAP"]
        self.redis_url = os.environ["HELIX_REDIS_URL"]
        run = run or uuid.uuid4().hex[:6]
        self.run = run
        self.prefix = f"bench-tn-{run}"
        self.ns_head = f"tn{run}"
        self.namespaces = [f"{self.ns_head}-{i:04d}" for i in range(args.namespaces)]
        self.new_count = 0
        self.tmp = Path(tempfile.mkdtemp(prefix="helix-tenants-"))

    def memory(self, namespace: str, consistency: str = "read-your-writes") -> dict[str, Any]:
        return {
            "log": {
                "type": "kafka",
                "bootstrap_servers": self.bootstrap,
                "topic_prefix": self.prefix,
                "partitions": self.args.partitions,
            },
            "memory": {
                "type": "sliding-window",
                "window_size": 20,
                "store": "redis",
                "redis_url": self.redis_url,
                "namespace": namespace,
                "read_timeout": 60,
                "consistency": consistency,
            },
        }

    def topic(self, namespace: str) -> str:
        return f"{self.prefix}.{namespace}"

    async def create_topics(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            for start in range(0, len(self.namespaces), 100):
                chunk = self.namespaces[start : start + 100]
                new = [NewTopic(self.topic(ns), self.args.partitions, 1, topic_configs=TOPIC_CONFIGS) for ns in chunk]
                await admin.create_topics(new)
                say(f"created {start + len(chunk)}/{len(self.namespaces)} topics")
        finally:
            await admin.close()

    async def seed(self) -> None:
        """One add in every namespace, so each has a view and a checkpoint."""
        gate = asyncio.Semaphore(50)

        async def one(ns: str) -> None:
            async with gate, open_memory(self.memory(ns, "eventual"), session_id="s0") as mem:
                await mem.add(Message("user", f"hello from {ns}"))

        done = 0
        for start in range(0, len(self.namespaces), 200):
            await asyncio.gather(*(one(ns) for ns in self.namespaces[start : start + 200]))
            done += len(self.namespaces[start : start + 200])
            say(f"seeded {done}/{len(self.namespaces)} namespaces")

    def start_projector(self) -> subprocess.Popen[bytes]:
        cfg = self.memory(f"{self.ns_head}-*")
        path = self.tmp / "projector.json"
        path.write_text(json.dumps(cfg))
        self.config_path = path
        log = open(self.tmp / "projector.log", "wb")  # noqa: SIM115
        nice = self.args.projector_nice
        return subprocess.Popen(
            [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path)],
            cwd=ROOT,
            stderr=log,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,  # its idle watcher child inherits it
        )

    async def caught_up(self, timeout: float) -> float:
        t = time.perf_counter()
        while time.perf_counter() - t < timeout:
            try:
                report = await lag(str(self.config_path))
            except Exception as exc:  # a broker still electing leaders of thousands of new partitions
                say(f"lag not readable yet ({type(exc).__name__}); again")
                continue
            if report.partitions and report.total() == 0:
                return time.perf_counter() - t
            say(f"projector {report.total()} events behind")
            await asyncio.sleep(0.5)
        raise TimeoutError(f"the projector did not catch up in {timeout:.0f} s; see {self.tmp / 'projector.log'}")

    @staticmethod
    def tree(pid: int) -> list[int]:
        """`pid` and its descendants (the projector and its idle partitions' watcher)."""
        out = [pid]
        for task in Path(f"/proc/{pid}/task").iterdir():
            for child in (task / "children").read_text().split():
                out += Bench.tree(int(child))
        return out

    @staticmethod
    def cpu_seconds(pid: int) -> float:
        total = 0.0
        for p in Bench.tree(pid):
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        return total

    @staticmethod
    def rss_mb(pid: int) -> float:
        total = 0.0
        for p in Bench.tree(pid):
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) / 1024
        return total

    async def idle(self, pid: int, seconds: float = 20.0) -> dict[str, float]:
        """CPU (share of one core) and resident memory of the projector's processes together."""
        c0, t0 = self.cpu_seconds(pid), time.perf_counter()
        await asyncio.sleep(seconds)
        cpu = (self.cpu_seconds(pid) - c0) / (time.perf_counter() - t0)
        return {"cpu_share_of_a_core": cpu, "rss_mb": self.rss_mb(pid), "processes": len(self.tree(pid))}

    async def existing(self, stop: asyncio.Event, out: list[float], stack: AsyncExitStack, acked: list[float]) -> None:
        """`--sessions` sessions in existing namespaces, each adding then reading in turn until `stop`:
        add-to-visible into `out`, the add alone (until the log acked it) into `acked`."""
        rng = random.Random(7)
        chosen = rng.sample(self.namespaces, min(self.args.sessions, len(self.namespaces)))
        mems = [await stack.enter_async_context(open_memory(self.memory(ns), session_id="s0")) for ns in chosen]

        async def loop(mem: Any, k: int) -> None:
            i = 0
            while not stop.is_set():
                text = f"turn {k}-{i}"
                t = time.perf_counter()
                await mem.add(Message("user", text))
                acked.append(time.perf_counter() - t)
                got = await mem.get()
                out.append(time.perf_counter() - t)
                assert got[-1].content == text, (got[-1], text)
                i += 1
                await asyncio.sleep(self.args.pause)

        await asyncio.gather(*(loop(m, k) for k, m in enumerate(mems)))

    async def sessions_during(
        self, during: Callable[[asyncio.Event], Awaitable[T]], warm: float = 3.0
    ) -> tuple[list[float], list[float], T]:
        """The existing sessions' add-to-visible and add-alone samples while `during(stop)` runs (it
        may set `stop` itself), from `warm` seconds after they started."""
        async with AsyncExitStack() as stack:
            stop = asyncio.Event()
            seen: list[float] = []
            acked: list[float] = []
            task = asyncio.create_task(self.existing(stop, seen, stack, acked))
            await asyncio.sleep(warm)
            skip, skip_acked = len(seen), len(acked)
            result = await during(stop)
            stop.set()
            await task
        return seen[skip:], acked[skip_acked:], result

    async def new_namespace(self) -> float:
        ns = f"{self.ns_head}-new{self.new_count:04d}"
        self.new_count += 1
        t = time.perf_counter()
        async with open_memory(self.memory(ns), session_id="first") as mem:
            await mem.add(Message("user", f"first words in {ns}"))
            self.added = time.perf_counter() - t
            got = await mem.get()
        took = time.perf_counter() - t
        assert [m.content for m in got] == [f"first words in {ns}"], got
        return took

    async def churn(self, seconds: float) -> list[float]:
        out: list[float] = []
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            t = time.perf_counter()
            out.append(await self.new_namespace())
            say(f"new namespace {len(out)}: added in {self.added * 1000:.0f} ms, visible after {out[-1] * 1000:.0f} ms")
            await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - t)))
        return out

    async def anchor_new_topic(self, n: int = 10) -> list[float]:
        """Raw aiokafka: create a topic and wait for a first acked produce to it."""
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True)
        await admin.start()
        await producer.start()
        out = []
        try:
            for i in range(n):
                topic = f"{self.prefix}-anchor.{i}"
                t = time.perf_counter()
                await admin.create_topics([NewTopic(topic, self.args.partitions, 1, topic_configs=TOPIC_CONFIGS)])
                await producer.send_and_wait(topic, b"first", key=b"k")
                out.append(time.perf_counter() - t)
        finally:
            await producer.stop()
            await admin.close()
        return out

    async def anchor_visible(
        self, n: int = 300, *, name: str = "visible", stop: asyncio.Event | None = None, pause: float = 0.0
    ) -> list[float]:
        """Raw aiokafka produce (acks=all) until a consumer has the record: the add-to-visible floor.
        `n` records one after another, or with `stop` one every `pause` seconds until it is set."""
        topic = f"{self.prefix}-anchor.{name}"
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        await admin.create_topics([NewTopic(topic, 1, 1, topic_configs=TOPIC_CONFIGS)])
        await admin.close()
        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, acks="all", enable_idempotence=True)
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, isolation_level="read_committed")
        await producer.start()
        await consumer.start()
        tp = TopicPartition(topic, 0)
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        waiting: dict[bytes, asyncio.Future[None]] = {}

        async def consume() -> None:
            while True:
                for msgs in (await consumer.getmany(timeout_ms=200)).values():
                    for m in msgs:
                        fut = waiting.pop(m.value, None)
                        if fut is not None and not fut.done():
                            fut.set_result(None)

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.5)
        out = []
        try:
            for i in range(n):
                if stop is not None:
                    if stop.is_set():
                        break
                    await asyncio.sleep(pause)
                payload = f"visible-{i}".encode()
                fut = asyncio.get_running_loop().create_future()
                waiting[payload] = fut
                t = time.perf_counter()
                await producer.send_and_wait(topic, payload, partition=0)
                await asyncio.wait_for(fut, 30)
                out.append(time.perf_counter() - t)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await consumer.stop()
            await producer.stop()
        return out

    async def cleanup(self) -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=self.bootstrap)
        await admin.start()
        try:
            mine = [t for t in await admin.list_topics() if t.startswith(self.prefix)]
            for start in range(0, len(mine), 200):
                await admin.delete_topics(mine[start : start + 200])
        finally:
            await admin.close()
        client = aioredis.from_url(self.redis_url)
        try:
            batch = []
            async for key in client.scan_iter(match=f"helix:memory:{self.ns_head}-*", count=1000):
                batch.append(key)
                if len(batch) >= 1000:
                    await client.delete(*batch)
                    batch.clear()
            if batch:
                await client.delete(*batch)
            async for key in client.scan_iter(match=f"helix:*{self.prefix}*", count=1000):
                await client.delete(key)
        finally:
            await client.aclose()


def churn_elsewhere(args: argparse.Namespace, run: str) -> list[float]:
    """`Bench.churn` in a process of its own (the new namespaces' clients)."""

    async def churn() -> list[float]:
        bench = Bench(args, run)
        # A client that stays up, as an app server does: its connection to Kafka is warm.
        async with open_memory(bench.memory(bench.namespaces[0], "eventual"), session_id="client"):
            return await bench.churn(args.seconds)

    return asyncio.run(churn())


async def main(args: argparse.Namespace) -> dict[str, Any]:
    bench = Bench(args)
    out: dict[str, Any] = {
        "namespaces": args.namespaces,
        "partitions": args.partitions,
        "projector_nice": args.projector_nice,
    }
    projector = None
    try:
        t = time.perf_counter()
        bootstrap = os.environ["HELIX_KAFKA_BOOTSTRAP"]
        out["broker_before"] = broker_memory(bootstrap)
        await bench.create_topics()
        await bench.seed()
        out["broker_after"] = broker_memory(bootstrap)
        # This process's own heap (seeding a thousand namespaces): its collector's full passes
        # would show up in the figures as the store's latency (the projector keeps them short too).
        heap.settle(0)
        say(f"{args.namespaces} namespaces ready in {time.perf_counter() - t:.0f} s; starting the projector")
        projector = bench.start_projector()
        out["start_to_caught_up_s"] = await bench.caught_up(600)
        # Partitions that had records are fetched apart for IDLE_SECONDS after, moved back at a
        # look every third of that (helix_es.log.live.tiers): the idle figure starts after both.
        settled = IDLE_SECONDS * 4 / 3 + 5
        say(f"projector caught up {out['start_to_caught_up_s']:.1f} s after its start; idle for {settled + 20:.0f} s")
        await asyncio.sleep(settled)
        out["idle"] = await bench.idle(projector.pid)
        say(f"idle: {out['idle']['cpu_share_of_a_core'] * 100:.1f}% of a core, {out['idle']['rss_mb']:.0f} MB")
        out["anchor_visible"] = summary(await bench.anchor_visible())
        out["anchor_new_topic"] = summary(await bench.anchor_new_topic())
        calm, calm_acked, _ = await bench.sessions_during(lambda stop: asyncio.sleep(15))
        out["existing_calm"], out["existing_calm_acked"] = summary(calm), summary(calm_acked)
        say(f"existing namespaces, no churn: {out['existing_calm']}")

        async def churn(stop: asyncio.Event) -> tuple[list[float], list[float]]:
            # The broker also applies each new topic to its metadata: raw produce-to-consume beside
            # the sessions, while the namespaces appear, is the floor under churn.
            raw = asyncio.create_task(bench.anchor_visible(10**9, name="churn", stop=stop, pause=0.05))
            # The new namespaces come from another process, as from other clients: creating topics
            # here would hold up this process's sessions, and their figures with it.
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                new = await asyncio.get_running_loop().run_in_executor(pool, churn_elsewhere, args, bench.run)
            stop.set()
            return new, await raw

        busy, busy_acked, (new, raw) = await bench.sessions_during(churn)
        out["new_namespace_first_add_visible"] = summary(new)
        out["existing_under_churn"], out["existing_under_churn_acked"] = summary(busy), summary(busy_acked)
        out["anchor_visible_under_churn"] = summary(raw)
        out["projector_rss_mb_after"] = bench.rss_mb(projector.pid)
    finally:
        if projector is not None:
            projector.send_signal(signal.SIGTERM)
            try:
                projector.wait(60)
            except subprocess.TimeoutExpired:
                projector.kill()
        say("cleaning up")
        await bench.cleanup()
    return out


def report(out: dict[str, Any]) -> str:
    def row(name: str, s: dict[str, float]) -> str:
        return f"| {name} | {s['p50_ms']:.1f} | {s['p99_ms']:.1f} | {s['max_ms']:.1f} | {s['n']} |"

    lines = [
        f"{out['namespaces']} namespaces x {out['partitions']} partitions; projector caught up "
        f"{out['start_to_caught_up_s']:.1f} s after start; idle {out['idle']['cpu_share_of_a_core'] * 100:.1f}% "
        f"of a core, {out['idle']['rss_mb']:.0f} MB resident ({out['projector_rss_mb_after']:.0f} MB at the end); "
        f"projector at nice {out['projector_nice']}",
        "",
        "| figure | p50 ms | p99 ms | max ms | n |",
        "|---|---|---|---|---|",
        row("new namespace: first add visible (one new namespace a second)", out["new_namespace_first_add_visible"]),
        row("anchor: raw create topic + first acked produce", out["anchor_new_topic"]),
        row("existing namespaces: add-to-visible, no new namespaces", out["existing_calm"]),
        row("... of which the add, until the log acked it", out["existing_calm_acked"]),
        row("existing namespaces: add-to-visible while one appears a second", out["existing_under_churn"]),
        row("... of which the add, until the log acked it", out["existing_under_churn_acked"]),
        row("anchor: raw aiokafka produce-to-consume", out["anchor_visible"]),
        row("anchor: the same while one namespace appears a second", out["anchor_visible_under_churn"]),
        "",
        f"existing namespaces under churn, p99 over the raw anchor's under the same churn: "
        f"{out['existing_under_churn']['p99_ms'] / out['anchor_visible_under_churn']['p99_ms']:.2f}x (target <= 2x)",
    ]
    before, after = out.get("broker_before"), out.get("broker_after")
    if before and after:
        per = 1000 / out["namespaces"]
        lines.append(
            f"broker: heap live {before['heap_live_mb']:.0f} -> {after['heap_live_mb']:.0f} MB, resident "
            f"{before['rss_mb']:.0f} -> {after['rss_mb']:.0f} MB; per 1,000 namespaces of {out['partitions']} "
            f"partitions: heap +{(after['heap_live_mb'] - before['heap_live_mb']) * per:.0f} MB, "
            f"resident +{(after['rss_mb'] - before['rss_mb']) * per:.0f} MB"
        )
    else:
        lines.append("broker: memory not measured (no local broker on that port, or no jcmd)")
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--sessions", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.25, help="seconds between a session's turns")
    parser.add_argument(
        "--projector-nice",
        type=int,
        default=0,
        help="the projector's nice value (negative needs root): -10 stands in for the core of its own a "
        "deployment gives it, where here it shares two with the broker and this bench",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(main(args))
    print(json.dumps(result, indent=2) if args.json else report(result))
