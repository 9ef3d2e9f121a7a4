"""LangGraph's own store tests (langgraph-checkpoint 4.3.0's, langgraph-checkpoint-postgres 3.2.0's)
against HelixStore, as `python scripts/langgraph-store-suite` runs them: every one passes, none skips.

The suite's two batch tests put 6,000 and 60,000 ops through Kafka and PostgreSQL one call each, and
one TTL test sleeps 17 s: the whole run takes minutes, hence its own time budget."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(1500)


def test_langgraph_store_suites_pass_in_full(kafka_bootstrap: str, postgres_dsn: str, tmp_path: Path) -> None:
    env = {**os.environ, "HELIX_KAFKA_BOOTSTRAP": kafka_bootstrap, "HELIX_POSTGRES_DSN": postgres_dsn}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    run = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "langgraph-store-suite")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=1400,
    )
    (tmp_path / "suite.log").write_text(run.stdout + run.stderr)
    tail = run.stdout[-3000:]
    totals = re.search(r"langgraph-store-suite: (\d+) passed, (\d+) failed, (\d+) skipped", run.stdout)
    assert totals is not None, tail + run.stderr[-3000:]
    passed, failed, skipped = map(int, totals.groups())
    assert (failed, skipped) == (0, 0) and run.returncode == 0, tail
    # Both suites ran: the in-memory tests on the embedded log and the PostgreSQL ones on Kafka.
    assert passed >= 150, tail
    for part in ("langgraph-checkpoint 4.3.0", "langgraph-checkpoint-postgres 3.2.0"):
        line = next(x for x in run.stdout.splitlines() if x.startswith(part))
        assert re.search(r": [1-9]\d* passed, 0 failed, 0 skipped", line), line
