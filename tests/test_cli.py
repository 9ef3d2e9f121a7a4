"""The command line, as a person runs it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require_module, unique

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "helix_es.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_help_and_version() -> None:
    out = run("--help")
    assert out.returncode == 0
    for command in ("demo", "project", "lag", "audit", "history", "facts", "forget", "mcp", "serve"):
        assert command in out.stdout
    assert run("--version").stdout.startswith("helix-es ")
    assert run("no-such-command").returncode == 2


def test_demo_shows_views_and_history(tmp_path: Path) -> None:
    out = run("demo", "--path", str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "get" in out.stdout and "search" in out.stdout
    assert "alice's history" in out.stdout
    assert (tmp_path / "helix.memory.demo.log").stat().st_size > 0


def test_demo_json_and_history_agree(tmp_path: Path) -> None:
    out = run("demo", "--path", str(tmp_path), "--json")
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    turns = [x for x in lines if x["kind"] == "turn"]
    assert len(turns) == 9
    last_alice = [t for t in turns if t["session"] == "alice"][-1]
    assert last_alice["get"][0]["role"] == "system"  # the window kept the system message
    # Turn 9 evicts the weather call: its result goes with it (docs/views/index.md, "Tool calls in views"),
    # so the window of 4 holds 3 and no tool result leads it.
    assert [m["role"] for m in last_alice["get"]] == ["system", "assistant", "user", "assistant"]
    assert all(t["get"][1:2] == [] or t["get"][1]["role"] != "tool" for t in turns)
    # It ends with what the facts view learned (the rules extractor) and one supersession.
    facts = {(x["predicate"], x["value"]) for x in lines if x["kind"] == "fact"}
    assert {("lives_in", "Porto"), ("job_title", "nurse"), ("likes", "hiking")} <= facts
    (moved,) = [x for x in lines if x["kind"] == "supersession"]
    assert [(f["value"], f["valid_to"] is None) for f in moved["history"]] == [("Lisbon", False), ("Porto", True)]

    cfg = tmp_path / "helix.yaml"
    cfg.write_text(f"log: {{path: {tmp_path}}}\nmemory: {{type: conversation, namespace: demo}}\n")
    hist = run("history", "--config", str(cfg), "--session", "bob", "--json")  # `history` is `audit`
    assert hist.returncode == 0, hist.stderr
    events = json.loads(hist.stdout)["events"]
    assert [e["type"] for e in events] == ["MessageAdded", "MessageAdded", "MemoryCleared"]
    assert events[0]["payload"]["message"]["content"] == "Remind me to book the Bergen train."


def test_config_errors_exit_2_and_say_what_to_fix(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("memory: {type: sliding-window, window_size: -3}\n")
    out = run("audit", "--config", str(cfg), "--session", "s")
    assert out.returncode == 2
    assert "memory.window_size" in out.stderr
    cfg.write_text("memory: {type: conversation}\n")
    out = run("project", "--config", str(cfg))
    assert out.returncode == 2
    assert "log: kafka" in out.stderr


def test_facts_as_a_table_and_as_json_asserted_and_retracted(tmp_path: Path) -> None:
    from helix_es import Message
    from helix_es.sync import open_memory

    ns = unique("cli-facts")
    facts = {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 100, "idle": 3600}}
    config = {"log": {"path": str(tmp_path / "log")}, "memory": {"type": "composite", "namespace": ns}}
    config["memory"]["backends"] = [{"type": "conversation"}, facts]
    cfg = tmp_path / "helix.json"
    cfg.write_text(json.dumps(config))
    with open_memory(config, session_id="s1") as mem:
        mem.add(Message("user", "I live in Lisbon", name="Ana"))
        assert mem.run(lambda m: m.backend.extract(ns)) == 1  # type: ignore[attr-defined]

    listed = run("facts", "--config", str(cfg))
    assert listed.returncode == 0, listed.stderr
    head, *rows = listed.stdout.splitlines()[2:]
    assert head.split() == ["SUBJECT", "PREDICATE", "VALUE", "VALID", "(UTC)", "KNOWN", "(UTC)", "BY", "ID"]
    assert rows[0].split()[:3] == ["Ana", "lives_in", "Lisbon"] and rows[0].split()[-2] == "rules/v1"
    lisbon = rows[0].split()[-1]

    stated = run("facts", "--config", str(cfg), "--assert", "Ana", "works at", "Acme", "--valid-from", "2024-01-01")
    assert stated.returncode == 0, stated.stderr
    assert stated.stdout.startswith(f'asserted Ana "works at" Acme in {ns} (session facts), at helix.memory.{ns}[0]@2')
    gone = run("facts", "--config", str(cfg), "--retract", lisbon, "--reason", "she moved", "--json")
    assert json.loads(gone.stdout) == {"positions": [{"topic": f"helix.memory.{ns}", "partition": 0, "offset": 3}]}

    now = run("facts", "--config", str(cfg), "--subject", "ana")
    assert [line.split()[:3] for line in now.stdout.splitlines()[3:]] == [["Ana", "works_at", "Acme"]]
    assert "2024-01-01 00:00:00 → now" in now.stdout and " person " in now.stdout
    every = run("facts", "--config", str(cfg), "--history", "--json")
    with open_memory(config, session_id="s2") as mem:
        assert json.loads(every.stdout) == {"facts": [f.to_json() for f in mem.facts(history=True)]}
    assert [f["known_to"] is None for f in json.loads(every.stdout)["facts"]] == [True, False]
    before = run("facts", "--config", str(cfg), "--as-of", "2023-06-01", "--json")
    assert json.loads(before.stdout) == {"facts": []}

    for flags, says in [
        (["--retract", "no-such-id"], "--retract: no fact"),
        (["--as-of", "yesterday"], "--as-of: cannot read"),
        (["--assert", "Ana", "likes", " "], "--assert: "),
        (["--reason", "why"], "--reason: goes with --retract"),
        (["--namespace", "not a name"], "--namespace: "),
    ]:
        out = run("facts", "--config", str(cfg), *flags)
        assert out.returncode == 2 and says in out.stderr, (flags, out.stderr)
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps({**config, "memory": {"type": "conversation", "namespace": ns}}))
    out = run("facts", "--config", str(plain))
    assert out.returncode == 2 and "memory: view conversation holds no facts" in out.stderr


async def test_forget_of_a_thread_takes_namespace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--namespace` names the thread's namespace over the file's (a projector file's may be a pattern)."""
    require_module("langgraph", "LangGraph")
    from helix_es.client.runtime import default_runtime
    from helix_es.integrations.langgraph import HelixSaver
    from tests import langgraph_graph as lg

    lg.use_file_keys(monkeypatch, str(tmp_path / "keys"))
    namespace, thread = unique("ns"), unique("t")
    sealed = {"log": {"path": str(tmp_path / "log")}, "checkpoints": {"namespace": namespace, "encryption": True}}
    try:
        async with HelixSaver.from_config(sealed) as saver:
            await lg.ascenario(saver, thread)
        other = tmp_path / "other.yaml"
        other.write_text(json.dumps({**sealed, "checkpoints": {**sealed["checkpoints"], "namespace": "elsewhere"}}))
        out = run("forget", "--config", str(other), "--session", thread, "--namespace", namespace, "--yes")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(f"forgot {namespace}/{thread}: destroyed 1 key(s)"), out.stdout
        async with HelixSaver.from_config(sealed) as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": thread}}) is None
    finally:
        await default_runtime().aclose()
