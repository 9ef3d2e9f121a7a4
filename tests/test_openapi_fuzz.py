"""The OpenAPI document against a real `helix-es serve`: schemathesis generates requests from the
document the server gives (positive cases, that fit it, and negative ones, that break it), sent
with an admin key for every namespace, a tenant's key, another tenant's key, an unknown key and
none. No answer may be a 5xx, a status the document does not list for the route, or a body or
header that breaks the document's schema for that status.

Bounded and repeatable: a fixed number of examples per route and mode, derandomized (the same
requests on every run), no example database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_module, unique
from tests.served import served

require_module("schemathesis", "the OpenAPI fuzzer (pip install 'helix-es[test]')")

import httpx  # noqa: E402
import schemathesis  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from schemathesis import GenerationMode  # noqa: E402
from schemathesis.checks import (  # noqa: E402
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

EXAMPLES = 30  # per route and mode: about 1,000 requests in all
ADMIN, TENANT, OTHER = "fuzz-admin-0123456789", "fuzz-tenant-a-0123456789", "fuzz-tenant-b-0123456789"
OWNED = "fz-a"  # TENANT's namespace, not OTHER's
KEYS: dict[str, Any] = {ADMIN: {"namespaces": ["*"], "admin": True}, TENANT: ["fz-a*"], OTHER: ["fz-b*"]}
PRESENTED = [ADMIN, TENANT, OTHER, "fuzz-unknown-0123456789", None]  # None: no Authorization header
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    response_headers_conformance,
]


def _operations(doc: dict[str, Any]) -> list[Any]:
    schema = schemathesis.openapi.from_dict(doc)
    return [result.ok() for result in schema.get_all_operations()]


def _fuzz(strategy: Any, base: str) -> str | None:
    """The first failure (shrunk) of `EXAMPLES` requests drawn from `strategy`, each with one of the keys."""
    failed: list[str] = []

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
    )
    @given(case=strategy, key=st.sampled_from(PRESENTED), owned=st.booleans())
    def run(case: Any, key: str | None, owned: bool) -> None:
        if owned and "namespace" in (case.path_parameters or {}):
            case.path_parameters["namespace"] = OWNED
        case.headers = {k: v for k, v in (case.headers or {}).items() if k.lower() != "authorization"}
        response = case.call(base_url=base, headers={} if key is None else {"Authorization": f"Bearer {key}"})
        try:
            case.validate_response(response, checks=CHECKS)
        except Exception as exc:
            failed.append(str(exc))
            raise

    try:
        run()
    except Exception as exc:  # a failed check, or no answer at all
        return failed[-1] if failed else repr(exc)
    return None


@pytest.mark.timeout(300)
def test_no_request_the_document_generates_gets_a_5xx_or_an_answer_it_does_not_document(tmp_path: Path) -> None:
    config = {
        "log": {"type": "embedded", "path": str(tmp_path / "log"), "fsync": False},
        "memory": {
            "type": "composite",
            "namespace": unique("fz"),
            "read_timeout": 2,
            "backends": [
                {"type": "sliding-window", "window_size": 10},
                {"type": "facts", "extract": {"provider": "rules"}, "batch": {"turns": 1, "idle": 0}},
            ],
        },
    }
    with served(config, KEYS, tmp_path) as base, httpx.Client(base_url=base, timeout=30) as http:
        doc = http.get("/openapi.json").json()
        operations = _operations(doc)
        assert len(operations) == 23
        failures: list[str] = []
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
                if mode is GenerationMode.NEGATIVE and not operation.path.startswith("/v1/"):
                    continue  # it takes no input: nothing to break
                found = _fuzz(operation.as_strategy(generation_mode=mode), base)
                if found is not None:
                    failures.append(f"{operation.label} ({mode.value}): {found}")
        assert not failures, "\n\n".join(failures)
    assert "Traceback" not in (tmp_path / "serve.err").read_text()


def test_the_document_admits_what_the_server_takes_and_not_what_it_refuses() -> None:
    from jsonschema import Draft202012Validator

    from helix_es.service.openapi import HEADER_SESSION_ID, IDEMPOTENCY_KEY, document

    doc = document("X-Session-ID")

    def valid(schema: dict[str, Any], value: Any) -> bool:
        return Draft202012Validator({**schema, "components": doc["components"]}).is_valid(value)

    message = {"$ref": "#/components/schemas/Message"}
    call = {"id": "c1", "name": "f", "arguments": "{}"}
    for taken in (
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "assistant", "content": "sure", "tool_calls": [call], "name": "bot"},
        {"role": "tool", "content": "18C", "tool_call_id": "c1", "metadata": {"k": ""}},
    ):
        assert valid(message, taken), taken
    for refused in (
        {"role": "user", "content": ""},
        {"role": "user"},
        {"role": "tool", "content": "42"},
        {"role": "user", "content": "hi", "tool_call_id": "c1"},
        {"role": "user", "content": "hi", "tool_calls": [call]},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "a\x00b"},
        {"role": "user", "content": "hi", "colour": "red"},
        {"role": "user", "content": "hi", "metadata": {"": "x"}},
    ):
        assert not valid(message, refused), refused
    session_id = doc["components"]["schemas"]["SessionId"]
    for sid in ("team/alice", "..", "é ü", " a"):
        assert valid(session_id, sid), sid
    for sid in ("", "   ", "s{1}", "a\nb", "a\u200bb", "x" * 513):
        assert not valid(session_id, sid), sid
    assert valid(HEADER_SESSION_ID, "a/b") and not valid(HEADER_SESSION_ID, "s{1}")
    assert valid(IDEMPOTENCY_KEY, "k-{1}") and not valid(IDEMPOTENCY_KEY, "  ") and not valid(IDEMPOTENCY_KEY, "")
    search = doc["paths"]["/v1/{namespace}/sessions/{session_id}/search"]["get"]
    q = next(p for p in search["parameters"] if p["name"] == "q")
    assert q["required"] and not valid(q["schema"], "")
    for path in doc["paths"].values():
        for operation in path.values():
            if operation.get("security"):
                assert {"401", "503"} <= set(operation["responses"]), operation["summary"]
