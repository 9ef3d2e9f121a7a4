"""The facts routes of `helix-es serve` (helix_es.service.facts): read, assert, retract, on the embedded log.

In-process apps (httpx over ASGI) as in tests/test_service.py; the facts view's extraction runs in
the server's background (the rules extractor, one turn a batch), as it does in production.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_module, unique

require_module("starlette", "the REST service (helix_es.service.app)")

import httpx  # noqa: E402

from tests.test_service import B_KEY, A, auth, client, embedded, log_namespaces  # noqa: E402

B = auth(B_KEY)
FACTS = {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 1, "idle": 0}}
A_FACT = {"id", "subject", "predicate", "value", "valid_from", "valid_to", "known_from", "known_to", "source", "model"}


def with_facts(tmp_path: Path, namespace: str) -> dict[str, Any]:
    config = embedded(tmp_path)
    config["memory"] = {"type": "composite", "namespace": namespace, "backends": [{"type": "conversation"}, FACTS]}
    return config


async def facts_of(http: httpx.AsyncClient, ns: str, **params: Any) -> list[dict[str, Any]]:
    answer = await http.get(f"/v1/{ns}/facts", params=params, headers=A)
    assert answer.status_code == 200, answer.text
    assert answer.headers["Cache-Control"] == "no-store"
    found: list[dict[str, Any]] = answer.json()["facts"]
    assert set(answer.json()) == {"facts"} and all(set(f) == A_FACT for f in found)
    return found


async def extracted(http: httpx.AsyncClient, ns: str, count: int) -> list[dict[str, Any]]:
    """The facts once the server's extraction worker has found `count` of them (history included)."""
    deadline = time.monotonic() + 20
    while len(found := await facts_of(http, ns, history="true")) < count:
        assert time.monotonic() < deadline, f"the worker extracted {found}"
        await asyncio.sleep(0.05)
    return found


def token_session(token: str) -> str:
    raw: list[Any] = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    return str(raw[3])


async def test_read_assert_and_retract_with_valid_and_known_time(tmp_path: Path) -> None:
    ns = unique("ta")
    async with client(with_facts(tmp_path, ns)) as http:
        said = {"role": "user", "content": "I live in Lisbon", "name": "Ana"}
        assert (await http.post(f"/v1/{ns}/sessions/s1/messages", json=said, headers=A)).status_code == 201
        [lisbon] = await extracted(http, ns, 1)
        assert (lisbon["subject"], lisbon["predicate"], lisbon["value"], lisbon["model"]) == (
            "Ana",
            "lives_in",
            "Lisbon",
            "rules/v1",
        )
        assert lisbon["source"]["session_id"] == "s1" and lisbon["source"]["positions"][0]["offset"] == 0
        assert lisbon["valid_to"] is None and lisbon["known_to"] is None

        # A person's facts: a job, then another one; the first is superseded, history keeps it.
        first = await http.post(
            f"/v1/{ns}/facts",
            json={"subject": "Ana", "predicate": "works at", "value": "Acme", "valid_from": "2024-01-01T00:00:00Z"},
            headers=A,
        )
        assert first.status_code == 201, first.text
        assert first.json() == {"positions": [{"topic": f"helix.memory.{ns}", "partition": 0, "offset": 2}]}
        assert token_session(first.headers["X-Helix-After"]) == "facts"  # corrections: the namespace's `facts`
        second = await http.post(
            f"/v1/{ns}/facts",
            json={
                "subject": "ana",
                "predicate": "works_at",
                "value": "Globex",
                "valid_from": "2025-06-01T02:00:00+02:00",
            },
            headers=A,
        )
        assert second.status_code == 201, second.text
        # read-your-writes on any replica: the write's token
        now = await http.get(f"/v1/{ns}/facts", headers={**A, "X-Helix-After": second.headers["X-Helix-After"]})
        assert [(f["predicate"], f["value"], f["model"]) for f in now.json()["facts"]] == [
            ("lives_in", "Lisbon", "rules/v1"),
            ("works_at", "Globex", None),
        ]
        jobs = await facts_of(http, ns, subject="ANA", predicate="works_at", history="true")
        assert [(f["value"], f["valid_from"], f["valid_to"]) for f in jobs] == [
            ("Acme", "2024-01-01T00:00:00+00:00", "2025-06-01T00:00:00+00:00"),
            ("Globex", "2025-06-01T00:00:00+00:00", None),
        ]
        then = await facts_of(http, ns, predicate="works_at", as_of="2024-07-01T00:00:00+00:00")
        assert [f["value"] for f in then] == ["Acme"]  # valid time: where she worked then
        known = await facts_of(http, ns, predicate="works_at", known_as_of=jobs[0]["known_from"])
        assert [f["value"] for f in known] == ["Acme"]  # known time: before the memory heard of Globex
        assert await facts_of(http, ns, subject="Bob") == []

        # Retract the model's fact: gone from now, closed in history, the reason on the log.
        gone = await http.delete(f"/v1/{ns}/facts/{lisbon['id']}", params={"reason": "she moved"}, headers=A)
        assert gone.status_code == 200, gone.text
        assert gone.json()["positions"][0]["offset"] == 4
        assert [f["value"] for f in await facts_of(http, ns)] == ["Globex"]
        [closed] = await facts_of(http, ns, predicate="lives_in", history="1")
        assert closed["id"] == lisbon["id"] and closed["known_to"] is not None
        audit = (await http.get(f"/v1/{ns}/sessions/facts/audit", headers=A)).json()
        assert [e["type"] for e in audit["events"]] == ["FactAsserted", "FactAsserted", "FactRetracted"]


