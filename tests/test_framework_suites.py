"""The frameworks' own tests pass against the adapters: `scripts/framework-suites` runs the OpenAI Agents
SDK's session tests on HelixSession and langchain-core's chat history tests on HelixChatMessageHistory
(pinned sdists, downloaded once into a cache; only the construction of the object under test changes).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def suites(*args: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, str(ROOT / "scripts" / "framework-suites"), *args]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    return done.stdout


def counts(out: str, line: str) -> tuple[int, int, int]:
    found = re.search(re.escape(line) + r": (\d+) passed, (\d+) failed, (\d+) skipped", out)
    assert found, out[-3000:]
    passed, failed, skipped = (int(n) for n in found.groups())
    return passed, failed, skipped


def test_the_frameworks_own_suites_pass_embedded() -> None:
    out = suites("--backend", "embedded")
    # Every test of the chosen files ran but those EXCLUDED names, with its reason: a suite that lost
    # tests (an import that failed, a file the sdist no longer has) would show fewer.
    assert counts(out, "openai-agents 0.24.0 (embedded)") == (74, 0, 0)
    assert counts(out, "langchain-core 1.8.3 (embedded)") == (28, 0, 0)


# On Kafka each test's database is a namespace with a projector of its own: about 1.6 s a test here,
# so CI runs the tests that cross threads, loops and runners (`python scripts/framework-suites` runs all).
ON_KAFKA = "concurrent or run_sync or hitl"


@pytest.mark.usefixtures("kafka_bootstrap", "redis_url")
def test_the_agents_sdk_suite_passes_on_kafka_and_redis() -> None:
    out = suites("--backend", "kafka-redis", "--suite", "agents", "-k", ON_KAFKA)
    assert counts(out, "openai-agents 0.24.0 (kafka-redis)") == (15, 0, 0)


@pytest.mark.usefixtures("kafka_bootstrap", "redis_url")
def test_langchains_async_history_tests_pass_on_kafka_and_redis() -> None:
    # A history built inside async code on Kafka starts its projector without waiting on helix-es's
    # loop: langchain-core's blockbuster fixture failed 4 of these when it waited (`python
    # scripts/framework-suites --backend kafka-redis --suite langchain` runs all 28).
    out = suites("--backend", "kafka-redis", "--suite", "langchain", "-k", "async")
    assert counts(out, "langchain-core 1.8.3 (kafka-redis)") == (10, 0, 0)
