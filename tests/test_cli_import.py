"""`helix-es import`: JSON Lines appended with add_many; a bad line names itself and nothing is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from helix_es import Message, ToolCall, load_config, open_memory
from helix_es.model.events import Event
from helix_es.projection.factory import open_log
from tests.conftest import ROOT, cli, unique

LINES: list[dict[str, Any]] = [
    {"session_id": "s-1", "role": "system", "content": "Be brief."},
    {"session_id": "s-1", "role": "user", "content": "Weather?", "occurred_at": "2019-03-04T07:06:05+02:00"},
    {
        "session_id": "s-1",
        "role": "assistant",
        "content": None,  # OpenAI's tool-call-only message, in OpenAI's tool call shape
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}],
    },
    {"session_id": "s-1", "role": "tool", "content": "-3 C", "tool_call_id": "c1", "metadata": {"src": "api"}},
    {"session_id": "s-2", "role": "user", "content": "other session", "name": "bob"},
    {"session_id": "s-1", "role": "assistant", "content": "Cold."},
]


def write_lines(path: Path, lines: list[Any]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines))
    return path


def config(tmp_path: Path) -> Path:
    path = tmp_path / "helix.json"
    path.write_text(
        json.dumps({"log": {"path": str(tmp_path / "log")}, "memory": {"type": "conversation", "namespace": "x"}})
    )
    return path


async def on_log(cfg: Path, ns: str) -> list[Event]:
    log = open_log(load_config(cfg).log)
    try:
        return [r.event async for r in log.read(ns)]
    finally:
        await log.close()


async def test_a_file_is_imported_in_order_with_a_json_summary(tmp_path: Path) -> None:
    ns = unique("imp")
    cfg = config(tmp_path)
    data = write_lines(tmp_path / "chat.jsonl", [LINES[0], "", *LINES[1:]])  # a blank line is skipped
    code, out, err = await cli("import", str(data), "--config", str(cfg), "--namespace", ns, "--json", "--batch", "2")
    assert code == 0, err
    summary = json.loads(out)
    assert {k: summary[k] for k in ("imported", "namespace", "sessions")} == {
        "imported": 6,
        "namespace": ns,
        "sessions": 2,
    }
    assert summary["seconds"] >= 0
    events = await on_log(cfg, ns)
    assert [(e.session_id, e.payload.message.content) for e in events] == [  # type: ignore[union-attr]
        (line["session_id"], line["content"] or "") for line in LINES
    ]
    doc = json.loads(cfg.read_text())
    doc["memory"]["namespace"] = ns  # the config names another: the import went to --namespace
    async with open_memory(doc, session_id="s-1") as mem:
        got = await mem.get()
    assert got == [
        Message("system", "Be brief."),
        Message("user", "Weather?", occurred_at=datetime(2019, 3, 4, 5, 6, 5, tzinfo=UTC)),
        Message("assistant", "", tool_calls=(ToolCall("c1", "weather", "{}"),)),
        Message("tool", "-3 C", tool_call_id="c1", metadata={"src": "api"}),
        Message("assistant", "Cold."),
    ]


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ({"session_id": "s-1", "role": "user", "content": "x", "occurred_at": "2019-03-04T05:06:05"}, "occurred_at"),
        ({"session_id": "s-1", "role": "robot", "content": "x"}, "role"),
        ({"session_id": "s-1", "role": "user", "content": "x", "colour": "red"}, "colour"),
        ({"role": "user", "content": "no session"}, "session_id"),
        ("{not json", "json"),
    ],
)
async def test_a_bad_line_names_its_number_and_field_and_nothing_is_written(
    tmp_path: Path, bad: Any, says: str
) -> None:
    ns = unique("imp")
    cfg = config(tmp_path)
    data = write_lines(tmp_path / "chat.jsonl", [*LINES[:3], bad, *LINES[3:]])
    code, out, err = await cli("import", str(data), "--config", str(cfg), "--namespace", ns, "--batch", "1")
    assert code == 2, (out, err)
    assert f"line 4: {says}" in err, err
    assert out == ""
    assert await on_log(cfg, ns) == []  # not even the three good lines before it


async def test_session_flag_sets_every_line_and_refuses_a_line_naming_another(tmp_path: Path) -> None:
    ns = unique("imp")
    cfg = config(tmp_path)
    plain = write_lines(
        tmp_path / "plain.jsonl",
        [{"role": "user", "content": "a"}, {"role": "user", "content": "b", "session_id": "s"}],
    )
    code, out, err = await cli(
        "import", str(plain), "--config", str(cfg), "--namespace", ns, "--session", "s", "--json"
    )
    assert code == 0, err
    assert json.loads(out)["sessions"] == 1
    assert [e.session_id for e in await on_log(cfg, ns)] == ["s", "s"]
    code, _, err = await cli("import", str(plain), "--config", str(cfg), "--namespace", ns, "--session", "t")
    assert code == 2 and "line 2: session_id" in err, err
    assert len(await on_log(cfg, ns)) == 2


def test_without_config_it_imports_into_the_embedded_default(tmp_path: Path) -> None:
    data = write_lines(tmp_path / "chat.jsonl", LINES[:2])
    done = subprocess.run(
        [sys.executable, "-m", "helix_es.cli", "import", str(data), "--namespace", "imp-default"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported 2 messages into imp-default (1 sessions)")
    assert (tmp_path / ".helix" / "log" / "helix.memory.imp-default.log").stat().st_size > 0
