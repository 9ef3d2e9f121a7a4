"""A local OpenAI-compatible server for tests: deterministic answers, and it counts the calls.

- `POST /v1/chat/completions` answers "summary #n of N chars" (n: the how-manyth chat call that
  is not an extraction), unless its system message is the extraction prompt
  (`helix_es.providers.extract.PROMPT`): then it answers facts per turn, as a model would. Each
  turn of the transcript gets the facts `facts_by_text[its text]` lists (a test's script: subject,
  predicate, value and, if it says one, valid_from), else what `RulesExtractor`'s patterns find.
  The knobs `extract_delay`, `extract_failures`, `extract_status`, `extract_raw` (the content)
  and `extract_body` (the whole answer) make it slow, fail, or answer something else; `usage`
  counts words.
- `POST /v1/embeddings` answers a deterministic vector per input.

`model_server` is the pytest fixture; `serve_model()` runs the same server outside pytest (benches):

    with serve_model() as server:
        extractor = OpenAIExtractor(server.base_url, "stand-in")
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from helix_es.model.positions import Position
from helix_es.providers.extract import PROMPT, Turn
from helix_es.providers.extract_rules import rule_facts, speaks_for_itself


@dataclass
class ModelServer:
    base_url: str
    calls: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)
    # Extraction: turn text -> the facts a model would answer for it ({subject, predicate, value[, valid_from]}).
    facts_by_text: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    extract_delay: float = 0.0  # seconds to wait before answering an extraction
    extract_status: int | None = None  # answer every extraction with this HTTP status instead
    extract_failures: int = 0  # answer the next N extractions with HTTP 500, then normally
    extract_raw: str | None = None  # answer this as choices[0].message.content instead of facts
    extract_body: bytes | None = None  # answer this whole HTTP body (status 200) instead
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, path: str) -> int:
        return sum(1 for p, _, _ in self.calls if p.endswith(path))

    @property
    def extractions(self) -> int:
        """How many extraction requests came (failed ones included)."""
        return sum(1 for p, body, _ in self.calls if p.endswith("/chat/completions") and is_extraction(body))


def _vector(text: str, dims: int) -> list[float]:
    seed = hashlib.sha256(text.encode()).digest()
    return [((seed[i % 32] + i) % 17 - 8) / 8 for i in range(dims)]


def is_extraction(body: dict[str, Any]) -> bool:
    first = (body.get("messages") or [{}])[0]
    return isinstance(first, dict) and first.get("role") == "system" and first.get("content") == PROMPT


_TURN = re.compile(r"(\d+)\. \[([^\]]+)\] (.+?)(?: \((\w+)\))?: (.*)")


def transcript_turns(user: str) -> list[Turn]:
    """The turns of `helix_es.providers.extract.transcript`'s text, as a model would read them."""
    turns: list[Turn] = []
    for line in user.split("\n")[1:]:
        match = _TURN.fullmatch(line)
        if match is None and turns and line.startswith("   "):
            last = turns[-1]
            turns[-1] = Turn(
                last.event_id, last.position, last.said_at, last.role, last.name, last.content + "\n" + line[3:]
            )
        elif match is not None:
            n, said, speaker, role, text = match.groups()
            at = datetime.fromisoformat(said)
            name = speaker if role else None
            turns.append(Turn(n, Position("", 0, int(n)), at, role or speaker, name, text))
    return turns


def _fact(fact: dict[str, Any], turn: Turn) -> dict[str, Any]:
    # No date of its own: the turn's, as listed (what the prompt asks a model to answer then).
    valid_from = fact.get("valid_from") or turn.said_at
    valid_from = valid_from.isoformat() if isinstance(valid_from, datetime) else valid_from
    return {k: fact[k] for k in ("subject", "predicate", "value")} | {"valid_from": valid_from}


def answer_facts(server: ModelServer, user: str) -> str:
    """The facts of each listed turn, in order: the script's, else the rules'."""
    facts: list[dict[str, Any]] = []
    for turn in transcript_turns(user):
        if turn.content in server.facts_by_text:
            facts += [_fact(f, turn) for f in server.facts_by_text[turn.content]]
        elif speaks_for_itself(turn):
            for f in rule_facts(turn.content, turn.name or "user"):
                facts.append(
                    _fact(
                        {"subject": f.subject, "predicate": f.predicate, "value": f.value, "valid_from": f.valid_from},
                        turn,
                    )
                )
    return json.dumps({"facts": facts})


def _words(text: str) -> int:
    return len(text.split())


@contextmanager
def serve_model() -> Iterator[ModelServer]:
    """The stand-in on 127.0.0.1 and a free port, in a thread, until the block ends."""
    server = ModelServer("")

    class Handler(BaseHTTPRequestHandler):
        def _send(self, status: int, answer: dict[str, Any] | bytes) -> None:
            data = answer if isinstance(answer, bytes) else json.dumps(answer).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a test of its timeout)

        def _extract(self, body: dict[str, Any]) -> None:
            if server.extract_delay:
                time.sleep(server.extract_delay)
            with server.lock:
                failing = server.extract_failures > 0
                server.extract_failures -= failing
            status = 500 if failing else server.extract_status
            if status is not None:
                kind = "server_error" if status >= 500 else "invalid_request_error"
                self._send(status, {"error": {"message": f"stand-in answers HTTP {status}", "type": kind}})
                return
            if server.extract_body is not None:
                self._send(200, server.extract_body)
                return
            user = str(body["messages"][-1]["content"])
            content = server.extract_raw if server.extract_raw is not None else answer_facts(server, user)
            prompt = sum(_words(str(m.get("content", ""))) for m in body["messages"])
            self._send(
                200,
                {
                    "object": "chat.completion",
                    "model": body.get("model"),
                    "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": _words(content),
                        "total_tokens": prompt + _words(content),
                    },
                },
            )

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server.calls.append((self.path, body, dict(self.headers)))
            if self.path.endswith("/chat/completions"):
                if is_extraction(body):
                    self._extract(body)
                    return
                n = server.count("/chat/completions") - server.extractions
                user = body["messages"][-1]["content"]
                answer: dict[str, Any] = {
                    "choices": [{"message": {"role": "assistant", "content": f"summary #{n} of {len(user)} chars"}}]
                }
            elif self.path.endswith("/embeddings"):
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                answer = {
                    "data": [
                        {"index": i, "embedding": _vector(t, body.get("dimensions", 8))} for i, t in enumerate(inputs)
                    ]
                }
            else:
                self.send_error(404)
                return
            self._send(200, answer)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    with serve_model() as server:
        yield server