async def test_bad_input_is_a_422_naming_the_field_and_writes_nothing(tmp_path: Path) -> None:
    ns = unique("ta")
    ok = {"subject": "Ana", "predicate": "likes", "value": "tea"}
    async with client(with_facts(tmp_path, ns)) as http:
        for body, field in [
            ({"subject": "Ana", "predicate": "likes"}, "value"),
            ({**ok, "colour": "red"}, "colour"),
            ({**ok, "subject": "   "}, "subject"),
            ({**ok, "value": "a\x00b"}, "value"),
            ({**ok, "value": 3}, "value"),
            ({**ok, "predicate": "x" * 1001}, "predicate"),
            ({**ok, "valid_from": "2024-01-01T00:00:00"}, "valid_from"),  # no offset
            ({**ok, "valid_from": "yesterday"}, "valid_from"),
            ({**ok, "valid_from": "0001-01-01T00:00:00+01:00"}, "valid_from"),  # year 0 in UTC
            ({**ok, "valid_from": 20240101}, "valid_from"),
            (["Ana", "likes", "tea"], "body"),
        ]:
            answer = await http.post(f"/v1/{ns}/facts", json=body, headers=A)
            assert answer.status_code == 422 and answer.json()["field"] == field, (body, answer.text)
        assert (await http.post(f"/v1/{ns}/facts", content=b"{", headers=A)).status_code == 400
        for params, field in [
            ({"as_of": "2024-13-01T00:00:00Z"}, "as_of"),
            ({"known_as_of": "2024-01-01"}, "known_as_of"),
            ({"history": "maybe"}, "history"),
            ({"subject": " "}, "subject"),
        ]:
            answer = await http.get(f"/v1/{ns}/facts", params=params, headers=A)
            assert answer.status_code == 422 and answer.json()["field"] == field, (params, answer.text)
        unknown = await http.delete(f"/v1/{ns}/facts/0123456789abcdef01234567", headers=A)
        assert unknown.status_code == 422 and unknown.json()["field"] == "fact_id"
        assert (await http.get(f"/v1/{ns}/facts", params={"history": "true"}, headers=A)).json() == {"facts": []}
        assert (await http.get(f"/v1/{ns}/sessions", headers=A)).json()["sessions"] == []  # nothing on the log


