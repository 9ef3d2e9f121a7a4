"""Audit of an encrypted deployment, for whoever holds the key: messages as written; `--raw` as stored."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, ToolCall, audit, forget, open_memory
from helix_es.client.runtime import default_runtime
from tests.conftest import unique

ROOT = Path(__file__).resolve().parent.parent
SECRET = "my card is 4111 1111 1111 1111"
CALL = ToolCall("c1", "lookup", '{"card": "4111"}')


@pytest.fixture
async def keyed(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[str]:
    key = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", key)
    for var in ("HELIX_ENCRYPTION_OLD_KEYS", "HELIX_KEY_STORE", "HELIX_KEY_STORE_URL", "HELIX_KEY_CACHE_TTL"):
        monkeypatch.delenv(var, raising=False)
    yield key
    await default_runtime().aclose()


def config(tmp_path: Path, ns: str) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "sliding-window", "window_size": 10, "namespace": ns},
        "memory_middleware": ["encryption"],
    }


async def write(cfg: dict[str, Any], session: str) -> None:
    async with open_memory(cfg, session_id=session) as mem:
        await mem.add(Message("user", SECRET))
        await mem.add(Message("assistant", "", tool_calls=[CALL]))
        await mem.add(Message("tool", '{"ok": true}', tool_call_id="c1"))


async def test_audit_opens_messages_with_the_key_and_raw_shows_them_stored(tmp_path: Path, keyed: str) -> None:
    cfg = config(tmp_path, unique("opened"))
    await write(cfg, "alice")
    report = await audit(cfg, session_id="alice", offset=2)
    added = [e.payload.message for e in report.events if e.type == "MessageAdded"]  # type: ignore[union-attr]
    assert [m.content for m in added] == [SECRET, "", '{"ok": true}']
    assert added[1].tool_calls[0].arguments == CALL.arguments
    assert report.opened and report.sealed is None
    assert report.views is not None and [m.content for m in report.views["sliding-window-10-pairs"]] == [
        SECRET,
        "",
        '{"ok": true}',
    ]
    doc = report.to_json()
    assert doc["opened"] is True and SECRET in json.dumps(doc)

    raw = await audit(cfg, session_id="alice", offset=2, raw=True)
    stored = [e.payload.message for e in raw.events if e.type == "MessageAdded"]  # type: ignore[union-attr]
    assert all(m.content.startswith("helix-enc:v1:") for m in stored)
    assert not raw.opened and SECRET not in json.dumps(raw.to_json())


def _cli(cfg: dict[str, Any], tmp_path: Path, *flags: str, env: dict[str, str]) -> str:
    path = tmp_path / "helix.yaml"
    path.write_text(json.dumps(cfg))
    done = subprocess.run(
        [sys.executable, "-m", "helix_es.cli", "audit", "--config", str(path), "--session", "alice", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_the_cli_shows_plaintext_and_raw_on_request(tmp_path: Path, keyed: str) -> None:
    cfg = config(tmp_path, unique("opened-cli"))
    await write(cfg, "alice")
    env = {**os.environ, "HELIX_ENCRYPTION_KEY": keyed}
    text = _cli(cfg, tmp_path, env=env)
    assert json.dumps(SECRET) in text and "opened with the encryption key" in text
    raw = _cli(cfg, tmp_path, "--raw", "--json", env=env)
    assert SECRET not in raw and "helix-enc:v1:" in raw and json.loads(raw)["opened"] is False
    # Without the key here the operator sees what is stored, and why.
    keyless = {k: v for k, v in env.items() if k != "HELIX_ENCRYPTION_KEY"}
    sealed = json.loads(_cli(cfg, tmp_path, "--json", env=keyless))
    assert sealed["opened"] is False and "HELIX_ENCRYPTION_KEY" in sealed["sealed"]
    assert SECRET not in json.dumps(sealed)


async def test_a_forgotten_session_stays_erased_and_others_open(
    tmp_path: Path, keyed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))
    cfg = config(tmp_path, unique("opened-erased"))
    await write(cfg, "alice")
    await write(cfg, "bob")
    await forget(cfg, session_id="alice", reason="request 9")
    gone = await audit(cfg, session_id="alice", as_of="now")
    assert gone.erasure is not None and SECRET not in json.dumps(gone.to_json())
    assert all(e.erased for e in gone.events if e.type == "MessageAdded")
    kept = await audit(cfg, session_id="bob", as_of="now")
    assert kept.opened and kept.views is not None
    assert [m.content for m in kept.views["sliding-window-10-pairs"]] == [SECRET, "", '{"ok": true}']
