"""`helix-es mcp`: a real subprocess spoken to by the `mcp` package's own client (stdio_client + ClientSession).

Each test starts `python -m helix_es.cli mcp --config F` under `sh -c '...; echo $? > rc'`, so the
server's exit code is seen after the client closes its stdin (the client kills a server that has
not exited in time, and then no code is written).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from helix_es.history.audit import audit
from tests.conftest import ROOT, require_module, start_projector, unique

require_module("mcp", "the MCP server (helix_es.service.mcp)")

import mcp.client.stdio  # noqa: E402
from mcp import ClientSession  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp_types import InitializeResult  # noqa: E402

TOOLS = {
    "add_memory": ["session_id", "role"],
    "get_memory": ["session_id"],
    "search_memory": ["session_id", "query"],
    "clear_memory": ["session_id"],
    "audit_session": ["session_id"],
    "get_facts": [],
    "assert_fact": ["subject", "predicate", "value"],
    "retract_fact": ["fact_id"],
}


@pytest.fixture(autouse=True)
def patient_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """The client waits 10 s, not 2, for the server to exit after closing its stdin (it exits in under 1 s
    here, Kafka included), so a loaded machine does not fail `exit_code == 0`; a server that never exits
    is still killed, and then writes no code."""
    monkeypatch.setattr(mcp.client.stdio, "PROCESS_TERMINATION_TIMEOUT", 10.0)


def embedded(tmp_path: Path, namespace: str) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "sliding-window", "window_size": 10, "namespace": namespace},
    }


class Server:
    """A client session with one `helix-es mcp` process; `exit_code` and `stderr` once it is closed."""

    def __init__(self, session: ClientSession, init: InitializeResult, rc: Path, stderr: Path) -> None:
        self.session, self.init, self.rc, self.stderr_path = session, init, rc, stderr

    async def call(self, tool: str, **arguments: Any) -> Any:
        result = await self.session.call_tool(tool, arguments)
        assert not result.is_error, result.content
        text = result.content[0].text  # type: ignore[union-attr]
        assert json.loads(text) == result.structured_content  # the same answer for hosts that read text only
        return result.structured_content

    async def refused(self, tool: str, **arguments: Any) -> str:
        result = await self.session.call_tool(tool, arguments)
        assert result.is_error, result
        text: str = result.content[0].text  # type: ignore[union-attr]
        return text

    @property
    def exit_code(self) -> int | None:
        return int(self.rc.read_text()) if self.rc.exists() else None

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text()


@asynccontextmanager
async def serve(config: dict[str, Any], tmp_path: Path, *flags: str) -> AsyncIterator[Server]:
    tag = uuid.uuid4().hex[:6]
    path, rc, err = tmp_path / f"mcp-{tag}.yaml", tmp_path / f"mcp-{tag}.rc", tmp_path / f"mcp-{tag}.err"
    path.write_text(json.dumps(config))  # JSON is YAML
    cmd = shlex.join([sys.executable, "-m", "helix_es.cli", "mcp", "--config", str(path), *flags])
    params = StdioServerParameters(
        command="/bin/sh", args=["-c", f"{cmd}; echo $? > {shlex.quote(str(rc))}"], cwd=ROOT, env={**os.environ}
    )
    with err.open("w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write), ClientSession(read, write) as session:
            yield Server(session, await session.initialize(), rc, err)


async def test_tools_are_listed_with_their_arguments_and_the_server_exits_0_when_the_client_closes(
    tmp_path: Path, namespace: str
) -> None:
    async with serve(embedded(tmp_path, namespace), tmp_path, "--namespaces", f"{namespace},other-*") as server:
        assert server.init.server_info.name == "helix-es"
        assert f"The default namespace is {namespace!r}; the server serves only {namespace}, other-*." in (
            server.init.instructions or ""
        )
        listed = {t.name: t for t in (await server.session.list_tools()).tools}
        assert {name: listed[name].input_schema.get("required", []) for name in listed} == TOOLS
        add = listed["add_memory"].input_schema["properties"]
        assert add["role"]["enum"] == ["system", "user", "assistant", "tool"]
        assert {"namespace", "content", "name", "tool_calls", "tool_call_id", "metadata", "idempotency_key"} <= set(add)
        assert "occurred_at" in add
        assert all(listed[name].description for name in TOOLS)
        assert all("description" in p for p in add.values())
        assert {"offset", "as_of", "namespace"} <= set(listed["audit_session"].input_schema["properties"])
    assert server.exit_code == 0, server.stderr


async def test_add_get_search_clear_and_audit_on_the_embedded_log(tmp_path: Path, namespace: str) -> None:
    sid = unique("s")
    async with serve(embedded(tmp_path, namespace), tmp_path) as server:
        added = await server.call("add_memory", session_id=sid, role="user", content="Weather in Paris?")
        assert added == {
            "namespace": namespace,
            "session_id": sid,
            "topic": f"helix.memory.{namespace}",
            "partition": 0,
            "offset": 0,
        }
        # Read-your-writes: the add is in the very next read.
        assert (await server.call("get_memory", session_id=sid))["messages"] == [
            {"role": "user", "content": "Weather in Paris?"}
        ]
        call = {"id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'}
        await server.call("add_memory", session_id=sid, role="assistant", tool_calls=[call], namespace=namespace)
        await server.call(
            "add_memory", session_id=sid, role="tool", content="18C", tool_call_id="c1", metadata={"src": "api"}
        )
        await server.call("add_memory", session_id=sid, role="assistant", content="18C and sunny in Paris", name="bot")
        got = (await server.call("get_memory", session_id=sid))["messages"]
        assert got == [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": "18C", "tool_call_id": "c1", "metadata": {"src": "api"}},
            {"role": "assistant", "content": "18C and sunny in Paris", "name": "bot"},
        ]
        found = await server.call("search_memory", session_id=sid, query="sunny", limit=5)
        assert [m["content"] for m in found["messages"]] == ["18C and sunny in Paris"]

        # A retry with the same idempotency key shows once.
        for _ in range(2):
            await server.call("add_memory", session_id=sid, role="user", content="Thanks!", idempotency_key="k-1")
        assert [m["content"] for m in (await server.call("get_memory", session_id=sid))["messages"]].count(
            "Thanks!"
        ) == 1

        cleared = await server.call("clear_memory", session_id=sid)
        assert cleared["offset"] == 6
        assert (await server.call("get_memory", session_id=sid))["messages"] == []

        report = await server.call("audit_session", session_id=sid)
        assert (report["namespace"], report["session_id"]) == (namespace, sid)
        types = [e["type"] for e in report["events"]]
        assert types == ["MessageAdded"] * 6 + ["MemoryCleared"]
        retry = report["events"][5]
        assert (retry["idempotency_key"], retry["duplicate_of"]) == ("k-1", 4)
        cut = await server.call("audit_session", session_id=sid, offset=3)
        assert [len(v) for v in cut["views"].values()] == [4]  # what get() returned before the retry and the clear
        dated = unique("s")
        await server.call(
            "add_memory", session_id=dated, role="user", content="then", occurred_at="2019-03-04T07:06:07+02:00"
        )
        assert (await server.call("get_memory", session_id=dated))["messages"] == [
            {"role": "user", "content": "then", "occurred_at": "2019-03-04T05:06:07+00:00"}
        ]
    assert server.exit_code == 0, server.stderr


async def test_get_assert_and_retract_facts_on_the_embedded_log(tmp_path: Path, namespace: str) -> None:
    facts = {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 1, "idle": 0}}
    config = embedded(tmp_path, namespace)
    config["memory"] = {"type": "composite", "namespace": namespace, "backends": [{"type": "conversation"}, facts]}
    async with serve(config, tmp_path) as server:
        await server.call("add_memory", session_id="s1", role="user", content="I live in Lisbon", name="Ana")
        for _ in range(200):  # the server's extraction worker, in its background
            if (found := (await server.call("get_facts"))["facts"]) or await asyncio.sleep(0.05):
                break
        [lisbon] = found
        assert (lisbon["subject"], lisbon["predicate"], lisbon["value"], lisbon["model"]) == (
            "Ana",
            "lives_in",
            "Lisbon",
            "rules/v1",
        )
        stated = await server.call(
            "assert_fact", subject="Ana", predicate="works at", value="Acme", valid_from="2024-01-01T00:00:00Z"
        )
        assert stated == {
            "namespace": namespace,
            "session_id": "facts",
            "topic": f"helix.memory.{namespace}",
            "partition": 0,
            "offset": 2,
        }
        jobs = (await server.call("get_facts", subject="ana", predicate="works_at", namespace=namespace))["facts"]
        assert [(f["value"], f["valid_from"], f["model"]) for f in jobs] == [
            ("Acme", "2024-01-01T00:00:00+00:00", None)
        ]
        then = await server.call("get_facts", as_of="2023-06-01T00:00:00+00:00")
        assert then == {"namespace": namespace, "facts": []}
        await server.call("retract_fact", fact_id=lisbon["id"], reason="she moved")
        assert [f["value"] for f in (await server.call("get_facts"))["facts"]] == ["Acme"]
        past = (await server.call("get_facts", predicate="lives_in", history=True))["facts"]
        assert [(f["id"], f["known_to"] is not None) for f in past] == [(lisbon["id"], True)]

        assert "tool retract_fact: fact_id: " in await server.refused(
            "retract_fact", fact_id="0123456789abcdef01234567"
        )
        assert "as_of: " in await server.refused("get_facts", as_of="yesterday")
        assert "subject: " in await server.refused("assert_fact", subject=" ", predicate="likes", value="tea")
        late = await server.refused(
            "assert_fact", subject="Ana", predicate="likes", value="tea", valid_from="2024-01-01"
        )
        assert "valid_from: " in late
    assert server.exit_code == 0, server.stderr
    report = await audit(config, session_id="facts", namespace=namespace)
    assert [e.type for e in report.events] == ["FactAsserted", "FactRetracted"]


async def test_facts_tools_on_a_memory_without_a_facts_view_name_memory(tmp_path: Path, namespace: str) -> None:
    async with serve(embedded(tmp_path, namespace), tmp_path) as server:
        assert "get_facts: memory: " in await server.refused("get_facts")
        assert "memory: " in await server.refused("assert_fact", subject="Ana", predicate="likes", value="tea")
    assert server.exit_code == 0, server.stderr


async def test_bad_input_and_a_refused_namespace_are_tool_errors_naming_the_field_and_write_nothing(
    tmp_path: Path,
) -> None:
    tenant = unique("t")
    default, other, outsider = f"{tenant}-a", f"{tenant}-b", unique("x")
    config = embedded(tmp_path, default)
    sid = unique("s")
    async with serve(config, tmp_path, "--namespaces", f"{default},{tenant}-b*") as server:
        bad = [
            ({"role": "bogus", "content": "hi"}, "role"),
            ({"role": "user", "content": ""}, "content"),
            ({"role": "user"}, "content"),
            ({"role": "tool", "content": "42"}, "tool_call_id"),
            ({"role": "user", "content": "hi", "tool_call_id": "c1"}, "tool_call_id"),
            ({"role": "user", "content": "a\x00b"}, "content"),
            (
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "f", "arguments": "{"}]},
                "tool_calls[0].arguments",
            ),
            ({"role": "user", "content": "hi", "idempotency_key": ""}, "idempotency_key"),
            ({"role": "user", "content": "hi", "occurred_at": "2019-03-04T05:06:07"}, "occurred_at"),
            ({"role": "user", "content": "hi", "occurred_at": "last week"}, "occurred_at"),
        ]
        for arguments, field in bad:
            text = await server.refused("add_memory", session_id=sid, **arguments)
            assert field in text, (arguments, text)
        for session in ("", "s{1}", "a\nb"):
            assert "session_id" in await server.refused("add_memory", session_id=session, role="user", content="hi")
            assert "session_id" in await server.refused("get_memory", session_id=session)
        assert "limit" in await server.refused("search_memory", session_id=sid, query="x", limit=0)
        assert "as_of" in await server.refused("audit_session", session_id=sid, as_of="not a time")
        for as_of in ("-999999999d", "0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"):
            text = await server.refused("audit_session", session_id=sid, as_of=as_of)
            assert "as_of: " in text and "year" in text, text
        assert (await server.call("audit_session", session_id=sid))["events"] == []  # nothing was written

        for tool, more in [
            ("add_memory", {"role": "user", "content": "hi"}),
            ("get_memory", {}),
            ("search_memory", {"query": "hi"}),
            ("clear_memory", {}),
            ("audit_session", {}),
        ]:
            text = await server.refused(tool, session_id=sid, namespace=outsider, **more)
            assert text.startswith(f"Error executing tool {tool}: namespace:") and outsider in text
        assert "namespace" in await server.refused("get_memory", session_id=sid, namespace="no/slash")

        # The default namespace and one the glob admits are served, each its own memory.
        await server.call("add_memory", session_id=sid, role="user", content="to a")
        mine = await server.call("add_memory", session_id=sid, role="user", content="to b", namespace=other)
        assert mine["topic"] == f"helix.memory.{other}"
        assert [m["content"] for m in (await server.call("get_memory", session_id=sid))["messages"]] == ["to a"]
        got = await server.call("get_memory", session_id=sid, namespace=other)
        assert [m["content"] for m in got["messages"]] == ["to b"]
    assert server.exit_code == 0, server.stderr
    assert "Tool 'add_memory' failed" in server.stderr  # logs went to stderr; stdout carried the protocol only
    assert (await audit(config, session_id=sid, namespace=outsider)).events == []
    assert not list((tmp_path / "log").glob(f"*{outsider}*"))
    assert [e.type for e in (await audit(config, session_id=sid)).events] == ["MessageAdded"]


def kafka_config(bootstrap: str, redis_url: str, namespace: str) -> dict[str, Any]:
    return {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 2, "topic_prefix": unique("mcp")},
        "memory": {
            "type": "sliding-window",
            "window_size": 10,
            "store": "redis",
            "redis_url": redis_url,
            "namespace": namespace,
            "read_timeout": 60,
        },
    }


async def test_the_same_on_kafka_with_a_redis_view_folded_by_a_projector(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, namespace: str, procs: list[Any]
) -> None:
    config = kafka_config(kafka_bootstrap, redis_url, namespace)
    procs.append(start_projector(config, tmp_path))
    sid = unique("s")
    async with serve(config, tmp_path) as server:
        added = await server.call(
            "add_memory", session_id=sid, role="user", content="I live in Lyon", namespace=namespace
        )
        assert added["topic"] == f"{config['log']['topic_prefix']}.{namespace}"
        # Read-your-writes through the projector: the read waits until the view holds the add.
        assert (await server.call("get_memory", session_id=sid))["messages"] == [
            {"role": "user", "content": "I live in Lyon"}
        ]
        for _ in range(2):
            await server.call(
                "add_memory", session_id=sid, role="assistant", content="Noted: Lyon", idempotency_key="k"
            )
        got = (await server.call("get_memory", session_id=sid))["messages"]
        assert [m["content"] for m in got] == ["I live in Lyon", "Noted: Lyon"]
        found = await server.call("search_memory", session_id=sid, query="Noted")
        assert [m["content"] for m in found["messages"]] == ["Noted: Lyon"]
        await server.call("clear_memory", session_id=sid)
        assert (await server.call("get_memory", session_id=sid))["messages"] == []
        report = await server.call("audit_session", session_id=sid)
        assert [e["type"] for e in report["events"]] == ["MessageAdded"] * 3 + ["MemoryCleared"]
        assert report["events"][2]["duplicate_of"] == report["events"][1]["offset"]
    assert server.exit_code == 0, server.stderr


@pytest.mark.parametrize("flags", [["--namespaces", "bad/ns"], ["--namespaces", ","]])
async def test_a_bad_namespaces_flag_exits_2(tmp_path: Path, flags: list[str]) -> None:
    from tests.conftest import cli

    path = tmp_path / "mcp.yaml"
    path.write_text(json.dumps(embedded(tmp_path, "ns")))
    code, out, err = await cli("mcp", "--config", str(path), *flags)
    assert (code, out) == (2, "")
    assert "--namespaces" in err


def readme_blocks() -> dict[str, str]:
    """The MCP page (docs/integrations/mcp.md): its YAML config, Python client and the output it prints, by fence
    language."""
    section = (ROOT / "docs" / "integrations" / "mcp.md").read_text()
    blocks = section.split("```")[1::2]
    return {block.split("\n", 1)[0] or "output": block.split("\n", 1)[1] for block in blocks}


async def test_the_readme_example_runs_as_printed(tmp_path: Path) -> None:
    blocks = readme_blocks()
    (tmp_path / "helix.yaml").write_text(blocks["yaml"])
    host = json.loads(blocks["json"])["mcpServers"]["memory"]
    assert host["command"] == "helix-es" and host["args"][:3] == ["mcp", "--config", "/abs/path/helix.yaml"]
    # This checkout's helix-es rather than an installed one: the same command, run by this Python.
    code = blocks["python"].replace(
        'command="helix-es", args=["mcp",',
        f'command={sys.executable!r}, env={{"PYTHONPATH": {str(ROOT)!r}}}, args=["-m", "helix_es.cli", "mcp",',
    )
    assert code != blocks["python"]
    (tmp_path / "example.py").write_text(code)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "example.py", cwd=tmp_path, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
    )
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err.decode()[-3000:]
    assert out.decode() == blocks["output"]
