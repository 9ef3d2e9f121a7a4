"""`helix-es serve` against hostile input: forged consistency tokens, bodies nested or sized to cost
the server, times out of range, session ids that need percent-encoding. Each is refused with the
status and field it deserves (or served), and leaves the server as it was for every other client.
"""

from __future__ import annotations

import base64
import json
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from helix_es import Message, open_memory
from tests.conftest import unique
from tests.served import free_port, served
from tests.test_service import ADMIN_KEY, HASHED_KEY, KEYS, A, auth, client, contents, embedded, kafka

AFTER = "X-Helix-After"
OTHER = auth(HASHED_KEY)  # another client of the same tenant


def _token(raw: list[Any]) -> str:
    return base64.urlsafe_b64encode(json.dumps(raw, separators=(",", ":")).encode()).decode().rstrip("=")


def _raw(token: str) -> list[Any]:
    decoded: list[Any] = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    return decoded


async def test_a_forged_read_after_token_is_a_400_and_the_session_stays_readable(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    base = f"/v1/{ns}/sessions/{sid}"
    async with client(embedded(tmp_path, read_timeout=3)) as http:
        added = await http.post(f"{base}/messages", json={"role": "user", "content": "hi"}, headers=A)
        topic, partition, offset, _ = _raw(added.headers[AFTER])
        forged = {
            "from the future": [topic, partition, offset + 1000, sid],
            "the next write's": [topic, partition, offset + 1, sid],
            "another partition": [topic, partition + 1, offset, sid],
            "another session": [topic, partition, offset, "someone-else"],
            "another namespace": [f"helix.memory.{unique('ta')}", partition, offset, sid],
        }
        for what, raw in forged.items():
            for path, params in ((f"{base}/messages", {}), (f"{base}/search", {"q": "hi"})):
                answer = await http.get(path, params=params, headers={**A, AFTER: _token(raw)})
                assert (answer.status_code, answer.json()["field"]) == (400, AFTER), (what, answer.text)
        # Nothing stalls: another client's read, and one with the real token, answer at once.
        started = time.monotonic()
        assert contents(await http.get(f"{base}/messages", headers=OTHER)) == ["hi"]
        assert contents(await http.get(f"{base}/messages", headers={**OTHER, AFTER: added.headers[AFTER]})) == ["hi"]
        assert contents(await http.get(f"{base}/search", params={"q": "hi"}, headers=OTHER)) == ["hi"]
        assert time.monotonic() - started < 2.0  # a stalled read waits read_timeout (3 s) and answers 504
        # A session with no write on the log has no token to give.
        fresh = await http.get(
            f"/v1/{unique('ta')}/sessions/{sid}/messages", headers={**A, AFTER: _token([topic, 0, 0, sid])}
        )
        assert (fresh.status_code, fresh.json()["field"]) == (400, AFTER)


async def test_a_token_read_while_kafka_is_unreachable_is_a_503_to_retry(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HELIX_KAFKA_BOOTSTRAP", raising=False)  # it would win over the config's address
    config = kafka(f"127.0.0.1:{free_port()}", redis_url, unique("down"), read_timeout=2)  # no broker there
    ns, sid = unique("ta"), unique("s")
    async with client(config) as http:
        token = _token([f"{config['log']['topic_prefix']}.{ns}", 0, 0, sid])
        answer = await http.get(f"/v1/{ns}/sessions/{sid}/messages", headers={**A, AFTER: token})
        assert answer.status_code == 503 and answer.headers["Retry-After"] == "1", answer.text
        # The listings ask the brokers too: retry later, not a 500.
        for path in ("/v1/namespaces", f"/v1/{ns}/sessions"):
            listed = await http.get(path, headers=A)
            assert listed.status_code == 503 and listed.headers["Retry-After"] == "1", (path, listed.text)


async def test_a_body_nested_past_the_limit_or_over_the_size_is_refused_naming_it(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    base = f"/v1/{ns}/sessions/{sid}"
    async with client(embedded(tmp_path), max_body=100_000) as http:
        deep = [
            b"[" * 50_000 + b"]" * 50_000,  # past the parser's stack: a 500 before
            b"{" + b'"a":{' * 40 + b"}" * 41,
            b'{"role": "user", "content": "hi", "metadata": {"k": ' + b"[" * 40 + b"]" * 40 + b"}}",
        ]
        for body in deep:
            for method, path in (("POST", f"{base}/messages"), ("POST", f"{base}/forget")):
                answer = await http.request(method, path, content=body, headers=A)
                if path.endswith("forget") and answer.status_code == 403:
                    continue  # forget is for admin keys: asked with one below
                assert (answer.status_code, answer.json()["field"]) == (400, "body"), answer.text
                assert "deeper than this server's 32" in answer.json()["error"]
        forgot = await http.post(f"{base}/forget", content=deep[0], headers=auth(ADMIN_KEY))
        assert (forgot.status_code, forgot.json()["field"]) == (400, "body"), forgot.text
        # 32 levels pass the check (and then fail as a message would).
        ok = b"[" * 32 + b"]" * 32
        assert (await http.post(f"{base}/messages", content=ok, headers=A)).status_code == 422
        # Brackets in strings are text, not nesting.
        text = {"messages": [{"role": "user", "content": "[[{" * 40 + '\\"'}]}
        assert (await http.post(f"{base}/messages", json=text, headers=A)).status_code == 201

        async def chunks() -> Any:  # no Content-Length: the cap counts what is read
            for _ in range(200):
                yield b" " * 1000

        streamed = await http.post(f"{base}/messages", content=chunks(), headers=A)
        assert (streamed.status_code, streamed.json()["field"]) == (413, "body"), streamed.text
        assert "100000 bytes" in streamed.json()["error"]
        listed = (await http.get(f"/v1/{ns}/sessions", headers=A)).json()["sessions"]
        assert [(s["session_id"], s["events"]) for s in listed] == [(sid, 1)]  # the one good write alone


OUT_OF_RANGE = [
    "-999999999d",
    "-99999999999999999999w",
    "1000000000d ago",
    "-" + "9" * 400 + "d",  # a float that is infinite
    "0001-01-01T00:00:00+01:00",
    "9999-12-31T23:59:59-01:00",
]
EDGES = ["0001-01-01", "0001-01-01T00:00:00-01:00", "9999-12-31T23:59:59Z", "9999-12-31T23:59:59+05:00", "-1w"]


async def test_a_time_out_of_range_is_a_422_naming_as_of_and_the_edges_answer(tmp_path: Path) -> None:
    ns, sid = unique("ta"), unique("s")
    base = f"/v1/{ns}/sessions/{sid}"
    async with client(embedded(tmp_path)) as http:
        assert (await http.post(f"{base}/messages", json={"role": "user", "content": "hi"}, headers=A)).is_success
        for as_of in OUT_OF_RANGE:
            answer = await http.get(f"{base}/audit", params={"as_of": as_of}, headers=A)
            assert (answer.status_code, answer.json()["field"]) == (422, "as_of"), (as_of, answer.text)
            assert "year" in answer.json()["error"]
        for as_of in EDGES:
            answer = await http.get(f"{base}/audit", params={"as_of": as_of}, headers=A)
            assert answer.status_code == 200, (as_of, answer.text)


def _segment(session_id: str) -> str:
    """A session id as a path segment: every byte but letters, digits, `-_~` percent-encoded; dots too,
    as `.` and `..` are path steps a client would resolve."""
    return quote(session_id, safe="").replace(".", "%2E")


async def test_a_session_id_with_a_slash_is_reachable_on_every_route_percent_encoded(tmp_path: Path) -> None:
    ns = unique("ta")
    config = embedded(tmp_path)
    # Library users write such ids without HTTP: a LangGraph thread id, an Agents SDK session id.
    library = "graph/thread-1"
    async with open_memory({**config, "memory": {**config["memory"], "namespace": ns}}, session_id=library) as memory:
        await memory.add(Message("user", "written by the library"))
    ids = ["team/alice", "a/messages", "/", "..", "x?y#z%20", "é/ü"]
    with served(config, KEYS, tmp_path) as url:
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            base = f"/v1/{ns}/sessions/{_segment(library)}"
            assert contents(await http.get(f"{base}/messages", headers=A)) == ["written by the library"]
            for sid in ids:
                base = f"/v1/{ns}/sessions/{_segment(sid)}"
                added = await http.post(f"{base}/messages", json={"role": "user", "content": f"hi {sid}"}, headers=A)
                assert added.status_code == 201, (sid, added.text)
                got = await http.get(f"{base}/messages", headers={**A, AFTER: added.headers[AFTER]})
                assert (got.json()["session_id"], contents(got)) == (sid, [f"hi {sid}"])
                assert contents(await http.get(f"{base}/search", params={"q": "hi"}, headers=A)) == [f"hi {sid}"]
                assert (await http.delete(f"{base}/messages", headers=A)).status_code == 200
                assert contents(await http.get(f"{base}/messages", headers=A)) == []
                report = (await http.get(f"{base}/audit", headers=A)).json()
                assert (report["session_id"], [e["type"] for e in report["events"]]) == (
                    sid,
                    ["MessageAdded", "MemoryCleared"],
                ), report
            forgot = await http.post(f"/v1/{ns}/sessions/{_segment(ids[0])}/forget", headers=auth(ADMIN_KEY))
            assert forgot.status_code == 409 and "encryption" in forgot.text  # reached: no keys to shred here
            listed = (await http.get(f"/v1/{ns}/sessions", headers=A)).json()["sessions"]
            assert {s["session_id"] for s in listed} == {library, *ids}
