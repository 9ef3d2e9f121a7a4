"""A local OpenAI-compatible server for tests: deterministic answers, and it counts the calls."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest


@dataclass
class ModelServer:
    base_url: str
    calls: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)

    def count(self, path: str) -> int:
        return sum(1 for p, _, _ in self.calls if p.endswith(path))


def _vector(text: str, dims: int) -> list[float]:
    seed = hashlib.sha256(text.encode()).digest()
    return [((seed[i % 32] + i) % 17 - 8) / 8 for i in range(dims)]


@pytest.fixture
def model_server() -> Iterator[ModelServer]:
    server = ModelServer("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            server.calls.append((self.path, body, dict(self.headers)))
            if self.path.endswith("/chat/completions"):
                n = server.count("/chat/completions")
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
            data = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.base_url = f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield server
    httpd.shutdown()
    httpd.server_close()
