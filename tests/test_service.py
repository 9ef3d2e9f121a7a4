"""`helix-es serve`: the REST service against real logs and stores.

In-process apps (httpx over ASGI, the app's lifespan run around each) for most routes; real
`helix-es serve` processes on a free port for the start, SIGTERM, keys file and the two-replica
read-your-writes test (one process, one in-process app, one Kafka log, a Redis view, a projector).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from helix_es.config import load_config
from helix_es.history.audit import audit
from helix_es.projection.factory import open_log
from tests.conftest import ROOT, cli, require_module, start_projector, unique
from tests.served import free_port

require_module("starlette", "the REST service (helix_es.service.app)")
require_module("uvicorn", "helix-es serve")

import httpx  # noqa: E402

from helix_es.service.app import Options, build_app  # noqa: E402
from helix_es.service.keys import Keys  # noqa: E402

A_KEY, B_KEY, ADMIN_KEY, HASHED_KEY = (
    "key-tenant-a-0123456789",
    "key-tenant-b-0123456789",
    "key-admin-0123456789ab",
    "key-hashed-0123456789",
)
KEYS: dict[str, Any] = {
    A_KEY: ["ta-*"],
    B_KEY: ["tb-*"],
    ADMIN_KEY: {"namespaces": ["*"], "admin": True},
    "sha256:" + hashlib.sha256(HASHED_KEY.encode()).hexdigest(): ["ta-*"],
}


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


A, ADMIN = auth(A_KEY), auth(ADMIN_KEY)


def embedded(tmp_path: Path, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {"type": "sliding-window", "window_size": 10, "namespace": "ta-default", **memory},
    }


def kafka(bootstrap: str, redis_url: str, prefix: str, **memory: Any) -> dict[str, Any]:
    return {
        "log": {"type": "kafka", "bootstrap_servers": bootstrap, "partitions": 2, "topic_prefix": prefix},
        "memory": {
            "type": "sliding-window",
            "window_size": 10,
            "store": "redis",
            "redis_url": redis_url,
            "namespace": "ta-*",  # one server and one projector for every tenant-a namespace
            "read_timeout": 60,
            **memory,
        },
    }


@asynccontextmanager
async def client(config: dict[str, Any], **options: Any) -> AsyncIterator[httpx.AsyncClient]:
    lag = options.pop("lag", None)
    app = build_app(load_config(config), Keys.parse(KEYS), Options(**options), lag=lag)
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://service", timeout=120) as http:
            yield http


def contents(response: httpx.Response) -> list[str]:
    assert response.status_code == 200, response.text
    return [m["content"] for m in response.json()["messages"]]


async def log_namespaces(config: dict[str, Any]) -> list[str]:
    log = open_log(load_config(config).log)
    try:
        return await log.namespaces()
    finally:
        await log.close()


# -- the table ---------------------------------------------------------------------------------------


async def test_every_route_of_the_table_on_the_embedded_log(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    config = embedded(tmp_path)
    base = f"/v1/{ns}/sessions/{sid}"
    async with client(config) as http:
        added = await http.post(f"{base}/messages", json={"role": "user", "content": "Weather in Paris?"}, headers=A)
        assert added.status_code == 201, added.text
        assert added.json() == {"positions": [{"topic": f"helix.memory.{ns}", "partition": 0, "offset": 0}]}
        assert added.headers["X-Helix-After"] and added.headers["Cache-Control"] == "no-store"
        assert contents(await http.get(f"{base}/messages", headers=A)) == ["Weather in Paris?"]  # read-your-writes

        call = {"id": "c1", "name": "weather", "arguments": '{"city": "Paris"}'}
        batch = {
            "messages": [
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "18C", "tool_call_id": "c1", "metadata": {"src": "api"}},
                {"role": "assistant", "content": "18C and sunny in Paris", "name": "bot"},
            ]
        }
        added = await http.post(f"{base}/messages", json=batch, headers=A)
        assert [p["offset"] for p in added.json()["positions"]] == [1, 2, 3]
        got = await http.get(f"{base}/messages", headers=A)
        assert got.json() == {
            "namespace": ns,
            "session_id": sid,
            "messages": [
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "content": "18C", "tool_call_id": "c1", "metadata": {"src": "api"}},
                {"role": "assistant", "content": "18C and sunny in Paris", "name": "bot"},
            ],
        }
        found = await http.get(f"{base}/search", params={"q": "sunny", "limit": 5}, headers=A)
        assert contents(found) == ["18C and sunny in Paris"]

        other = unique("s")
        await http.post(f"/v1/{ns}/sessions/{other}/messages", json={"role": "user", "content": "hi"}, headers=A)
        cleared = await http.delete(f"{base}/messages", headers=A)
        assert cleared.status_code == 200 and cleared.json()["positions"][0]["offset"] == 5
        assert contents(await http.get(f"{base}/messages", headers=A)) == []

        listed = (await http.get(f"/v1/{ns}/sessions", headers=A)).json()
        assert listed["namespace"] == ns
        assert [(s["session_id"], s["events"]) for s in listed["sessions"]] == [(sid, 5), (other, 1)]  # newest first
        assert all(s["first_time"] <= s["last_time"] for s in listed["sessions"])

        reports = []
        for params in ({}, {"offset": "2"}):
            report = await http.get(f"{base}/audit", params=params, headers=A)
            assert report.status_code == 200, report.text
            reports.append(report.json())
        assert [e["type"] for e in reports[0]["events"]] == ["MessageAdded"] * 4 + ["MemoryCleared"]
        assert [len(v) for v in reports[1]["views"].values()] == [3]  # what get() returned at offset 2
    # The audit is exactly `helix-es audit --json`'s report, with and without a cut (the embedded log
    # has one writer: the command runs once the server has stopped).
    path = tmp_path / "helix.json"
    path.write_text(json.dumps({**config, "memory": {**config["memory"], "namespace": ns}}))
    for report, flags in zip(reports, ([], ["--offset", "2"]), strict=True):
        code, out, err = await cli("audit", "--config", str(path), "--session", sid, "--json", *flags)
        assert code == 0, err
        assert report == json.loads(out)


async def test_the_header_form_names_the_session_in_the_configured_header(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    async with client(embedded(tmp_path)) as http:
        headers = {**A, "X-Session-ID": sid}
        assert (
            await http.post(f"/v1/{ns}/messages", json={"role": "user", "content": "hello"}, headers=headers)
        ).status_code == 201
        assert contents(await http.get(f"/v1/{ns}/messages", headers=headers)) == ["hello"]
        # the same session as the path form names
        assert contents(await http.get(f"/v1/{ns}/sessions/{sid}/messages", headers=A)) == ["hello"]
        assert contents(await http.get(f"/v1/{ns}/search", params={"q": "hell"}, headers=headers)) == ["hello"]
        assert (await http.delete(f"/v1/{ns}/messages", headers=headers)).status_code == 200
        assert contents(await http.get(f"/v1/{ns}/messages", headers=headers)) == []
        missing = await http.get(f"/v1/{ns}/messages", headers=A)
        assert (missing.status_code, missing.json()["field"]) == (422, "X-Session-ID")
    async with client(embedded(tmp_path / "2", session_id_header="X-Conversation")) as http:
        headers = {**A, "X-Conversation": sid}
        assert (
            await http.post(f"/v1/{ns}/messages", json={"role": "user", "content": "x"}, headers=headers)
        ).status_code == 201
        assert contents(await http.get(f"/v1/{ns}/messages", headers=headers)) == ["x"]


async def test_an_idempotency_key_makes_a_retry_show_once(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    base = f"/v1/{ns}/sessions/{sid}/messages"
    async with client(embedded(tmp_path)) as http:
        for _ in range(2):
            one = await http.post(
                base, json={"role": "user", "content": "once"}, headers={**A, "Idempotency-Key": "k1"}
            )
            assert one.status_code == 201
            batch = {"messages": [{"role": "user", "content": "b0"}, {"role": "user", "content": "b1"}]}
            assert (await http.post(base, json=batch, headers={**A, "Idempotency-Key": "k2"})).status_code == 201
        assert contents(await http.get(base, headers=A)) == ["once", "b0", "b1"]
        report = (await http.get(f"/v1/{ns}/sessions/{sid}/audit", headers=A)).json()
        assert [e["idempotency_key"] for e in report["events"]] == ["k1", "k2", "k2#1"] * 2
        empty = await http.post(base, json={"role": "user", "content": "x"}, headers={**A, "Idempotency-Key": " "})
        assert (empty.status_code, empty.json()["field"]) == (422, "Idempotency-Key")


async def test_occurred_at_is_taken_with_its_offset_given_back_in_utc_and_refused_without_one(
    tmp_path: Path,
) -> None:
    ns, sid = unique("ta"), unique("s")
    base = f"/v1/{ns}/sessions/{sid}/messages"
    async with client(embedded(tmp_path)) as http:
        batch = {
            "messages": [
                {"role": "user", "content": "then", "occurred_at": "2019-03-04T07:06:07.5+02:00"},
                {"role": "assistant", "content": "now"},
                {"role": "user", "content": "zulu", "occurred_at": "2019-03-04T05:06:08Z"},
            ]
        }
        assert (await http.post(base, json=batch, headers=A)).status_code == 201
        assert (await http.get(base, headers=A)).json()["messages"] == [
            {"role": "user", "content": "then", "occurred_at": "2019-03-04T05:06:07.500000+00:00"},
            {"role": "assistant", "content": "now"},
            {"role": "user", "content": "zulu", "occurred_at": "2019-03-04T05:06:08+00:00"},
        ]
        for at in ("2019-03-04T05:06:07", "yesterday", 1551675967, "0001-01-01T00:00:00+01:00"):
            bad = {"messages": [{"role": "user", "content": "ok"}, {"role": "user", "content": "x", "occurred_at": at}]}
            answer = await http.post(base, json=bad, headers=A)
            assert (answer.status_code, answer.json()["field"]) == (422, "messages[1].occurred_at"), answer.text
        assert len((await http.get(base, headers=A)).json()["messages"]) == 3  # nothing of the bad batches


async def test_bad_input_is_refused_naming_the_field_and_writes_nothing(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    config = embedded(tmp_path)
    base = f"/v1/{ns}/sessions/{sid}"
    async with client(config, max_body=2000) as http:
        bad: list[tuple[Any, int, str]] = [
            ({"role": "bogus", "content": "hi"}, 422, "role"),
            ({"role": "user", "content": ""}, 422, "content"),
            ({"role": "user"}, 422, "content"),
            ({"role": "user", "content": 5}, 422, "content"),
            ({"role": "tool", "content": "42"}, 422, "tool_call_id"),
            ({"role": "user", "content": "hi", "colour": "red"}, 422, "colour"),
            ({"role": "user", "content": "a\x00b"}, 422, "content"),
            ({"role": "user", "content": "hi", "metadata": {"k": 1}}, 422, "metadata['k']"),
            (
                {"role": "assistant", "content": "", "tool_calls": [{"id": "c", "name": "f", "arguments": "{"}]},
                422,
                "tool_calls[0].arguments",
            ),
            (
                {"messages": [{"role": "user", "content": "ok"}, {"role": "x", "content": "no"}]},
                422,
                "messages[1].role",
            ),
            ({"messages": []}, 422, "messages"),
            ([1, 2], 422, "body"),
            ({"role": "user", "content": "x" * 3000}, 413, "body"),
        ]
        for body, status, field in bad:
            answer = await http.post(f"{base}/messages", json=body, headers=A)
            assert (answer.status_code, answer.json().get("field")) == (status, field), (body, answer.text)
        not_json = await http.post(f"{base}/messages", content=b"{nope", headers=A)
        assert (not_json.status_code, not_json.json()["field"]) == (400, "body")
        for path, params, field in [
            (f"{base}/search", {"q": "x", "limit": "0"}, "limit"),
            (f"{base}/search", {}, "q"),
            (f"{base}/audit", {"offset": "-1"}, "offset"),
            (f"{base}/audit", {"as_of": "not a time"}, "as_of"),
            (f"/v1/{ns}/sessions/s%7B1%7D/messages", {}, "session_id"),
            ("/v1/ta-bad!ns/sessions/s/messages", {}, "namespace"),
        ]:
            answer = await http.get(path, params=params, headers=A)
            assert (answer.status_code, answer.json()["field"]) == (422, field), (path, answer.text)
        token = await http.get(f"{base}/messages", headers={**A, "X-Helix-After": "garbage"})
        assert (token.status_code, token.json()["field"]) == (400, "X-Helix-After")
        assert (await http.get("/no/such/route")).status_code == 404
        assert (await http.put(f"{base}/messages", headers=A)).status_code == 405
    assert (await audit(config, session_id=sid, namespace=ns)).events == []  # nothing was written


# -- keys and tenants ------------------------------------------------------------------------------


def operations(ns: str, sid: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Every /v1 route, as (method, path, httpx arguments)."""
    message = {"json": {"role": "user", "content": "intruder"}}
    session = {"headers": {"X-Session-ID": sid}}
    return [
        ("POST", f"/v1/{ns}/sessions/{sid}/messages", message),
        ("GET", f"/v1/{ns}/sessions/{sid}/messages", {}),
        ("DELETE", f"/v1/{ns}/sessions/{sid}/messages", {}),
        ("GET", f"/v1/{ns}/sessions/{sid}/search", {"params": {"q": "x"}}),
        ("GET", f"/v1/{ns}/sessions/{sid}/audit", {}),
        ("POST", f"/v1/{ns}/sessions/{sid}/forget", {}),
        ("GET", f"/v1/{ns}/sessions", {}),
        ("POST", f"/v1/{ns}/messages", {**message, **session}),
        ("GET", f"/v1/{ns}/messages", session),
        ("DELETE", f"/v1/{ns}/messages", session),
        ("GET", f"/v1/{ns}/search", {**session, "params": {"q": "x"}}),
    ]


