"""The benchmarks fail loudly when a target they print is missed: a `MISSED:` line, a status that is not 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_a_rebuild_below_its_target_says_missed_and_exits_3_after_its_figures(
    postgres_dsn: str, redis_url: str, tmp_path: Path
) -> None:
    # 2,000 events cannot reach 50,000/s: start-up, the table and its index cost more than the fold.
    env = {**os.environ, "HELIX_POSTGRES_DSN": postgres_dsn, "HELIX_REDIS_URL": redis_url}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    cmd = [sys.executable, "bench/rebuild.py", "--events", "2000", "--sessions", "20"]
    cmd += ["--views", "long-term-pg", "--log", "embedded", "--json"]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 3, done.stderr[-2000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    rate = figures["rebuild_per_s"]["long-term-pg (embedded)"]
    assert 0 < rate < 50_000
    assert f"MISSED: rebuild long-term-pg (embedded): {rate:,} events/s, target >= 50,000/s" in done.stderr
