"""The recall eval's committed data is what its generator makes, and each question's evidence is there."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "bench" / "recall_eval"


def _make() -> tuple[list[dict], list[dict]]:
    spec = importlib.util.spec_from_file_location("recall_eval_make", EVAL / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    made: tuple[list[dict], list[dict]] = module.make(7)
    return made


def _read(name: str) -> list[dict]:
    return [json.loads(line) for line in (EVAL / name).read_text().splitlines()]


def test_the_committed_eval_is_the_generators_and_holds_its_evidence() -> None:
    dialogues, questions = _make()
    assert _read("dialogues.jsonl") == json.loads(json.dumps(dialogues))
    assert _read("questions.jsonl") == json.loads(json.dumps(questions))
    assert len(dialogues) >= 10 and len(questions) >= 300
    turns = {t["id"]: d["dialogue"] for d in dialogues for s in d["sessions"] for t in s["turns"]}
    for d in dialogues:
        assert len(d["sessions"]) >= 10 and sum(len(s["turns"]) for s in d["sessions"]) >= 300
    for q in questions:
        assert q["evidence"] and all(turns[e] == q["dialogue"] for e in q["evidence"]), q
    kinds = {q["kind"] for q in questions}
    assert kinds == {"single-fact", "changed", "temporal", "multi-hop"}
