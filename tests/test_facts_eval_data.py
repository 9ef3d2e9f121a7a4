"""The facts eval's committed data is what its generator makes, keeps the extraction contract, and its
expected answers keep the rules they encode (bench/facts_eval/README.md)."""

from __future__ import annotations

import importlib.util
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from helix_es.model.fact_events import ExtractedFact
from helix_es.model.positions import Position
from helix_es.providers.extract import OpenAIExtractor, Turn, parse_facts, parse_valid_from
from tests.model_server import ModelServer

ROOT = Path(__file__).resolve().parent.parent
EVAL = ROOT / "bench" / "facts_eval"
MULTI_VALUED = {"likes", "dislikes", "speaks", "has_pet"}


def _make() -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("facts_eval_make", EVAL / "make.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    made: dict[str, Any] = module.make(7)
    return made


DATA: dict[str, Any] = json.loads((EVAL / "dialogues.json").read_text())
DIALOGUES: list[dict[str, Any]] = DATA["dialogues"]


def _at(text: str) -> datetime:
    at = datetime.fromisoformat(text)
    assert at.tzinfo is not None, text
    return at


def test_the_committed_data_is_the_generators() -> None:
    assert json.loads(json.dumps(_make())) == DATA


def test_the_dialogues_have_what_the_eval_is_about() -> None:
    assert len(DIALOGUES) >= 6 and len({d["dialogue"] for d in DIALOGUES}) == len(DIALOGUES)
    for d in DIALOGUES:
        turns = d["turns"]
        assert len({t["session_id"] for t in turns}) >= 3, d["dialogue"]
        assert all(set(t) == {"session_id", "said_at", "role", "name", "content", "facts"} for t in turns)
        said = [_at(t["said_at"]) for t in turns]
        assert said == sorted(said) and len(set(said)) == len(said)
        for c in d["corrections"]:
            assert 0 <= c["after_turn"] < len(turns) and len(set(c) & {"assert", "retract"}) == 1
            later = said[c["after_turn"] + 1] if c["after_turn"] + 1 < len(turns) else None
            assert said[c["after_turn"]] < _at(c["at"]) and (later is None or _at(c["at"]) < later)
    corrections = [c for d in DIALOGUES for c in d["corrections"]]
    assert any("assert" in c for c in corrections) and any("retract" in c for c in corrections)
    assert any(len({t["name"] for t in d["turns"] if t["name"] and t["role"] == "user"}) >= 2 for d in DIALOGUES)
    histories = {(h["predicate"], len(h["values"])) for d in DIALOGUES for h in d["expect"]["history"]}
    assert ("lives_in", 2) in histories and ("works_at", 3) in histories
    dropped = [v for d in DIALOGUES for h in d["expect"]["history"] if h["predicate"] == "likes" for v in h["values"]]
    assert any(v["valid_to"] for v in dropped)


def test_each_turns_facts_keep_the_extraction_contract_and_one_text_says_one_thing() -> None:
    said: dict[str, list[dict[str, Any]]] = {}
    for d in DIALOGUES:
        for t in d["turns"]:
            parsed = parse_facts(json.dumps({"facts": t["facts"]}))
            assert parsed == tuple(
                ExtractedFact(f["subject"], f["predicate"], f["value"], parse_valid_from(f["valid_from"]))
                for f in t["facts"]
            )
            assert said.setdefault(t["content"], t["facts"]) == t["facts"]
            if t["role"] == "assistant":
                assert t["facts"] == [], t  # what the assistant says about itself is no fact


@pytest.mark.parametrize("dialogue", DIALOGUES, ids=[d["dialogue"] for d in DIALOGUES])
def test_the_expected_answers_keep_the_rules(dialogue: dict[str, Any]) -> None:
    expect = dialogue["expect"]
    history = {(h["subject"], h["predicate"]): h["values"] for h in expect["history"]}
    for (_, predicate), values in history.items():
        starts = [_at(v["valid_from"]) for v in values]
        assert starts == sorted(starts)
        for v in values:
            assert v["valid_to"] is None or _at(v["valid_from"]) < _at(v["valid_to"])
        if predicate not in MULTI_VALUED:  # one value at a time, each closed by the next
            assert [v["valid_to"] for v in values] == [v["valid_from"] for v in values[1:]] + [None]
    open_now = sorted((s, p, v["value"]) for (s, p), vs in history.items() for v in vs if v["valid_to"] is None)
    assert sorted((c["subject"], c["predicate"], c["value"]) for c in expect["current"]) == open_now
    for q in expect["as_of"]:
        at = _at(q["as_of"])
        held = [
            v["value"]
            for v in history[(q["subject"], q["predicate"])]
            if _at(v["valid_from"]) <= at and (v["valid_to"] is None or at < _at(v["valid_to"]))
        ]
        assert sorted(held) == q["values"], q
    for c in dialogue["corrections"]:
        if "retract" in c:  # gone for the turns said before it; only a turn said after brings it back
            r = c["retract"]
            for v in history.get((r["subject"], r["predicate"]), []):
                assert v["value"] != r["value"] or _at(v["valid_from"]) > _at(c["at"]), (r, v)
        else:  # a person's word holds from its valid_from, and still when it is said, whatever the model said before
            a = c["assert"]
            values = [v for v in history[(a["subject"], a["predicate"])] if v["value"] == a["value"]]
            assert (a["valid_from"] or c["at"]) in [v["valid_from"] for v in values], (a, values)
            at = max(_at(c["at"]), _at(a["valid_from"] or c["at"]))
            assert any(
                _at(v["valid_from"]) <= at and (v["valid_to"] is None or at < _at(v["valid_to"])) for v in values
            )


async def test_the_stand_in_answers_each_session_as_scripted(model_server: ModelServer) -> None:
    for d in DIALOGUES:
        for t in d["turns"]:
            model_server.facts_by_text[t["content"]] = t["facts"]
    extractor = OpenAIExtractor(model_server.base_url, "stand-in")
    for d in DIALOGUES:
        sessions: dict[str, list[tuple[int, dict[str, Any]]]] = {}
        for i, t in enumerate(d["turns"]):
            sessions.setdefault(t["session_id"], []).append((i, t))
        for session_id, turns in sessions.items():
            batch = [
                Turn(f"e{i}", Position("t", 0, i), _at(t["said_at"]), t["role"], t["name"], t["content"])
                for i, t in turns
            ]
            got = await extractor.extract(session_id, batch)
            # With no date of its own, a fact holds since its turn: the stand-in answers the turn's time, as asked.
            dated = [{**f, "valid_from": f["valid_from"] or t["said_at"]} for _, t in turns for f in t["facts"]]
            scripted = parse_facts(json.dumps({"facts": dated}))
            assert got.facts == scripted, session_id
