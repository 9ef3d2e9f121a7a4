"""Redaction middleware: secrets are replaced before the event is written, so no log ever holds them."""

from __future__ import annotations

import base64
import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import pytest

from helix_es import InvalidInput, Message, ToolCall, open_memory
from helix_es.client.redaction import RedactingMemory, Redactor, luhn, redaction_middleware, rule
from tests.conftest import topic_values, unique

R = Redactor()


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("write to ada.lovelace+news@example.co.uk today", "write to [REDACTED:email] today"),
        ("card 4111 1111 1111 1111, exp 12/29", "card [REDACTED:credit_card], exp 12/29"),
        ("4111-1111-1111-1111 and 5500005555555559", "[REDACTED:credit_card] and [REDACTED:credit_card]"),
        ("server 192.168.10.20. Done", "server [REDACTED:ipv4]. Done"),
        ("call +1 (555) 123-4567 now", "call [REDACTED:phone] now"),
        ("call 555-123-4567 or +47 22 33 44 55", "call [REDACTED:phone] or [REDACTED:phone]"),
        ("or (555) 123 4567 or +4722334455", "or [REDACTED:phone] or [REDACTED:phone]"),
        ("OPENAI_KEY sk-proj-Abc123def456ghi789JKL", "OPENAI_KEY [REDACTED:api_key]"),
        ("sk-ant-api03-abcdefghijklmnopqrstu-vw", "[REDACTED:api_key]"),
        ("aws AKIAIOSFODNN7EXAMPLE ok", "aws [REDACTED:api_key] ok"),
        ("gh ghp_" + "a1" * 18, "gh [REDACTED:api_key]"),
        ("stripe sk_live_4eC39HqLyjWDarjtT1zdp7dc", "stripe [REDACTED:api_key]"),
        ("Authorization: Bearer abc.DEF-123_456~xyz", "Authorization: Bearer [REDACTED:bearer]"),
        ("password=hunter2hunter2, api_key: 'xyzxyzxyz1'", "password=[REDACTED:secret], api_key: '[REDACTED:secret]'"),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.sig_nature-1", "jwt [REDACTED:jwt]"),
    ],
)
def test_built_in_rules(text: str, expected: str) -> None:
    assert R.redact(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "meet on 2024-01-15 at 12:30",
        "card 4111 1111 1111 1112 fails the Luhn check",
        "version 1.2.3 and 999.1.1.1 is no address",
        "order 1700000000 shipped, 1 000 000 units",
        "the sk-short token and AKIA-lowercase",
        "an @ sign alone, or user@localhost",
    ],
)
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert R.redact(text) == text


def test_luhn() -> None:
    assert luhn("4111 1111 1111 1111") and luhn("378282246310005")
    assert not luhn("4111 1111 1111 1112") and not luhn("1234")


def test_tool_arguments_stay_json_and_only_values_change() -> None:
    args = json.dumps(
        {
            "to": "bob@example.com",
            "card": 4111111111111111,
            "count": 3,
            "password": "correct horse",
            "nested": [{"ip": "10.1.2.3", "ok": True, "none": None}],
            "email": "plain words",
        }
    )
    redacted = json.loads(R.redact_json(args))
    assert redacted == {
        "to": "[REDACTED:email]",
        "card": "[REDACTED:credit_card]",
        "count": 3,
        "password": "[REDACTED:secret]",  # named like a secret: redacted whatever it holds
        "nested": [{"ip": "[REDACTED:ipv4]", "ok": True, "none": None}],
        "email": "plain words",  # keys are not redacted, and this value is no address
    }
    untouched = '{ "city" :  "Oslo" }'
    assert R.redact_json(untouched) is untouched  # formatting kept when nothing matched
    assert R.redact_json("not json bob@example.com") == "not json [REDACTED:email]"


def test_custom_patterns_run_first_and_replacement_is_configurable() -> None:
    r = Redactor(
        {"employee": r"EMP-\d{6}", "project": re.compile(r"(?i)project\s+(?P<secret>[A-Z]+)")}, replacement="<{name}>"
    )
    assert r.redact("EMP-123456 on project BLUEBIRD, ada@example.com") == "<employee> on project <project>, <email>"
    only_custom = Redactor([rule("ticket", r"T-\d+")], rules=())
    assert only_custom.redact("T-42 for ada@example.com") == "[REDACTED:ticket] for ada@example.com"
    with pytest.raises(InvalidInput, match="valid regular expression"):
        Redactor({"broken": "("})
    with pytest.raises(InvalidInput, match="rule name"):
        rule("has space", "x")


