"""The reference pages of docs/reference/, written from the code's own definitions.

api.md: the REST part comes from the OpenAPI document `helix-es serve` answers at /openapi.json
(helix_es.service.openapi.document, with the default session header); the MCP part from the tools
`helix-es mcp` lists (helix_es.service.mcp.build_server), with their descriptions and input schemas.
cli.md: every `helix-es` command's help, from the CLI's own argparse parser (helix_es.cli.main).

    python scripts/api_reference.py           # writes both pages
    python scripts/api_reference.py --check   # exits 1 if a page differs from what it would write

tests/test_docs.py fails when a committed page differs from `pages()`.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "reference"
HELP_COLUMNS = "100"  # argparse wraps help to the terminal's width: one width, whatever the terminal
METHODS = ("get", "post", "delete")
LONG_PATTERN = 60  # longer patterns (the session id's, built from str.isprintable) stay in /openapi.json


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def describe(schema: dict[str, Any]) -> str:
    """A schema in a few words of Markdown; `$ref`s link to their section below."""
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[1]
        return f"[{name}](#{name.lower()})"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(describe(part) for part in schema[key])
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    kinds = schema.get("type", "any")
    kind = " or ".join(kinds) if isinstance(kinds, list) else kinds
    if "array" in kind and "items" in schema:
        kind = kind.replace("array", f"array of {describe(schema['items'])}")
    limits = []
    for key, word in (("minimum", ">="), ("maximum", "<="), ("minLength", "length >="), ("maxLength", "length <=")):
        if key in schema:
            limits.append(f"{word} {schema[key]}")
    for key, word in (("minItems", "items >="), ("maxItems", "items <=")):
        if key in schema:
            limits.append(f"{word} {schema[key]}")
    pattern = schema.get("pattern")
    if pattern:
        limits.append(f"matches `{pattern}`" if len(pattern) <= LONG_PATTERN else "a pattern (in /openapi.json)")
    if "default" in schema:
        limits.append(f"default `{json.dumps(schema['default'])}`")
    return f"{kind} ({', '.join(limits)})" if limits else kind


def _properties(schema: dict[str, Any]) -> list[str]:
    required = set(schema.get("required", []))
    rows = ["| field | type | required | description |", "|---|---|---|---|"]
    for name, prop in schema.get("properties", {}).items():
        yes = "yes" if name in required else ""
        rows.append(f"| `{name}` | {_cell(describe(prop))} | {yes} | {_cell(prop.get('description', ''))} |")
    return rows


def _operation(path: str, method: str, op: dict[str, Any]) -> list[str]:
    summary = op.get("summary", "").rstrip(".")
    lines = [f"### `{method.upper()} {path}`", "", summary[:1].upper() + summary[1:] + "."]
    if op.get("description"):
        lines += ["", op["description"]]
    if op.get("security"):
        lines += ["", "Needs `Authorization: Bearer <key>`."]
    params = op.get("parameters", [])
    if params:
        lines += ["", "| parameter | in | type | required | description |", "|---|---|---|---|---|"]
        for p in params:
            yes = "yes" if p.get("required") else ""
            desc = _cell(p.get("description", ""))
            lines.append(f"| `{p['name']}` | {p['in']} | {_cell(describe(p['schema']))} | {yes} | {desc} |")
    body = op.get("requestBody")
    if body:
        schema = body["content"]["application/json"]["schema"]
        need = "required" if body.get("required") else "optional"
        lines += ["", f"Body ({need}, JSON): {describe(schema)}."]
    lines += ["", "| status | answer |", "|---|---|"]
    for status, answer in op["responses"].items():
        content = answer.get("content", {})
        kinds = [describe(c["schema"]) if c.get("schema") else f"`{media}`" for media, c in content.items()]
        shape = f": {', '.join(kinds)}" if kinds else ""
        lines.append(f"| {status} | {_cell(answer['description'])}{_cell(shape)} |")
    return [*lines, ""]


def rest(doc: dict[str, Any]) -> list[str]:
    lines = [
        "## REST routes",
        "",
        f"{doc['info']['title']}, OpenAPI {doc['openapi']}. {doc['info']['description']}",
        "",
        "The header form of the routes names the session in the header `memory.session_id_header` names "
        "(`X-Session-ID` by default).",
        "",
    ]
    for path, item in doc["paths"].items():
        for method in METHODS:
            if method in item:
                lines += _operation(path, method, item[method])
    lines += ["## Schemas", ""]
    for name, schema in doc["components"]["schemas"].items():
        lines += [f"### {name}", ""]
        if schema.get("description"):
            lines += [schema["description"], ""]
        variants = schema.get("anyOf") or schema.get("oneOf")
        if variants:
            for n, variant in enumerate(variants, 1):
                lines += [f"Form {n}:", "", *_properties(variant), ""]
        elif "properties" in schema:
            lines += [*_properties(schema), ""]
        else:
            lines += [describe(schema) + ".", ""]
    return lines


def mcp(tools: list[Any]) -> list[str]:
    lines = [
        "## MCP tools",
        "",
        "`helix-es mcp --config F` serves these tools over stdio. Every tool takes `session_id`, and "
        "`namespace` (omitted: the config's `memory.namespace`, or `--namespace`).",
        "",
    ]
    for tool in tools:
        lines += [f"### `{tool.name}`", "", " ".join(tool.description.split()), "", *_properties(tool.input_schema)]
        lines.append("")
        for name, schema in tool.input_schema.get("$defs", {}).items():
            lines += [f"#### {name}", "", schema.get("description", ""), "", *_properties(schema), ""]
    return lines


def render() -> str:
    from helix_es.config import load_config
    from helix_es.service.mcp import MemoryTools, build_server
    from helix_es.service.openapi import document

    server = build_server(MemoryTools(load_config({"memory": {"type": "conversation"}})))
    tools = asyncio.run(server.list_tools())
    head = [
        "# REST and MCP reference",
        "",
        "Generated from the service's own definitions by `python scripts/api_reference.py`: do not edit by hand "
        "(the test suite fails when this page differs from what the script writes). The guide to the service is "
        "[REST service](../integrations/rest.md); to the tools, [MCP](../integrations/mcp.md).",
        "",
    ]
    return "\n".join([*head, *rest(document("X-Session-ID")), *mcp(tools)]).rstrip("\n") + "\n"


def render_cli() -> str:
    import argparse

    from helix_es.cli.main import parser

    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_COLUMNS
    try:
        top = parser()
        lines = [
            "# CLI reference",
            "",
            "Generated from the CLI's own parser by `python scripts/api_reference.py`: do not edit by hand. Every "
            "command exits 0 on success and 2 for bad usage or a bad config; the guides say what else each one "
            "returns ([Operations](../operations/index.md)).",
            "",
            "## `helix-es`",
            "",
            "```",
            top.format_help().rstrip(),
            "```",
            "",
        ]
        commands = next(a for a in top._actions if isinstance(a, argparse._SubParsersAction))
        seen: set[int] = set()
        for name, sub in commands.choices.items():
            if id(sub) in seen:  # an alias (history for audit)
                continue
            seen.add(id(sub))
            lines += [f"## `helix-es {name}`", "", "```", sub.format_help().rstrip(), "```", ""]
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before
    return "\n".join(lines).rstrip("\n") + "\n"


def pages() -> dict[Path, str]:
    return {REFERENCE / "api.md": render(), REFERENCE / "cli.md": render_cli()}


def main() -> int:
    sys.path.insert(0, str(ROOT))
    stale = []
    for page, text in pages().items():
        if "--check" in sys.argv[1:]:
            if not page.exists() or page.read_text() != text:
                stale.append(page)
            continue
        page.parent.mkdir(parents=True, exist_ok=True)
        page.write_text(text)
        print(f"wrote {page.relative_to(ROOT)}")
    for page in stale:
        print(f"{page.relative_to(ROOT)} differs: run python scripts/api_reference.py")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
