"""`helix-es serve` in its own process on a free port, for the browser tests and bench/screenshots.py."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.conftest import stop

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def served(config: dict[str, Any], keys: dict[str, Any], where: Path, timeout: float = 30) -> Iterator[str]:
    """The server's base URL once /healthz answers; stopped with SIGTERM (killed after 30 s) after the block.

    The config and keys files are written into `where`, and the server's stderr goes to `where/serve.err`
    (a pipe nobody reads would stop the server once its access lines fill it); it runs this checkout's code."""
    (where / "serve.json").write_text(json.dumps(config))  # JSON is YAML
    (where / "keys.json").write_text(json.dumps(keys))
    port = free_port()
    cmd = [sys.executable, "-m", "helix_es.cli", "serve", "--config", str(where / "serve.json")]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--keys", str(where / "keys.json")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    err = (where / "serve.err").open("w")
    proc = subprocess.Popen(cmd, cwd=ROOT, stderr=err, text=True, env=env)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                with urllib.request.urlopen(f"{base}/healthz", timeout=2):
                    break
            except OSError as exc:
                if proc.poll() is not None or time.monotonic() > deadline:
                    proc.kill()
                    proc.wait()
                    stderr = (where / "serve.err").read_text()
                    raise RuntimeError(f"helix-es serve did not come up: {exc}; {stderr}") from exc
                time.sleep(0.1)
        yield base
    finally:
        stop(proc)
        err.close()
