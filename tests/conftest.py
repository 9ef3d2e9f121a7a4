"""Real services for the tests: from HELIX_* variables, else Testcontainers, else skip.

With HELIX_REQUIRE_SERVICES=1 (CI) a missing service fails the run instead of skipping.
Testcontainers runs HELIX_KAFKA_IMAGE, HELIX_REDIS_IMAGE and HELIX_POSTGRES_IMAGE (default
apache/kafka:3.9.1, redis:7, pgvector/pgvector:pg15; `scripts/images build` makes offline ones).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.model_server"]

REQUIRE = os.environ.get("HELIX_REQUIRE_SERVICES") == "1"
ROOT = Path(__file__).resolve().parent.parent
RUN = uuid.uuid4().hex[:8]  # keeps this run's topics, keys and rows apart from earlier runs


def _answers(hostport: str) -> bool:
    host, _, port = hostport.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=2):
            return True
    except OSError:
        return False


def _hostport(url: str) -> str:
    rest = url.split("://", 1)[-1].split("/", 1)[0]
    return rest.rsplit("@", 1)[-1]


_docker: bool | None = None


def _docker_answers() -> bool:
    global _docker
    if _docker is None:
        try:
            import docker  # testcontainers depends on it

            docker.from_env(timeout=3).ping()
            _docker = True
        except Exception:
            _docker = False
    return _docker


def _missing(what: str, var: str) -> None:
    message = (
        f'{what} is not available: set {var} (eval "$(scripts/services up)") or run a Docker engine for Testcontainers'
    )
    if REQUIRE:
        pytest.fail(message + " [HELIX_REQUIRE_SERVICES=1]", pytrace=False)
    pytest.skip(message)


def require_module(module: str, why: str) -> None:
    """Import `module` or skip, saying `why`; with HELIX_REQUIRE_SERVICES=1 fail instead: nothing skips
    silently in CI. (Only tests/test_containers.py may skip there: CI installs the `local` extra too.)"""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        message = f"{why}: cannot import {module} ({exc})"
        if REQUIRE:
            pytest.fail(message + " [HELIX_REQUIRE_SERVICES=1]", pytrace=False)
        pytest.skip(message)


# Which path served each service ("env" or the image Testcontainers ran): tests/test_containers.py.
SERVED: dict[str, str] = {}
IMAGES = {  # service: (variable naming the image, default: the official image)
    "kafka": ("HELIX_KAFKA_IMAGE", "apache/kafka:3.9.1"),
    "redis": ("HELIX_REDIS_IMAGE", "redis:7"),
    "postgres": ("HELIX_POSTGRES_IMAGE", "pgvector/pgvector:pg15"),
}


def image(service: str) -> str:
    var, default = IMAGES[service]
    return os.environ.get(var) or default


@pytest.fixture(scope="session")
def containers() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _kafka_answers(host: str, port: int) -> bool:
    """A Metadata request (v4) listing a broker: the broker is serving, not just listening."""
    try:
        with socket.create_connection((host, port), timeout=3) as s:
            s.settimeout(3)
            body = struct.pack(">hhih", 3, 4, 7, 5) + b"helix" + struct.pack(">ib", -1, 0)
            s.sendall(struct.pack(">i", len(body)) + body)
            data = b""
            while len(data) < 16:
                chunk = s.recv(4096)
                if not chunk:
                    return False
                data += chunk
            _size, correlation, _throttle, brokers = struct.unpack(">iiii", data[:16])
            return correlation == 7 and brokers >= 1
    except OSError:
        return False


def _kafka_container(containers: ExitStack, name: str) -> str:
    """Apache Kafka in KRaft mode, configured the way the apache/kafka image is (KAFKA_* variables).

    The broker must advertise the host's address and the port Docker published, known only
    once the container runs: it waits for a file naming them (as Testcontainers' own
    KafkaContainer does), then starts the image's /etc/kafka/docker/run.
    """
    import tarfile
    import time
    from io import BytesIO

    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    env = {
        "CLUSTER_ID": "4L6g3nShT-eMCtK--X86sw",
        "KAFKA_NODE_ID": "1",
        "KAFKA_PROCESS_ROLES": "broker,controller",
        "KAFKA_CONTROLLER_QUORUM_VOTERS": "1@localhost:9093",
        "KAFKA_CONTROLLER_LISTENER_NAMES": "CONTROLLER",
        "KAFKA_LISTENERS": "PLAINTEXT://0.0.0.0:9092,BROKER://0.0.0.0:19092,CONTROLLER://0.0.0.0:9093",
        "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "PLAINTEXT:PLAINTEXT,BROKER:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "KAFKA_INTER_BROKER_LISTENER_NAME": "BROKER",
        "KAFKA_AUTO_CREATE_TOPICS_ENABLE": "false",
        "KAFKA_NUM_PARTITIONS": "1",
        "KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR": "1",
        "KAFKA_OFFSETS_TOPIC_NUM_PARTITIONS": "1",
        "KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_MIN_ISR": "1",
        "KAFKA_TRANSACTION_STATE_LOG_NUM_PARTITIONS": "1",
        "KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS": "0",
        "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
        "KAFKA_HEAP_OPTS": "-Xmx512m -Xms256m",
    }
    start = "/tmp/helix-kafka.env"
    c = (
        DockerContainer(name)
        .with_exposed_ports(9092)
        .with_command(
            ["sh", "-c", f"while [ ! -f {start} ]; do sleep 0.1; done; . {start}; exec /etc/kafka/docker/run"]
        )
    )
    for key, value in env.items():
        c.with_env(key, value)
    containers.enter_context(c)
    host, port = c.get_container_host_ip(), int(c.get_exposed_port(9092))
    script = f"export KAFKA_ADVERTISED_LISTENERS=PLAINTEXT://{host}:{port},BROKER://localhost:19092\n".encode()
    with BytesIO() as archive:
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo(start.rsplit("/", 1)[1])
            info.size, info.mode, info.mtime = len(script), 0o644, int(time.time())
            tar.addfile(info, BytesIO(script))
        c.get_wrapped_container().put_archive("/tmp", archive.getvalue())
    LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(180).wait_until_ready(c)
    deadline = time.monotonic() + 60
    while not _kafka_answers(host, port):
        if time.monotonic() > deadline:
            raise TimeoutError(f"Kafka in {name} logged its start but does not answer on {host}:{port}")
        time.sleep(0.2)
    return f"{host}:{port}"


def _container(service: str, containers: ExitStack) -> str:
    name = image(service)
    if service == "redis":
        try:
            from testcontainers.community.redis import RedisContainer
        except ImportError:  # testcontainers < 4.13
            from testcontainers.redis import RedisContainer

        c = containers.enter_context(RedisContainer(name))
        return f"redis://{c.get_container_host_ip()}:{c.get_exposed_port(6379)}/0"
    if service == "postgres":
        try:
            from testcontainers.community.postgres import PostgresContainer
        except ImportError:
            from testcontainers.postgres import PostgresContainer

        pg = PostgresContainer(name, username="helix", password="helix", dbname="helix", driver=None)
        return containers.enter_context(pg).get_connection_url()
    return _kafka_container(containers, name)


def _service(var: str, what: str, container: str, containers: ExitStack) -> str:
    value = os.environ.get(var)
    if value:
        if not _answers(_hostport(value)):
            _missing(f"{what} at {value}", var)
        SERVED[container] = "env"
        return value
    if _docker_answers():
        try:
            value = _container(container, containers)
        except Exception as e:
            message = f"{what}: Testcontainers could not start {image(container)}: {type(e).__name__}: {e}"
            if REQUIRE:
                pytest.fail(message + " [HELIX_REQUIRE_SERVICES=1]", pytrace=False)
            pytest.skip(message)
        SERVED[container] = image(container)
        return value
    _missing(what, var)
    raise AssertionError("unreachable")


@pytest.fixture(scope="session")
def redis_url(containers: ExitStack) -> str:
    return _service("HELIX_REDIS_URL", "Redis", "redis", containers)


@pytest.fixture(scope="session")
def postgres_dsn(containers: ExitStack) -> str:
    return _service("HELIX_POSTGRES_DSN", "PostgreSQL", "postgres", containers)


@pytest.fixture(scope="session")
def kafka_bootstrap(containers: ExitStack) -> Iterator[str]:
    bootstrap = _service("HELIX_KAFKA_BOOTSTRAP", "Kafka", "kafka", containers)
    yield bootstrap
    asyncio.run(_delete_run_topics(bootstrap))


async def _delete_run_topics(bootstrap: str) -> None:
    """Test topics only: a shared dev broker should not grow with every run."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        mine = [t for t in await admin.list_topics() if RUN in t]
        if mine:
            await admin.delete_topics(mine)
    finally:
        await admin.close()