def test_a_message_keeps_everything_but_the_secrets() -> None:
    msg = Message(
        "assistant",
        "mail ada@example.com",
        name="bot",
        metadata={"trace": "t-1"},
        tool_calls=[ToolCall("c1", "send", '{"to": "ada@example.com", "body": "hi"}')],
    )
    out = R.redact_message(msg)
    assert out.content == "mail [REDACTED:email]"
    assert (out.role, out.name, out.metadata) == ("assistant", "bot", {"trace": "t-1"})
    assert (out.tool_calls[0].id, out.tool_calls[0].name) == ("c1", "send")
    assert json.loads(out.tool_calls[0].arguments) == {"to": "[REDACTED:email]", "body": "hi"}
    clean = Message("user", "nothing here")
    assert R.redact_message(clean) is clean


SECRET_MESSAGES = [
    Message("user", "I'm ada@example.com, card 4111 1111 1111 1111, key sk-live-abcdefghijklmnop1234"),
    Message("assistant", "", tool_calls=[ToolCall("c1", "charge", '{"card": "4111111111111111", "ip": "10.0.0.7"}')]),
    Message("tool", "Authorization: Bearer tok_abcdefgh12345678", tool_call_id="c1"),
]
SECRETS = [b"ada@example.com", b"4111", b"sk-live-abcdefghijklmnop1234", b"10.0.0.7", b"tok_abcdefgh12345678"]


def embedded(tmp_path: Path, namespace: str, **doc: Any) -> dict[str, Any]:
    return {
        "log": {"type": "embedded", "path": str(tmp_path / "log")},
        "memory": {"type": "conversation", "namespace": namespace},
        **doc,
    }


async def test_the_embedded_log_never_sees_the_secret(tmp_path: Path) -> None:
    ns = unique("redact")
    async with open_memory(embedded(tmp_path, ns, memory_middleware=["redaction"]), session_id="s") as mem:
        assert isinstance(mem, RedactingMemory) and mem.namespace == ns
        for m in SECRET_MESSAGES:
            await mem.add(m)
        got = await mem.get()
        assert got[0].content == "I'm [REDACTED:email], card [REDACTED:credit_card], key [REDACTED:api_key]"
        assert json.loads(got[1].tool_calls[0].arguments) == {"card": "[REDACTED:credit_card]", "ip": "[REDACTED:ipv4]"}
        assert await mem.search("ada@example.com") == []
        assert len(await mem.search("REDACTED:email")) == 1
    raw = b"".join(p.read_bytes() for p in (tmp_path / "log").glob("*.log"))
    assert b"REDACTED" in raw
    for secret in SECRETS:
        assert secret not in raw


async def test_the_kafka_topic_never_sees_the_secret(kafka_bootstrap: str, redis_url: str) -> None:
    ns, prefix = unique("redact"), unique("redact")
    cfg = {
        "log": {"type": "kafka", "bootstrap_servers": kafka_bootstrap, "partitions": 1, "topic_prefix": prefix},
        "memory": {
            "type": "conversation",
            "store": "redis",
            "redis_url": redis_url,
            "namespace": ns,
            "consistency": "eventual",
        },
    }
    async with open_memory(cfg, session_id="s") as plain:
        mem = redaction_middleware()(plain)
        for m in SECRET_MESSAGES:
            await mem.add(m)
    values = await topic_values(kafka_bootstrap, f"{prefix}.{ns}", len(SECRET_MESSAGES))
    raw = b"".join(values)
    assert raw.count(b"[REDACTED:") == 6
    for secret in SECRETS:
        assert secret not in raw


async def test_redaction_then_encryption(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("HELIX_ENCRYPTION_KEY", base64.b64encode(os.urandom(32)).decode())
    ns = unique("redact-enc")
    async with open_memory(
        embedded(tmp_path, ns, memory_middleware=["redaction", "encryption"]), session_id="s"
    ) as mem:
        await mem.add(SECRET_MESSAGES[0])
        assert (await mem.get())[0].content.startswith("I'm [REDACTED:email], card")
    raw = b"".join(p.read_bytes() for p in (tmp_path / "log").glob("*.log"))
    assert b"REDACTED" not in raw and b"ada@example.com" not in raw  # sealed, and redacted inside

    # The wrong order cannot redact sealed text: it says so instead of pretending.
    with caplog.at_level(logging.WARNING, logger="helix_es.client.redaction"):
        async with open_memory(
            embedded(tmp_path, ns, memory_middleware=["encryption", "redaction"]), session_id="s2"
        ) as mem:
            await mem.add(Message("user", "ada@example.com"))
            assert (await mem.get())[0].content == "ada@example.com"
    assert "list redaction before encryption" in caplog.text
