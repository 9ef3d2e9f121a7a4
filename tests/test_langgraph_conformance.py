"""langgraph-checkpoint-conformance on HelixSaver: every capability, base and extended, must pass."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_module, start_projector

require_module("langgraph.checkpoint.conformance", "the LangGraph checkpointer conformance suite")

from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402

from helix_es.client.runtime import default_runtime  # noqa: E402
from helix_es.integrations.langgraph import HelixSaver  # noqa: E402
from tests.langgraph_graph import use_file_keys  # noqa: E402

EVERY = sorted(c.value for c in ALL_CAPABILITIES)


@pytest.fixture
async def file_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[None]:
    use_file_keys(monkeypatch, str(tmp_path / "keys"))
    yield
    await default_runtime().aclose()


async def conform(name: str, config: dict[str, Any]) -> None:
    """Run the whole suite on savers of `config` and fail on any capability not detected or not passed."""

    @checkpointer_test(name=name)
    async def factory() -> AsyncIterator[HelixSaver]:
        async with HelixSaver.from_config(config) as saver:
            yield saver

    report = await validate(factory)
    outcome = {cap: (r.detected, r.passed, r.tests_passed, r.tests_failed) for cap, r in report.results.items()}
    failures = {cap: r.failures for cap, r in report.results.items() if r.failures}
    assert sorted(outcome) == EVERY, outcome
    assert all(detected and passed for detected, passed, _, _ in outcome.values()), (outcome, failures)
    assert all(n > 0 for _, _, n, _ in outcome.values()), outcome


async def test_embedded_log_memory_view(tmp_path: Path, namespace: str) -> None:
    await conform(
        "helix-embedded",
        {
            "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
            "checkpoints": {"namespace": namespace},
        },
    )


def kafka_config(tmp_path: Path, namespace: str, checkpoints: dict[str, Any]) -> dict[str, Any]:
    return {
        "log": {"type": "kafka", "partitions": 3},
        "checkpoints": {"namespace": namespace, "read_timeout": 60, **checkpoints},
    }


async def test_kafka_log_postgres_view(
    tmp_path: Path, namespace: str, kafka_bootstrap: str, postgres_dsn: str, procs: list[Any]
) -> None:
    config = kafka_config(tmp_path, namespace, {"store": "postgres", "dsn": postgres_dsn})
    procs.append(start_projector(config, tmp_path))  # `helix-es project` folds the checkpoints: mapping
    await conform("helix-kafka-postgres", config)


async def test_kafka_log_redis_view(
    tmp_path: Path, namespace: str, kafka_bootstrap: str, redis_url: str, procs: list[Any]
) -> None:
    config = kafka_config(tmp_path, namespace, {"store": "redis", "redis_url": redis_url})
    procs.append(start_projector(config, tmp_path))
    await conform("helix-kafka-redis", config)


async def test_embedded_log_sealed_values(tmp_path: Path, namespace: str, file_keys: None) -> None:
    """With `encryption: true` every value is sealed with its thread's key: the suite passes the same."""
    log = {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False}
    await conform("helix-embedded-sealed", {"log": log, "checkpoints": {"namespace": namespace, "encryption": True}})