def unique(prefix: str) -> str:
    return f"{prefix}-{RUN}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def session_id() -> str:
    return unique("s")


@pytest.fixture
def namespace() -> str:
    return unique("ns")


async def wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float = 30.0, what: str = "condition") -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not await predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        await asyncio.sleep(0.05)


class Deadline:
    """One overall bound for a polling loop: `check()` raises once `seconds` have passed since it was made."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds, self.what = seconds, what
        self.at = time.monotonic() + seconds

    def left(self) -> float:
        return max(0.0, self.at - time.monotonic())

    def check(self, detail: str = "") -> None:
        if time.monotonic() > self.at:
            suffix = f": {detail}" if detail else ""
            raise AssertionError(f"timed out after {self.seconds}s waiting for {self.what}{suffix}")


async def topic_records(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[Any]:
    """The first `count` records (aiokafka ConsumerRecords) of a topic, read as another program would
    (plain aiokafka), within `timeout` seconds overall."""
    return await _read_topic(bootstrap, topic, count, timeout, lambda r: True, "records")


async def topic_values(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[bytes]:
    """The first `count` record values of a topic, read as another program would (plain aiokafka),
    within `timeout` seconds overall (tombstones are left out, and do not count)."""
    found = await _read_topic(bootstrap, topic, count, timeout, lambda r: r.value is not None, "record values")
    return [r.value for r in found]


async def _read_topic(
    bootstrap: str, topic: str, count: int, timeout: float, keep: Callable[[Any], bool], what: str
) -> list[Any]:
    from aiokafka import AIOKafkaConsumer

    deadline = Deadline(timeout, f"{count} {what} on {topic}")
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    await asyncio.wait_for(consumer.start(), timeout)
    records: list[Any] = []
    try:
        while len(records) < count:
            deadline.check(f"{len(records)} so far")
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=500), deadline.left() + 1)
            records += [r for rs in batch.values() for r in rs if keep(r)]
    finally:
        await consumer.stop()
    return records


async def cli(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """`helix-es ...` in its own process, while this one keeps serving its memories."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "helix_es.cli",
        *args,
        cwd=ROOT,
        env={**os.environ},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