async def test_keys_and_namespaces_as_for_every_route(tmp_path: Path) -> None:
    ns = unique("ta")
    config = with_facts(tmp_path, ns)
    body = {"subject": "Ana", "predicate": "likes", "value": "tea"}
    async with client(config) as http:
        fact = await http.post(f"/v1/{ns}/facts", json=body, headers=A)
        [mine] = await facts_of(http, ns)
        for headers, status in [({}, 401), ({"Authorization": "Bearer nope-0123456789"}, 401), (B, 403)]:
            assert (await http.get(f"/v1/{ns}/facts", headers=headers)).status_code == status
            assert (await http.post(f"/v1/{ns}/facts", json=body, headers=headers)).status_code == status
            assert (await http.delete(f"/v1/{ns}/facts/{mine['id']}", headers=headers)).status_code == status
        other = unique("tb")
        assert (await http.post(f"/v1/{other}/facts", json=body, headers=A)).status_code == 403
        assert (await http.get(f"/v1/{other}/facts", headers=A)).status_code == 403
        assert (await http.get("/v1/not a name/facts", headers=A)).status_code == 422
        assert [f["id"] for f in await facts_of(http, ns)] == [mine["id"]]  # nothing was retracted
        # a token of another session is not a token of the facts session
        added = await http.post(f"/v1/{ns}/sessions/s1/messages", json={"role": "user", "content": "hi"}, headers=A)
        wrong = await http.get(f"/v1/{ns}/facts", headers={**A, "X-Helix-After": added.headers["X-Helix-After"]})
        assert wrong.status_code == 400 and wrong.json()["field"] == "X-Helix-After"
        assert fact.status_code == 201
    assert other not in await log_namespaces(config)


async def test_a_memory_without_a_facts_view_says_so(tmp_path: Path) -> None:
    ns = unique("ta")
    async with client(embedded(tmp_path, namespace=ns)) as http:
        read = await http.get(f"/v1/{ns}/facts", headers=A)
        assert read.status_code == 422 and read.json()["field"] == "memory"
        assert "facts view" in read.json()["error"]
        body = {"subject": "Ana", "predicate": "likes", "value": "tea"}
        wrote = await http.post(f"/v1/{ns}/facts", json=body, headers=A)
        assert wrote.status_code == 422 and wrote.json()["field"] == "memory"
        assert (await http.get(f"/v1/{ns}/sessions", headers=A)).json()["sessions"] == []  # nothing written


@pytest.mark.parametrize("store", ["redis", "postgres"])
async def test_the_facts_routes_on_a_store_of_rows(tmp_path: Path, store: str, request: pytest.FixtureRequest) -> None:
    ns = unique("ta")
    where = {"redis_url": request.getfixturevalue("redis_url")} if store == "redis" else {}
    if store == "postgres":
        where = {"dsn": request.getfixturevalue("postgres_dsn")}
    config = embedded(tmp_path)
    config["memory"] = {
        "type": "facts",
        "namespace": ns,
        "store": store,
        "table": unique("facts_svc").replace("-", "_"),
        **where,
    }
    async with client(config) as http:
        body = {"subject": "Ana", "predicate": "speaks", "value": "Portuguese", "valid_from": "2020-01-01T00:00:00Z"}
        assert (await http.post(f"/v1/{ns}/facts", json=body, headers=A)).status_code == 201
        assert (await http.post(f"/v1/{ns}/facts", json={**body, "value": "Danish"}, headers=A)).status_code == 201
        found = await facts_of(http, ns, subject="ana")
        assert sorted(f["value"] for f in found) == ["Danish", "Portuguese"]  # speaks accumulates
        assert all(f["valid_from"] == "2020-01-01T00:00:00+00:00" for f in found)