async def send(
    http: httpx.AsyncClient, method: str, path: str, key: dict[str, str], more: dict[str, Any]
) -> httpx.Response:
    headers = {**more.get("headers", {}), **key}
    return await http.request(method, path, **{**more, "headers": headers})


async def test_a_tenant_never_reaches_another_tenants_namespace_and_nothing_is_written(tmp_path: Path) -> None:
    theirs, sid = unique("tb"), unique("s")
    config = embedded(tmp_path)
    async with client(config) as http:
        for method, path, more in operations(theirs, sid):
            for key in (A, auth(HASHED_KEY)):
                refused = await send(http, method, path, key, more)
                assert (refused.status_code, refused.json()["field"]) == (403, "namespace"), (method, path)
            for key in ({}, {"Authorization": "Bearer nope-nope-nope-nope"}, {"Authorization": f"Basic {A_KEY}"}):
                refused = await send(http, method, path, key, more)
                assert refused.status_code == 401, (method, path, key)
                assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        # a tenant's own namespace, with its plain or hashed key; forget needs an admin key
        mine = unique("ta")
        for key in (A, auth(HASHED_KEY)):
            assert (
                await http.post(
                    f"/v1/{mine}/sessions/{sid}/messages", json={"role": "user", "content": "hi"}, headers=key
                )
            ).status_code == 201
        not_admin = await http.post(f"/v1/{mine}/sessions/{sid}/forget", headers=A)
        assert not_admin.status_code == 403 and "admin" in not_admin.json()["error"]
        assert theirs not in await log_namespaces(config)  # nothing was written, not even an empty log
        # the namespaces list shows each key only its own; B's log exists once B writes
        assert (
            await http.post(
                f"/v1/{theirs}/sessions/{sid}/messages", json={"role": "user", "content": "b"}, headers=auth(B_KEY)
            )
        ).status_code == 201
        for key, seen in ((A, [mine]), (auth(B_KEY), [theirs]), (ADMIN, sorted([mine, theirs]))):
            listed = await http.get("/v1/namespaces", headers=key)
            assert listed.status_code == 200 and [n for n in listed.json()["namespaces"] if n != "ta-default"] == seen
        assert (await http.get("/v1/namespaces")).status_code == 401
        await http.delete(f"/v1/{theirs}/sessions/{sid}/messages", headers=auth(B_KEY))
    # nothing A tried was written: B's own add and clear are B's log's only events
    assert [e.type for e in (await audit(config, session_id=sid, namespace=theirs)).events] == [
        "MessageAdded",
        "MemoryCleared",
    ]
    assert mine in await log_namespaces(config)


