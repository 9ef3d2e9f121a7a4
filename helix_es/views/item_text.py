"""The texts of a LangGraph store item that its index embeds: LangGraph's field-path rules.

`$` (or no path) is the whole value as JSON; `a.b` a nested field; `[0]`, `[-1]`, `[*]` list
items; `*` every value of an object or list; `{a,b.c}` several fields at once. A string, number
or bool is its text; a list or object its JSON (sorted keys); anything missing gives nothing.
The same rules as `langgraph.store.base.embed.get_text_at_path`, so an item embeds the same texts
in a projector that has no LangGraph installed.
"""

from __future__ import annotations

import json
from typing import Any


def texts_at(value: Any, path: str) -> list[str]:
    if not path or path == "$":
        return [_dumps(value)]
    return _extract(value, tokens(path), 0)


def tokens(path: str) -> list[str]:
    """`a.b[0].{c,d}` -> `["a", "b", "[0]", "{c,d}"]`."""
    out: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(path):
        ch = path[i]
        if ch in "[{":
            if current:
                out.append("".join(current))
                current = []
            close = "]" if ch == "[" else "}"
            depth, j = 1, i + 1
            while j < len(path) and depth:
                depth += (path[j] == ch) - (path[j] == close)
                j += 1
            out.append(path[i:j])
            i = j
            continue
        if ch == ".":
            if current:
                out.append("".join(current))
                current = []
        else:
            current.append(ch)
        i += 1
    if current:
        out.append("".join(current))
    return out


def _dumps(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def _leaf(value: Any) -> list[str]:
    if isinstance(value, str | int | float | bool):
        return [str(value)]
    if isinstance(value, list | dict):
        return [_dumps(value)]
    return []


def _extract(value: Any, toks: list[str], pos: int) -> list[str]:
    if pos >= len(toks):
        return _leaf(value)
    token = toks[pos]
    if token.startswith("[") and token.endswith("]"):
        if not isinstance(value, list):
            return []
        index = token[1:-1]
        if index == "*":
            return [t for item in value for t in _extract(item, toks, pos + 1)]
        try:
            i = int(index)
        except ValueError:
            return []
        i = len(value) + i if i < 0 else i
        return _extract(value[i], toks, pos + 1) if 0 <= i < len(value) else []
    if token.startswith("{") and token.endswith("}"):
        if not isinstance(value, dict):
            return []
        out: list[str] = []
        for name in (f.strip() for f in token[1:-1].split(",")):
            found: Any = value
            for part in tokens(name):
                found = found.get(part) if isinstance(found, dict) else None
                if found is None:
                    break
            if found is not None:
                out += _leaf(found)
        return out
    if token == "*":
        items = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
        return [t for item in items for t in _extract(item, toks, pos + 1)]
    if isinstance(value, dict) and token in value:
        return _extract(value[token], toks, pos + 1)
    return []