def start_projector(config: dict[str, Any], tmp_path: Path, *, batch_size: int = 50) -> subprocess.Popen[str]:
    """`helix-es project` in its own process, as a deployment runs it."""
    path = tmp_path / f"projector-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(json.dumps(config))  # JSON is YAML
    cmd = [sys.executable, "-m", "helix_es.cli", "project", "--config", str(path), "--batch-size", str(batch_size)]
    return subprocess.Popen(cmd, cwd=ROOT, stderr=subprocess.PIPE, text=True, env={**os.environ})


def stop(proc: subprocess.Popen[str]) -> None:
    """SIGTERM, as a deployment stops it; killed if it does not drain in 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    """Projector processes a test starts; stopped (SIGTERM, then SIGKILL) when it ends."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        stop(proc)


def copy_always(monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL stores write every append by COPY, as they do for big batches (rebuilds)."""
    from helix_es.stores.postgres import rows
    from helix_es.stores.postgres import views as postgres

    monkeypatch.setattr(postgres, "COPY_ROWS", 1)
    monkeypatch.setattr(rows, "COPY_ROWS", 1)


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[str]:
    """The 3-broker KRaft cluster `scripts/services kafka-cluster up` starts (scripts/test does, with
    `up --kafka-cluster`): HELIX_KAFKA_CLUSTER_BOOTSTRAP, every broker answering. No Testcontainers
    path: the fault tests SIGKILL its nodes through scripts/services, which knows their pids."""
    value = os.environ.get("HELIX_KAFKA_CLUSTER_BOOTSTRAP", "")
    brokers = [b for b in value.split(",") if b]
    down = [b for b in brokers if not _kafka_answers(*_split_hostport(b))]
    if len(brokers) < 3 or down:
        message = (
            f"a 3-broker Kafka cluster is not available (HELIX_KAFKA_CLUSTER_BOOTSTRAP={value!r}, not answering: "
            f'{down}): eval "$(scripts/services kafka-cluster up)"'
        )
        if REQUIRE:
            pytest.fail(message + " [HELIX_REQUIRE_SERVICES=1]", pytrace=False)
        pytest.skip(message)
    yield value
    asyncio.run(_delete_run_topics(value))


def _split_hostport(hostport: str) -> tuple[str, int]:
    host, _, port = hostport.rpartition(":")
    return host.strip("[]") or "127.0.0.1", int(port)


@pytest.fixture(scope="session")
def redis_cluster_url() -> str:
    """A Redis Cluster (3 masters, 3 replicas): HELIX_REDIS_CLUSTER_URL, else the one
    `scripts/services redis-cluster up` starts (or finds) on loopback, so CI needs no extra step."""
    value = os.environ.get("HELIX_REDIS_CLUSTER_URL")
    if value:
        if not _answers(_hostport(value)):
            _missing(f"Redis Cluster at {value}", "HELIX_REDIS_CLUSTER_URL")
        return value
    import shutil

    if not shutil.which("redis-server"):
        _missing("Redis Cluster (no redis-server to start one)", "HELIX_REDIS_CLUSTER_URL")
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "services"), "redis-cluster", "up"], capture_output=True, text=True, timeout=120
    )
    if done.returncode != 0:
        _missing(
            f"Redis Cluster (scripts/services redis-cluster up: {done.stderr.strip()[-300:]})",
            "HELIX_REDIS_CLUSTER_URL",
        )
    return done.stdout.strip().rpartition("=")[2]


async def members(kafka: str, group: str, topic: str, partitions: int) -> dict[str, set[int]]:
    """The group's members (static ones are named after their instance id) and the partitions of `topic`
    each folds: the group deals shards (`helix_es.log.live.shards`), each partition belongs to one."""
    from aiokafka.admin import AIOKafkaAdminClient
    from aiokafka.coordinator.protocol import ConsumerProtocolMemberAssignment

    from helix_es.model import names

    admin = AIOKafkaAdminClient(bootstrap_servers=kafka)
    await admin.start()
    try:
        [described] = await admin.describe_consumer_groups([group])
        [(_, _, state, _, _, found)] = described.groups
        if state != "Stable":
            return {}
        out = {}
        for member_id, _, _, _, assignment in found:
            parts = ConsumerProtocolMemberAssignment.decode(assignment).assignment if assignment else []
            shards = {p for _, ps in parts for p in ps}
            out[member_id] = {p for p in range(partitions) if names.shard_of(topic, p, names.SHARDS) in shards}
        return out
    finally:
        await admin.close()


@pytest.fixture
def master() -> bytes:
    """A fresh master key for the encryption middleware."""
    return os.urandom(32)


@pytest.fixture
async def key_env(monkeypatch: pytest.MonkeyPatch, master: bytes) -> AsyncIterator[bytes]:
    """The master in the environment; each test picks its store. Shared providers are closed after."""
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(master).decode())
    monkeypatch.delenv("HELIX_ENCRYPTION_OLD_KEYS", raising=False)
    monkeypatch.delenv("HELIX_KEY_STORE", raising=False)
    monkeypatch.delenv("HELIX_KEY_STORE_URL", raising=False)
    monkeypatch.delenv("HELIX_KEY_CACHE_TTL", raising=False)
    yield master
    from helix_es.client.runtime import default_runtime

    await default_runtime().aclose()