async def test_forget_is_for_admin_keys_and_shreds_the_session(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from helix_es.client.runtime import default_runtime

    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    monkeypatch.setenv("HELIX_KEY_STORE", "file")
    monkeypatch.setenv("HELIX_KEY_STORE_URL", str(tmp_path / "keys"))
    ns, sid = unique("ta"), unique("s")
    config = {**embedded(tmp_path), "memory_middleware": ["encryption"]}
    base = f"/v1/{ns}/sessions/{sid}"
    try:
        async with client(config) as http:
            await http.post(f"{base}/messages", json={"role": "user", "content": "my IBAN is NO93"}, headers=A)
            assert contents(await http.get(f"{base}/messages", headers=A)) == ["my IBAN is NO93"]
            assert (await http.post(f"{base}/forget", headers=A)).status_code == 403
            done = await http.post(f"{base}/forget", json={"reason": "ticket 9"}, headers=ADMIN)
            assert done.status_code == 200, done.text
            result = done.json()
            assert (result["namespace"], result["session_id"], result["events"]) == (ns, sid, 1)
            assert result["erased_keys"] and not result["already_erased"]
            assert contents(await http.get(f"{base}/messages", headers=A)) == []
            report = (await http.get(f"{base}/audit", headers=A)).json()
            assert report["erased"]["reason"] == "ticket 9"
            again = await http.post(f"{base}/forget", headers=ADMIN)
            assert again.json()["already_erased"] is True
            bad = await http.post(f"{base}/forget", json={"allow_unshreddable": "yes"}, headers=ADMIN)
            assert (bad.status_code, bad.json()["field"]) == (422, "allow_unshreddable")
        async with client(embedded(tmp_path / "plain")) as http:  # no encryption: nothing to shred
            await http.post(f"{base}/messages", json={"role": "user", "content": "plain"}, headers=A)
            refused = await http.post(f"{base}/forget", headers=ADMIN)
            assert refused.status_code == 409 and "encryption" in refused.json()["error"]
    finally:
        await default_runtime().aclose()


# -- operations ------------------------------------------------------------------------------------


async def test_metrics_openapi_and_the_console_mount(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    console = tmp_path / "console"
    console.mkdir()
    (console / "index.html").write_text("<!doctype html><title>helix-es</title>")
    async with client(embedded(tmp_path), console=console) as http:
        base = f"/v1/{ns}/sessions/{sid}"
        await http.post(
            f"{base}/messages",
            json={"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
            headers=A,
        )
        await http.get(f"{base}/messages", headers=A)
        await http.get(f"{base}/search", params={"q": "a"}, headers=A)
        await http.get(f"/v1/{ns}/sessions", headers=auth(B_KEY))
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        text = (await http.get("/metrics")).text
        route = "/v1/{namespace}/sessions/{session_id}/messages"
        assert f'helix_http_requests_total{{route="{route}",method="POST",status="201"}} 1' in text
        assert 'helix_http_requests_total{route="/v1/{namespace}/sessions",method="GET",status="403"} 1' in text
        assert f'helix_http_request_duration_seconds_bucket{{route="{route}",method="GET",le="+Inf"}} 1' in text
        assert f'helix_http_request_duration_seconds_count{{route="{route}",method="POST"}} 1' in text
        assert "helix_memory_adds_total 2\n" in text and "helix_memory_reads_total 2\n" in text
        assert "helix_memory_sessions_open 1\n" in text
        assert ns not in text and sid not in text  # routes are templates: no series per tenant or session

        page = await http.get("/ui/")
        assert page.status_code == 200 and "helix-es" in page.text
        assert page.headers["Content-Security-Policy"] == "default-src 'self'"

        doc = (await http.get("/openapi.json")).json()
        assert doc["openapi"].startswith("3.1")
        app_routes = http._transport.app.routes  # type: ignore[attr-defined]
        for served in app_routes:
            path = served.path if served.path != "/ui" else "/ui/"
            methods = {m.lower() for m in (getattr(served, "methods", None) or {"GET"})} - {"head"}
            assert methods <= set(doc["paths"][path]), (path, methods)
        assert len(doc["paths"]) == len({r.path for r in app_routes})


async def test_readyz_fails_while_a_store_is_down(
    tmp_path: Path, postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = embedded(tmp_path)["log"]
    monkeypatch.delenv("HELIX_REDIS_URL", raising=False)  # it would win over the config's address
    down = {"log": log, "memory": {"type": "conversation", "store": "redis", "redis_url": "redis://127.0.0.1:1/0"}}
    async with client(down) as http:
        answer = await http.get("/readyz")
        assert answer.status_code == 503
        report = answer.json()
        assert report["ready"] is False and report["log"] == "ok"
        assert report["stores"]["conversation"] != "ok"
    up = {"log": log, "memory": {"type": "conversation", "store": "postgres", "dsn": postgres_dsn}}
    async with client(up) as http:
        answer = await http.get("/readyz")
        assert answer.status_code == 200, answer.text
        ns, sid = unique("ta"), unique("s")
        await http.post(f"/v1/{ns}/sessions/{sid}/messages", json={"role": "user", "content": "in postgres"}, headers=A)
        assert contents(await http.get(f"/v1/{ns}/sessions/{sid}/messages", headers=A)) == ["in postgres"]


async def test_readyz_fails_while_the_projector_lags_past_the_bound(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, procs: list[Any]
) -> None:
    from helix_es.cli.serve import _views_lag

    config = kafka(kafka_bootstrap, redis_url, unique("svc"))
    path = tmp_path / "helix.json"
    path.write_text(json.dumps(config))
    ns, sid = unique("ta"), unique("s")
    async with client(config, lag=_views_lag(str(path)), lag_bound=0) as http:
        added = await http.post(f"/v1/{ns}/sessions/{sid}/messages", json={"role": "user", "content": "hi"}, headers=A)
        assert added.status_code == 201
        answer = await http.get("/readyz")
        assert answer.status_code == 503, answer.text
        assert answer.json()["behind"] == ["sliding-window-10-pairs"]
        procs.append(start_projector(config, tmp_path))
        assert contents(await http.get(f"/v1/{ns}/sessions/{sid}/messages", headers=A)) == ["hi"]
        deadline = time.monotonic() + 30
        while (answer := await http.get("/readyz")).status_code != 200:
            assert time.monotonic() < deadline, answer.text
            await asyncio.sleep(0.5)
        assert answer.json()["lag"] == {"sliding-window-10-pairs": 0}
        assert 'helix_projector_lag{view="sliding-window-10-pairs"} 0' in (await http.get("/metrics")).text


# -- real processes ---------------------------------------------------------------------------------


@contextmanager
def serve(
    tmp_path: Path, config: dict[str, Any], *flags: str, keys: Any = KEYS
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """`helix-es serve` on a free port, run in `tmp_path`, answering /healthz; SIGTERMed at the end if still running."""
    tag = unique("srv")
    (tmp_path / f"{tag}.json").write_text(json.dumps(config))
    (tmp_path / "keys.json").write_text(json.dumps(keys))
    port = free_port()
    cmd = [sys.executable, "-m", "helix_es.cli", "serve", "--config", str(tmp_path / f"{tag}.json")]
    cmd += ["--keys", str(tmp_path / "keys.json"), "--port", str(port), *flags]
    err = (tmp_path / f"{tag}.err").open("w+")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen(cmd, cwd=tmp_path, stderr=err, text=True, env=env)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, Path(err.name).read_text()
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "helix-es serve did not answer /healthz in 60 s"
            time.sleep(0.1)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        err.close()


async def test_a_real_server_finishes_in_flight_requests_on_sigterm_and_exits_0(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str
) -> None:
    ns, sid = unique("ta"), unique("s")
    with serve(tmp_path, kafka(kafka_bootstrap, redis_url, unique("svc"), read_timeout=3)) as (proc, url):
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            added = await http.post(
                f"/v1/{ns}/sessions/{sid}/messages", json={"role": "user", "content": "hi"}, headers=A
            )
            assert added.status_code == 201
            # A read waiting for a write no projector applies (none runs) is in flight at SIGTERM.
            token = {**A, "X-Helix-After": added.headers["X-Helix-After"]}
            waiting = asyncio.create_task(http.get(f"/v1/{ns}/sessions/{sid}/messages", headers=token))
            await asyncio.sleep(1)
            proc.send_signal(signal.SIGTERM)
            answer = await waiting  # answered, not cut off: the server let it finish
            assert answer.status_code == 504 and "has applied offset" in answer.json()["error"], answer.text
        code = await asyncio.to_thread(proc.wait, 30)
    stderr = next(tmp_path.glob("srv-*.err")).read_text()
    assert code == 0, stderr
    assert "Application shutdown complete" in stderr
    assert "uvloop loop" in stderr  # the service extra's loop, when installed
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert lines[0]["route"] == "/healthz"  # the start-up probe
    lines = [line for line in lines if line["route"] != "/healthz"]
    assert {
        "method": "POST",
        "route": "/v1/{namespace}/sessions/{session_id}/messages",
        "status": 201,
        "namespace": ns,
    }.items() <= lines[0].items()
    assert lines[-1]["status"] == 504 and isinstance(lines[-1]["ms"], float)
    assert A_KEY not in stderr and sid not in stderr  # never the key; the path is a template


async def test_a_real_servers_answer_leaves_in_one_write_and_pipelined_answers_keep_order(tmp_path: Path) -> None:
    # uvicorn alone writes the head and the body apart: two segments, and the client wakes twice.
    ns, sid = unique("ta"), unique("s")
    with serve(tmp_path, embedded(tmp_path)) as (_proc, url):
        port = int(url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            auth_line = f"Authorization: Bearer {A_KEY}\r\n"
            for i in range(20):
                body = json.dumps({"role": "user", "content": f"turn {i}"}).encode()
                method = "POST" if i % 2 else "GET"
                head = f"{method} /v1/{ns}/sessions/{sid}/messages HTTP/1.1\r\nHost: x\r\n{auth_line}"
                extra = f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n" if method == "POST" else ""
                conn.sendall(f"{head}{extra}\r\n".encode() + (body if method == "POST" else b""))
                first = conn.recv(1 << 20)  # what the first segment brought
                top, _, rest = first.partition(b"\r\n\r\n")
                length = int(
                    next(v for k, _, v in (h.partition(b": ") for h in top.split(b"\r\n")) if k == b"content-length")
                )
                assert len(rest) == length, (method, first)
            # Pipelined: three requests in one segment get three whole answers, in order.
            one = f"GET /v1/{ns}/sessions/{sid}/messages HTTP/1.1\r\nHost: x\r\n{auth_line}\r\n".encode()
            conn.sendall(one + b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n" + one)
            data = b""
            while data.count(b"HTTP/1.1 200") < 3 or not data.endswith(b"]}"):
                chunk = conn.recv(1 << 20)
                assert chunk, data
                data += chunk
            answers = data.split(b"HTTP/1.1 ")[1:]
            assert [a[:3] for a in answers] == [b"200"] * 3
            assert b'"status":"ok"' in answers[1] and answers[0].endswith(b"]}") and answers[2].endswith(b"]}")
            assert [
                json.loads(a.partition(b"\r\n\r\n")[2])["messages"][-1]["content"] for a in (answers[0], answers[2])
            ] == ["turn 19"] * 2


def test_without_uvicorns_httptools_protocol_serve_lets_uvicorn_choose(monkeypatch: pytest.MonkeyPatch) -> None:
    """The joined-writes protocol builds on a part of uvicorn that is not its API: where a uvicorn
    lacks it, `helix-es serve` still starts, on uvicorn's own protocol."""
    import importlib

    from helix_es.service import wire

    assert isinstance(wire.http_protocol(), type)
    monkeypatch.setitem(sys.modules, "uvicorn.protocols.http.httptools_impl", None)  # import fails
    try:
        assert importlib.reload(wire).http_protocol() == "auto"
    finally:
        monkeypatch.undo()
        importlib.reload(wire)
    assert isinstance(wire.http_protocol(), type)


async def test_sighup_reads_the_keys_file_again_and_a_bad_file_keeps_the_old_keys(tmp_path: Path) -> None:
    ns, sid, new_key = unique("ta"), unique("s"), "key-rotated-in-0123456789"
    path = f"/v1/{ns}/sessions/{sid}/messages"
    with serve(tmp_path, embedded(tmp_path)) as (proc, url):
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            assert (await http.get(path, headers=auth(new_key))).status_code == 401

            async def after_sighup(keys_text: str, said: str) -> None:
                (tmp_path / "keys.json").write_text(keys_text)
                proc.send_signal(signal.SIGHUP)
                err = next(tmp_path.glob("srv-*.err"))
                deadline = time.monotonic() + 10
                while said not in err.read_text():
                    assert proc.poll() is None and time.monotonic() < deadline, err.read_text()
                    await asyncio.sleep(0.05)

            await after_sighup(json.dumps({new_key: [ns]}), "1 key(s) read")
            assert (await http.get(path, headers=auth(new_key))).status_code == 200
            assert (await http.get(path, headers=A)).status_code == 401  # the old key is gone
            await after_sighup("{not json", "kept the previous keys")
            assert (await http.get(path, headers=auth(new_key))).status_code == 200
            assert proc.poll() is None


async def test_two_servers_on_one_kafka_log_read_each_others_writes_by_token(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, procs: list[Any]
) -> None:
    config = kafka(kafka_bootstrap, redis_url, unique("svc"))
    procs.append(start_projector(config, tmp_path))
    ns, sid = unique("ta"), unique("s")
    base = f"/v1/{ns}/sessions/{sid}/messages"
    with serve(tmp_path, config, "--lag-bound", "1000") as (_proc, url):
        async with (
            httpx.AsyncClient(base_url=url, timeout=90) as first,
            client({**config, "memory": {**config["memory"], "read_timeout": 3}}) as second,
        ):
            added = await first.post(base, json={"role": "user", "content": "I live in Lyon"}, headers=A)
            assert added.status_code == 201, added.text
            token = added.headers["X-Helix-After"]
            assert contents(await second.get(base, headers={**A, "X-Helix-After": token})) == ["I live in Lyon"]
            # The same retry on both replicas shows once.
            for http in (first, second):
                retry = await http.post(
                    base, json={"role": "user", "content": "Noted"}, headers={**A, "Idempotency-Key": "k"}
                )
                assert retry.status_code == 201
            token = retry.headers["X-Helix-After"]
            assert contents(await first.get(base, headers={**A, "X-Helix-After": token})) == ["I live in Lyon", "Noted"]
            # A token no write gave (past the partition's end, or in the other partition), or another
            # session's: 400, and the session reads on.
            raw = json.loads(base64.urlsafe_b64decode(token + "=="))
            for forged in ([*raw[:2], raw[2] + 100, raw[3]], [raw[0], 1 - raw[1], *raw[2:]]):
                ahead = base64.urlsafe_b64encode(json.dumps(forged, separators=(",", ":")).encode()).decode()
                late = await second.get(base, headers={**A, "X-Helix-After": ahead.rstrip("=")})
                assert (late.status_code, late.json()["field"]) == (400, "X-Helix-After"), late.text
            other = await second.get(f"/v1/{ns}/sessions/other/messages", headers={**A, "X-Helix-After": token})
            assert (other.status_code, other.json()["field"]) == (400, "X-Helix-After")
            assert len(contents(await second.get(base, headers={**A, "X-Helix-After": token}))) == 2
            listed = (await second.get(f"/v1/{ns}/sessions", headers=A)).json()["sessions"]
            assert [(s["session_id"], s["events"]) for s in listed] == [(sid, 3)]
            assert (await first.get("/readyz")).status_code == 200
            assert "helix_projector_lag{" in (await first.get("/metrics")).text


async def test_a_bad_keys_file_fails_at_start_naming_the_entry(tmp_path: Path) -> None:
    config = tmp_path / "helix.json"
    config.write_text(json.dumps(embedded(tmp_path)))
    cases = [
        ({"short": ["ns"]}, "entry 1 (a short key)"),
        ({A_KEY: ["ns"], "another-key-0123456789": []}, "entry 2 (key starting 'anot')"),
        ({A_KEY: ["bad/ns"]}, "entry 1"),
        ({A_KEY: {"namespaces": ["*"], "admin": "yes"}}, "admin must be true or false"),
        ({"sha256:abc": ["*"]}, "64 hexadecimal"),
        ([], "must be a JSON object"),
    ]
    for doc, expected in cases:
        (tmp_path / "keys.json").write_text(json.dumps(doc))
        code, out, err = await cli(
            "serve", "--config", str(config), "--keys", str(tmp_path / "keys.json"), "--port", "1"
        )
        assert (code, out) == (2, ""), err
        assert expected in err and "keys.json" in err, err
    (tmp_path / "keys.json").write_text('{"' + A_KEY + '": ["a"], "' + A_KEY + '": ["b"]}')
    code, _out, err = await cli("serve", "--config", str(config), "--keys", str(tmp_path / "keys.json"))
    assert code == 2 and "appears twice" in err and A_KEY not in err


def test_without_uvicorn_serve_says_so_in_one_line_and_exits_1(tmp_path: Path) -> None:
    code = "import sys; sys.modules['uvicorn'] = None; from helix_es.cli import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run(
        [sys.executable, "-c", code, "serve", "--config", "x.yaml", "--keys", "k.json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "pip install 'helix-es[service]'" in out.stderr


def readme_blocks() -> list[str]:
    """The REST page (docs/integrations/rest.md): its first four fenced blocks (keys, command, curl calls, output)."""
    section = (ROOT / "docs" / "integrations" / "rest.md").read_text()
    return [block.split("\n", 1)[1] for block in section.split("```")[1::2]][:4]


async def test_the_readme_example_runs_as_printed(tmp_path: Path) -> None:
    keys, command, calls, printed = readme_blocks()
    assert command.strip() == "helix-es serve --config helix.yaml --keys keys.json --port 8080"
    mcp_section = (ROOT / "docs" / "integrations" / "mcp.md").read_text()
    config = yaml.safe_load(mcp_section.split("```yaml\n", 1)[1].split("```", 1)[0])
    with serve(tmp_path, config, keys=json.loads(keys)) as (_proc, url):
        script = calls.replace("localhost:8080", url.removeprefix("http://"))
        out = await asyncio.to_thread(
            subprocess.run, ["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
    assert out.returncode == 0, out.stderr
    assert out.stdout == printed


async def idle_closed(http: httpx.AsyncClient) -> None:
    """Until the server's idle sweep has closed every session's memory."""
    deadline = time.monotonic() + 10
    while "helix_memory_sessions_open 0\n" not in (await http.get("/metrics")).text:
        assert time.monotonic() < deadline, "the idle session was not closed"
        await asyncio.sleep(0.2)


async def test_an_idle_session_memory_is_closed_and_opens_again_on_demand(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    base = f"/v1/{ns}/sessions/{sid}/messages"
    async with client(embedded(tmp_path), session_idle=0.2) as http:
        assert (await http.post(base, json={"role": "user", "content": "kept"}, headers=A)).status_code == 201
        assert "helix_memory_sessions_open 1\n" in (await http.get("/metrics")).text
        await idle_closed(http)
        assert contents(await http.get(base, headers=A)) == ["kept"]  # the log is the truth: opened again


async def test_a_write_not_yet_shown_is_waited_for_after_its_idle_memory_closes(
    tmp_path: Path, kafka_bootstrap: str, redis_url: str, procs: list[Any]
) -> None:
    config = kafka(kafka_bootstrap, redis_url, unique("svc"), read_timeout=1)
    ns, sid = unique("ta"), unique("s")
    base = f"/v1/{ns}/sessions/{sid}/messages"
    async with client(config, session_idle=0.2) as http:
        assert (await http.post(base, json={"role": "user", "content": "kept"}, headers=A)).status_code == 201
        await idle_closed(http)
        # No projector yet: the view has not shown the write, so the new memory's read waits for it.
        late = await http.get(base, headers=A)
        assert late.status_code == 504 and "projector" in late.json()["error"], late.text
        procs.append(start_projector(config, tmp_path))
        deadline = time.monotonic() + 60
        while (answer := await http.get(base, headers=A)).status_code == 504:
            assert time.monotonic() < deadline, answer.text
        assert contents(answer) == ["kept"]


async def test_the_sessions_listing_reads_only_what_the_log_got_since_the_last_call(
    kafka_bootstrap: str, redis_url: str
) -> None:
    """A server keeps each namespace's listing and the offsets after what it read: a second call
    that read everything again would count each earlier event twice."""
    ns, prefix = unique("ta-list"), unique("list")
    config = kafka(kafka_bootstrap, redis_url, prefix)
    sent: dict[str, int] = {}

    async def add(http: httpx.AsyncClient, sid: str, n: int) -> None:
        batch = {"messages": [{"role": "user", "content": f"{sid} {i}"} for i in range(n)]}
        assert (await http.post(f"/v1/{ns}/sessions/{sid}/messages", json=batch, headers=A)).status_code == 201
        sent[sid] = sent.get(sid, 0) + n

    async def listed(http: httpx.AsyncClient) -> dict[str, int]:
        found = (await http.get(f"/v1/{ns}/sessions", headers=A)).json()["sessions"]
        return {s["session_id"]: s["events"] for s in found}

    async with client(config) as http:
        assert await listed(http) == {}  # no log yet: nothing listed, nothing kept
        for i, sid in enumerate(["s-a", "s-b", "s-c", "s-d"]):
            await add(http, sid, i + 1)
        assert await listed(http) == sent
        await add(http, "s-a", 3)
        await add(http, "s-e", 2)
        assert await listed(http) == sent == {"s-a": 4, "s-b": 2, "s-c": 3, "s-d": 4, "s-e": 2}
        assert await listed(http) == sent  # nothing new: nothing changes
        mine = (await http.get(f"/v1/{ns}/sessions", headers=A)).json()["sessions"]
        assert mine[0]["session_id"] == "s-e"  # newest first
    async with client(config) as fresh:  # another server reads the whole log once
        assert (await fresh.get(f"/v1/{ns}/sessions", headers=A)).json()["sessions"] == mine


async def test_the_sessions_listing_comes_in_pages_and_filters_by_id(tmp_path: Path) -> None:
    """`limit` and `after` walk every session once, newest first; `q` keeps ids holding it; `total`
    counts what matches. A cursor the listing did not give is a 422 naming `after`."""
    ns = unique("ta-page")
    async with client(embedded(tmp_path)) as http:
        for i in range(7):
            await asyncio.sleep(0.002)  # apart in time: the order is the adds' order
            sid = f"{'Red' if i % 2 else 'blue'}-{i}"
            ok = await http.post(f"/v1/{ns}/sessions/{sid}/messages", json={"role": "user", "content": "x"}, headers=A)
            assert ok.status_code == 201
        whole = (await http.get(f"/v1/{ns}/sessions", headers=A)).json()
        assert whole["total"] == 7 and whole["next"] is None
        newest_first = [s["session_id"] for s in whole["sessions"]]
        assert newest_first == [f"{'Red' if i % 2 else 'blue'}-{i}" for i in reversed(range(7))]
        walked, after, pages = [], None, 0
        while True:
            params = {"limit": "3", **({"after": after} if after else {})}
            page = (await http.get(f"/v1/{ns}/sessions", params=params, headers=A)).json()
            assert page["total"] == 7 and len(page["sessions"]) <= 3
            walked += [s["session_id"] for s in page["sessions"]]
            pages, after = pages + 1, page["next"]
            if after is None:
                break
        assert walked == newest_first and pages == 3
        red = (await http.get(f"/v1/{ns}/sessions", params={"q": "red", "limit": "2"}, headers=A)).json()
        assert [s["session_id"] for s in red["sessions"]] == ["Red-5", "Red-3"] and red["total"] == 3
        rest = await http.get(f"/v1/{ns}/sessions", params={"q": "red", "after": red["next"]}, headers=A)
        assert [s["session_id"] for s in rest.json()["sessions"]] == ["Red-1"] and rest.json()["next"] is None
        for params, field in (
            ({"after": "not-a-cursor"}, "after"),
            ({"limit": "0"}, "limit"),
            ({"limit": "1001"}, "limit"),
        ):
            bad = await http.get(f"/v1/{ns}/sessions", params=params, headers=A)
            assert bad.status_code == 422 and bad.json()["field"] == field, bad.text


async def test_a_sessions_audit_asked_again_reads_only_what_came_since_and_stays_bounded(
    kafka_bootstrap: str, redis_url: str
) -> None:
    """The console asks the audit at every cut: a server keeps what it read of the session. A
    second ask that read everything again would show each earlier event twice."""
    ns, prefix = unique("ta-hist"), unique("hist")
    config = kafka(kafka_bootstrap, redis_url, prefix)
    base = f"/v1/{ns}/sessions"

    async def say(http: httpx.AsyncClient, sid: str, text: str) -> None:
        added = await http.post(f"{base}/{sid}/messages", json={"role": "user", "content": text}, headers=A)
        assert added.status_code == 201, added.text

    async def events(http: httpx.AsyncClient, sid: str, **params: str) -> list[int]:
        report = await http.get(f"{base}/{sid}/audit", params=params, headers=A)
        assert report.status_code == 200, report.text
        return [e["offset"] for e in report.json()["events"]]

    async with client(config) as http:
        for i in range(3):
            await say(http, "s-1", f"one {i}")
            await say(http, "s-2", f"two {i}")
        first = await events(http, "s-1")
        assert len(first) == 3
        await say(http, "s-1", "one more")
        await say(http, "s-2", "two more")
        again = await events(http, "s-1")
        assert len(again) == 4 and again[:3] == first
        assert await events(http, "s-1", offset=str(first[1])) == first[:2]  # a cut, from what is kept
        assert len(await events(http, "s-2")) == 4
        histories = http._transport.app.state.service.histories  # type: ignore[attr-defined]
        histories.max_records = 5  # s-2 was asked last: s-1 goes
        assert len(await events(http, "s-2")) == 4
        assert [sid for _, sid in histories._kept] == ["s-2"]
        assert await events(http, "s-1") == again  # read whole again, then kept in s-2's place
        assert [sid for _, sid in histories._kept] == ["s-1"]
        histories.max_records, histories.max_sessions = 50_000, 2
        for sid in ("nobody-1", "nobody-2", "nobody-3"):  # sessions without an event are counted too
            assert await events(http, sid) == []
        assert [sid for _, sid in histories._kept] == ["nobody-2", "nobody-3"]
    async with client(config) as fresh:
        assert await events(fresh, "s-1") == again
