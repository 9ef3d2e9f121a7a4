"""Real services for the tests: from HELIX_* variables, else Testcontainers, else skip.

With HELIX_REQUIRE_SERVICES=1 (CI) a missing service fails the run instead of skipping.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable, Iterator
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


def _docker_answers() -> bool:
    try:
        import docker  # testcontainers depends on it

        docker.from_env(timeout=3).ping()
        return True
    except Exception:
        return False


def _missing(what: str, var: str) -> None:
    message = (
        f"{what} is not available: set {var} (eval \"$(scripts/services up)\") "
        "or run a Docker engine for Testcontainers"
    )
    if REQUIRE:
        pytest.fail(message + " [HELIX_REQUIRE_SERVICES=1]", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def containers() -> Iterator[ExitStack]:
    with ExitStack() as stack:
        yield stack


def _service(var: str, what: str, container: str, containers: ExitStack) -> str:
    value = os.environ.get(var)
    if value:
        if not _answers(_hostport(value)):
            _missing(f"{what} at {value}", var)
        return value
    if _docker_answers():
        if container == "redis":
            from testcontainers.redis import RedisContainer

            c = containers.enter_context(RedisContainer("redis:7"))
            return f"redis://{c.get_container_host_ip()}:{c.get_exposed_port(6379)}/0"
        if container == "postgres":
            from testcontainers.postgres import PostgresContainer

            c = containers.enter_context(PostgresContainer("postgres:15", driver=None))
            return c.get_connection_url()
        from testcontainers.kafka import KafkaContainer

        c = containers.enter_context(KafkaContainer("apache/kafka:3.9.1").with_kraft())
        return c.get_bootstrap_server()
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


async def topic_values(bootstrap: str, topic: str, count: int, timeout: float = 30.0) -> list[bytes]:
    """The first `count` record values of a topic, read as another program would (plain aiokafka)."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                                enable_auto_commit=False)
    await consumer.start()
    values: list[bytes] = []
    try:
        while len(values) < count:
            batch = await asyncio.wait_for(consumer.getmany(timeout_ms=1000), timeout)
            values += [r.value for records in batch.values() for r in records if r.value is not None]
    finally:
        await consumer.stop()
    return values


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
