"""store: file: memory that survives restarts with no server, plus a JSON export people can read."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helix_es import ConfigError, load_config, open_memory

ROOT = Path(__file__).resolve().parent.parent


async def test_file_memory_survives_a_restart_and_exports_json(tmp_path: Path) -> None:
    path = tmp_path / "memory" / "{session_id}.json"
    cfg = {"memory": {"type": "sliding-window", "window_size": 2, "store": "file", "file_path": str(path)}}
    code = (
        "import asyncio\n"
        "from helix_es import Message, open_memory\n"
        "async def main():\n"
        f"    async with open_memory({cfg!r}, session_id='cli') as mem:\n"
        "        for t in ('first', 'second', 'third'):\n"
        "            await mem.add(Message('user', t))\n"
        "asyncio.run(main())\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT)
    export = json.loads((tmp_path / "memory" / "cli.json").read_text())
    assert export["session_id"] == "cli"
    assert [m["content"] for m in export["messages"]] == ["second", "third"]
    assert (tmp_path / "memory" / "log" / "helix.memory.default.log").stat().st_size > 0

    async with open_memory(cfg, session_id="cli") as mem:  # a new process: rebuilt from the log file
        assert [m.content for m in await mem.get()] == ["second", "third"]
        await mem.clear()
    assert json.loads((tmp_path / "memory" / "cli.json").read_text())["messages"] == []


def test_file_store_needs_the_embedded_log() -> None:
    with pytest.raises(ConfigError, match=r"memory\.store"):
        load_config({"log": {"type": "kafka"}, "memory": {"store": "file", "file_path": "a.json"}})
    with pytest.raises(ConfigError) as err:
        load_config({"memory": {"store": "file", "file_path": "notes.txt"}})
    assert err.value.field == "memory.file_path"
    assert load_config({"memory": {"store": "file"}}).log.path == str(Path(".helix/memory/log"))
