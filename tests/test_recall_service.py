"""Recall over the wire: REST `/recall` (both forms) and the MCP tool `search_memory`'s hits."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from tests.conftest import unique
from tests.test_mcp import serve
from tests.test_service import A, client

TURNS = [
    ("alice", "Caroline", "I moved to Porto last September after the job offer"),
    ("alice", "Dmitri", "My dog is a husky called Miso"),
    ("bob", "Caroline", "Porto has the best custard tarts"),
]


def vector(tmp_path: Path, namespace: str, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "vector", "search": "hybrid", "namespace": namespace, **memory},
    }


async def fill(http: httpx.AsyncClient, ns: str) -> str:
    token = ""
    for session, who, text in TURNS:
        body = {"role": "user", "content": text, "name": who, "metadata": {"speaker": who}}
        answer = await http.post(f"/v1/{ns}/sessions/{session}/messages", json=body, headers=A)
        assert answer.status_code == 201, answer.text
        token = answer.headers["X-Helix-After"]
    return token


async def test_rest_recall_answers_hits_with_score_session_position_and_time(tmp_path: Path) -> None:
    ns = unique("ta-recall")
    async with client(vector(tmp_path, ns)) as http:
        token = await fill(http, ns)
        answer = await http.get(
            f"/v1/{ns}/sessions/bob/recall",
            params={"q": "Where did Caroline move to?", "limit": 2, "explain": "true"},
            headers={**A, "X-Helix-After": token},
        )
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert (body["namespace"], body["session_id"]) == (ns, "bob")
        hits = body["hits"]
        assert len(hits) == 2
        top = next(h for h in hits if h["message"]["content"] == TURNS[0][2])
        assert top["session_id"] == "alice"
        assert top["position"] == {"topic": f"helix.memory.{ns}", "partition": 0, "offset": 0}
        assert datetime.fromisoformat(top["occurred_at"]) > datetime.now(UTC) - timedelta(minutes=5)
        assert top["explain"]["mode"] == "hybrid" and "keyword" in top["explain"]
        assert isinstance(top["score"], float)

        # Filters: sessions, metadata (deepObject), time; the header form; the old /search shape stays.
        only = await http.get(
            f"/v1/{ns}/recall",
            params=[("q", "Porto"), ("session", "bob"), ("mode", "keyword")],
            headers={**A, "X-Session-ID": "bob"},
        )
        assert [h["session_id"] for h in only.json()["hits"]] == ["bob"]
        by = await http.get(f"/v1/{ns}/sessions/bob/recall", params={"q": "dog", "where[speaker]": "Dmitri"}, headers=A)
        assert [h["message"]["content"] for h in by.json()["hits"]] == [TURNS[1][2]]
        later = await http.get(
            f"/v1/{ns}/sessions/bob/recall",
            params={"q": "Porto", "after": (datetime.now(UTC) + timedelta(hours=1)).isoformat()},
            headers=A,
        )
        assert later.json()["hits"] == []
        old = await http.get(f"/v1/{ns}/sessions/bob/search", params={"q": "Porto", "limit": 5}, headers=A)
        assert set(old.json()) == {"namespace", "session_id", "messages"}


async def test_rest_recall_refuses_bad_options_naming_them(tmp_path: Path) -> None:
    ns = unique("ta-recall")
    async with client(vector(tmp_path, ns)) as http:
        await fill(http, ns)
        url = f"/v1/{ns}/sessions/bob/recall"
        for params, field in [
            ({"q": ""}, "q"),
            ({"q": "x", "after": "yesterday"}, "after"),
            ({"q": "x", "before": "2024-01-01T00:00:00"}, "before"),  # no offset
            ({"q": "x", "mode": "psychic"}, "mode"),
            ({"q": "x", "explain": "maybe"}, "explain"),
            ({"q": "x", "limit": "0"}, "limit"),
            ({"q": "x", "after": "2025-01-02T00:00:00Z", "before": "2025-01-01T00:00:00Z"}, "after"),
        ]:
            answer = await http.get(url, params=params, headers=A)
            assert answer.status_code == 422, (params, answer.text)
            assert answer.json()["field"] == field, answer.text

    window = {
        "log": {"type": "embedded", "path": str(tmp_path / "log2"), "fsync": False},
        "memory": {"type": "sliding-window", "window_size": 5, "namespace": ns},
    }
    async with client(window) as http:
        answer = await http.get(f"/v1/{ns}/sessions/bob/recall", params={"q": "x"}, headers=A)
        assert answer.status_code == 422 and answer.json()["field"] == "memory", answer.text
        assert "vector and long-term" in answer.text


async def test_mcp_search_memory_answers_hits_for_a_view_that_recalls(tmp_path: Path) -> None:
    ns = unique("recall")
    async with serve(vector(tmp_path, ns), tmp_path) as server:
        for session, who, text in TURNS:
            await server.call("add_memory", session_id=session, role="user", content=text, name=who)
        found = await server.call("search_memory", session_id="bob", query="Where did Caroline move?", explain=True)
        assert found["messages"][0]["content"] == TURNS[0][2]
        top = found["hits"][0]
        assert (top["session_id"], top["position"]["offset"]) == ("alice", 0)
        assert top["explain"]["mode"] == "hybrid"
        only_bob = await server.call("search_memory", session_id="bob", query="Porto", sessions=["bob"])
        assert {h["session_id"] for h in only_bob["hits"]} == {"bob"}
        assert "after" in await server.refused("search_memory", session_id="bob", query="Porto", after="soon")
    assert server.exit_code == 0, server.stderr


async def test_a_long_term_view_with_a_recall_index_serves_its_rows_and_its_hits(tmp_path: Path) -> None:
    ns = unique("ta-lt")
    cfg = vector(tmp_path, ns)
    cfg["memory"] = {**cfg["memory"], "type": "long-term"}
    async with client(cfg) as http:
        token = await fill(http, ns)
        after = {**A, "X-Helix-After": token}
        listed = await http.get(f"/v1/{ns}/sessions/bob/messages", headers=after)
        assert [m["content"] for m in listed.json()["messages"]] == [t for _, _, t in TURNS]
        answer = await http.get(f"/v1/{ns}/sessions/bob/recall", params={"q": "husky", "limit": 1}, headers=after)
        assert [h["message"]["content"] for h in answer.json()["hits"]] == [TURNS[1][2]]
