"""The corpora bench/tokens.py measures `estimate_tokens` on, built from what every CPython ships.

Each kind has a `fit` corpus (what the estimator's weights were tuned on) and an `eval` corpus
held out from it. Held out means more than another seed: eval text comes from other sources
and its JSON from other generators, keys and vocabularies, so the figures on `eval` say how
the estimator does on text shaped unlike anything it was fitted to.

- prose: fit on the English paragraphs of the Python reference (pydoc_data.topics); eval on the
  docstrings of standard-library modules not used elsewhere, and CPython's LICENSE.txt.
- code: two disjoint lists of standard-library modules.
- json-pretty: fit on random tool payloads dumped with indent=2; eval on REST API responses
  (paginated lists of resources, nested attributes, links, errors) with indent=2 or 4.
- json-compact: the same two generators, separators=(",", ":").
- json-numeric: fit on random flat lists of numbers; eval on coordinates (GeoJSON), time series,
  matrices, histograms, token ids, pixels and embeddings, compact and default separators.
- json-tool-args: fit on random tool payloads, default separators, some with source text; eval on the arguments a
  model writes for tool calls (search, SQL, shell, file edits with escaped source code).
"""

from __future__ import annotations

import ast
import json
import random
import re
import sysconfig
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, Literal

Split = Literal["fit", "eval"]

CODE_FIT = (
    "argparse.py", "textwrap.py", "dataclasses.py", "heapq.py", "shlex.py", "fractions.py",
    "json/decoder.py", "json/encoder.py", "csv.py", "pathlib.py", "asyncio/tasks.py",
)  # fmt: skip
CODE_EVAL = (
    "functools.py", "statistics.py", "ast.py", "difflib.py", "enum.py", "json/__init__.py",
    "string.py", "contextlib.py", "bisect.py", "graphlib.py", "queue.py", "asyncio/queues.py",
    "tomllib/_parser.py", "http/cookies.py", "zipfile.py", "sqlite3/dump.py",
)  # fmt: skip
# Held-out prose: docstrings of modules in neither code list.
DOC_EVAL = (
    "calendar.py", "configparser.py", "datetime.py", "decimal.py", "email/message.py", "ftplib.py",
    "gettext.py", "imaplib.py", "inspect.py", "logging/__init__.py", "mailbox.py", "optparse.py",
    "pickle.py", "random.py", "shutil.py", "smtplib.py", "socket.py", "subprocess.py", "tarfile.py",
    "tempfile.py", "threading.py", "typing.py", "unittest/case.py", "urllib/parse.py", "uuid.py",
)  # fmt: skip
_INDENTED = re.compile(r"^(?: {3,}|\t)", re.MULTILINE)


def _stdlib() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def _paragraphs(text: str) -> list[str]:
    out = []
    for block in text.split("\n\n"):
        block = block.strip("\n")
        # Indented blocks are grammar and code samples; underlined lines are headings.
        if len(block) < 80 or _INDENTED.search(block) or ">>>" in block or set(block.splitlines()[-1]) <= set("*=-"):
            continue
        out.append(block)
    return out


@cache
def prose(split: Split) -> list[str]:
    if split == "fit":
        from pydoc_data.topics import topics

        return [p for name in sorted(topics) for p in _paragraphs(topics[name])]
    root = _stdlib()
    out = _paragraphs((root / "LICENSE.txt").read_text(encoding="utf-8")) if (root / "LICENSE.txt").is_file() else []
    for f in DOC_EVAL:
        tree = ast.parse((root / f).read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                out += _paragraphs(doc) if doc else []
    return out


@cache
def code(split: Split) -> list[str]:
    root = _stdlib()
    return [(root / f).read_text(encoding="utf-8") for f in {"fit": CODE_FIT, "eval": CODE_EVAL}[split]]


@cache
def _words(split: Split) -> list[str]:
    """Words as often as they occur in the split's prose: fit and eval JSON draw on different text."""
    return [w.lower() for p in prose(split) for w in re.findall(r"[A-Za-z]+", p)]


# --- fit: random tool payloads (keys from one list, values of ten kinds) ---

_KEYS = [
    "id", "name", "city", "temperature", "humidity", "wind", "user", "session", "query", "result", "status", "error",
    "message", "order", "invoice", "customer", "product", "price", "total", "count", "items", "page", "token", "model",
    "request", "response", "latency", "region", "cluster", "node", "partition", "offset", "topic", "schema", "version",
    "build", "commit", "title", "url", "snippet", "score", "path", "size", "created", "updated", "owner", "tags",
    "enabled",
]  # fmt: skip
_NAMES = ["Ada Lovelace", "Grace Hopper", "Alan Turing", "Edsger Dijkstra", "Barbara Liskov", "Ken Thompson"]


def _key(rng: random.Random) -> str:
    a, b = rng.sample(_KEYS, 2)
    return rng.choice([a, a, f"{a}_{b}", f"{a}{b.capitalize()}"])  # plain, snake_case, camelCase


def _value(rng: random.Random, words: list[str], depth: int) -> Any:
    roll = rng.random()
    if depth > 2 or roll < 0.4:
        kind = rng.randrange(10)
        if kind == 0:
            return rng.randint(-1000, 100000)
        if kind == 1:
            return round(rng.uniform(-100, 1000), rng.randrange(1, 5))
        if kind == 2:
            return rng.choice([True, False, None])
        if kind in (3, 4):
            return " ".join(rng.choice(words) for _ in range(rng.randint(3, 20))).capitalize() + "."
        if kind == 5:
            return f"{rng.getrandbits(64):016x}"
        if kind == 6:
            return f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:00:00Z"
        if kind == 7:
            return f"https://example.com/{rng.choice(words)}/{rng.randint(1, 9999)}?q={rng.choice(words)}"
        if kind == 8:
            return f"/srv/app/{rng.choice(words)}/{rng.choice(words)}_{rng.choice(words)}.py"
        return rng.choice(_NAMES)
    if roll < 0.6:
        return [_value(rng, words, depth + 1) for _ in range(rng.randint(1, 5))]
    return {_key(rng): _value(rng, words, depth + 1) for _ in range(rng.randint(2, 7))}


def _payloads(seed: int, n: int = 400) -> list[dict[str, Any]]:
    rng, words = random.Random(seed), _words("fit")
    docs = []
    for i in range(n):
        doc = {_key(rng): _value(rng, words, 1) for _ in range(rng.randint(1, 6))}
        if i % 10 == 0:
            doc["city"] = rng.choice(["Tromsø", "Zürich", "São Paulo", "Kraków"])
        docs.append(doc)
    return docs


def _number(rng: random.Random, places: int, scale: int) -> float:
    if not places:
        return rng.randint(0, scale)
    x = rng.uniform(-scale, scale)
    return x if places == 9 else round(x, places)


def _fit_numeric(seed: int = 4, n: int = 300) -> list[Any]:
    """Flat lists of numbers of one random scale and precision each; `places` 9 is a float's
    full repr (up to 17 digits), as `json.dumps` writes computed values."""
    rng = random.Random(seed)
    docs: list[Any] = []
    for _ in range(n):
        places, scale = rng.randrange(0, 10), 10 ** rng.randrange(0, 11)
        docs.append([_number(rng, places, scale) for _ in range(rng.randint(3, 60))])
    return docs


# --- eval: other generators, other keys, other words ---

_RESOURCES = ["users", "repositories", "invoices", "deployments", "articles", "tickets", "devices", "payments"]
_FIELDS = [
    "displayName", "email", "createdAt", "updatedAt", "lastLoginAt", "isActive", "role", "avatarUrl", "description",
    "visibility", "defaultBranch", "stargazersCount", "amountDue", "currency", "dueDate", "lineItems", "environment",
    "imageTag", "replicas", "headline", "body", "wordCount", "priority", "assignee", "firmwareVersion", "batteryLevel",
    "ip_address", "serial_number", "billing_address", "postal_code", "country_code", "phone_number",
]  # fmt: skip
_STATUSES = ["active", "pending", "failed", "succeeded", "archived", "draft", "in_progress", "queued"]
_DOMAINS = ["api.acme.io", "billing.internal", "cdn.example.org", "auth.example.net"]


def _field_value(rng: random.Random, words: list[str], field: str) -> Any:
    if field.endswith(("At", "Date")):
        day = f"20{rng.randint(18, 26)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        hms = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        return f"{day}T{hms}.{rng.randint(0, 999):03d}Z"
    if field.startswith("is"):
        return rng.random() < 0.5
    if field.endswith(("Count", "replicas", "Level")) or field in ("amountDue", "wordCount"):
        return rng.randint(0, 10 ** rng.randint(1, 6))
    if field.endswith(("Url", "url")):
        return f"https://{rng.choice(_DOMAINS)}/{rng.choice(words)}/{rng.getrandbits(32):08x}.png"
    if field == "email":
        return f"{rng.choice(words)}.{rng.choice(words)}@{rng.choice(_DOMAINS)}"
    if field in ("role", "visibility", "environment", "priority", "currency", "country_code"):
        return rng.choice(["admin", "public", "production", "high", "EUR", "NO", "staging", "low", "USD"])
    if field == "lineItems":
        return [
            {
                "sku": f"SKU-{rng.randint(1000, 99999)}",
                "qty": rng.randint(1, 9),
                "unitPrice": round(rng.uniform(1, 500), 2),
            }
            for _ in range(rng.randint(1, 4))
        ]
    if field in ("ip_address",):
        return ".".join(str(rng.randint(1, 254)) for _ in range(4))
    if field == "body" or field == "description" or field == "headline":
        return " ".join(rng.choice(words) for _ in range(rng.randint(4, 40))).capitalize() + "."
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 3)))


def _api_response(rng: random.Random, words: list[str]) -> dict[str, Any]:
    resource = rng.choice(_RESOURCES)
    if rng.random() < 0.15:
        return {
            "error": {
                "code": rng.choice([400, 401, 403, 404, 409, 422, 500]),
                "type": rng.choice(words),
                "message": " ".join(rng.choice(words) for _ in range(rng.randint(5, 15))),
                "requestId": f"req_{rng.getrandbits(48):012x}",
            }
        }
    fields = rng.sample(_FIELDS, rng.randint(3, 8))
    data = [
        {
            "id": f"{resource[:3]}_{rng.getrandbits(40):010x}",
            "type": resource,
            "attributes": {f: _field_value(rng, words, f) for f in fields},
            "relationships": {"owner": {"data": {"type": "users", "id": str(rng.randint(1, 99999))}}},
            "status": rng.choice(_STATUSES),
        }
        for _ in range(rng.randint(1, 5))
    ]
    page = rng.randint(1, 40)
    return {
        "data": data,
        "meta": {"page": page, "perPage": len(data), "total": rng.randint(len(data), 5000)},
        "links": {
            "self": f"https://{rng.choice(_DOMAINS)}/v2/{resource}?page={page}",
            "next": f"https://{rng.choice(_DOMAINS)}/v2/{resource}?page={page + 1}",
        },
    }


def _numeric_doc(rng: random.Random) -> Any:
    kind = rng.randrange(6)
    if kind == 5:  # an embedding, as computed
        return {"embedding": [rng.gauss(0, 0.05) for _ in range(rng.randint(8, 96))], "model": "text-embed"}
    if kind == 4:  # token ids, pixels
        if rng.random() < 0.5:
            return {"input_ids": [rng.randint(0, 50_000) for _ in range(rng.randint(10, 200))]}
        return {"pixels": [[rng.randint(0, 255) for _ in range(3)] for _ in range(rng.randint(5, 60))]}
    if kind == 0:  # GeoJSON line
        lon, lat = rng.uniform(-180, 180), rng.uniform(-80, 80)
        coords = [
            [round(lon + rng.gauss(0, 0.01) * i, 6), round(lat + rng.gauss(0, 0.01) * i, 6)]
            for i in range(rng.randint(5, 80))
        ]
        return {
            "type": "Feature",
            "geometry": {"type": "LineString", "coordinates": coords},
            "properties": {"id": rng.randint(1, 10**6)},
        }
    if kind == 1:  # time series
        t0, step = rng.randint(1_600_000_000, 1_800_000_000), rng.choice([1, 15, 60, 300])
        return {
            "metric": "cpu",
            "points": [[t0 + i * step, round(rng.uniform(0, 100), 3)] for i in range(rng.randint(10, 100))],
        }
    if kind == 2:  # matrix
        n = rng.randint(3, 12)
        return [[round(rng.gauss(0, 1), rng.choice([2, 4, 8])) for _ in range(n)] for _ in range(n)]
    return {"buckets": [rng.randint(0, 10 ** rng.randint(1, 7)) for _ in range(rng.randint(10, 120))], "scale": 0.5}


_SHELL = [
    "ls -la src/",
    "git status --porcelain",
    "pytest -q tests/test_api.py::test_login",
    "grep -rn TODO .",
    "du -sh /var/log/*",
]
_TOOLS = ["search", "sql", "shell", "write_file", "http_get", "calendar", "edit_file"]


def _tool_args(rng: random.Random, words: list[str], sources: list[str]) -> dict[str, Any]:
    tool = rng.choice(_TOOLS)
    if tool == "search":
        return {
            "query": " ".join(rng.choice(words) for _ in range(rng.randint(2, 8))),
            "top_k": rng.randint(3, 20),
            "filters": {"lang": rng.choice(["en", "de", "fr"]), "after": f"2024-0{rng.randint(1, 9)}-01"},
        }
    if tool == "sql":
        cols = ", ".join(rng.sample(["id", "name", "email", "created_at", "total", "status"], 3))
        where = f"WHERE status = '{rng.choice(_STATUSES)}' ORDER BY created_at DESC LIMIT {rng.randint(1, 100)}"
        return {"query": f"SELECT {cols} FROM {rng.choice(words)}s {where};"}
    if tool == "shell":
        return {
            "command": rng.choice(_SHELL),
            "timeout": rng.choice([10, 30, 120]),
            "cwd": f"/home/{rng.choice(words)}/project",
        }
    if tool in ("write_file", "edit_file"):
        source = rng.choice(sources)
        start = rng.randrange(max(1, len(source) - 1500))
        snippet = source[start : start + rng.randint(200, 1500)]
        key = "content" if tool == "write_file" else "new_string"
        return {"path": f"src/{rng.choice(words)}/{rng.choice(words)}.py", key: snippet}
    if tool == "http_get":
        return {
            "url": f"https://{rng.choice(_DOMAINS)}/v1/{rng.choice(words)}?id={rng.randint(1, 10**6)}",
            "headers": {"Accept": "application/json"},
        }
    return {
        "title": " ".join(rng.choice(words) for _ in range(3)).title(),
        "start": f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T09:30:00",
        "duration_minutes": rng.choice([15, 30, 60]),
        "attendees": [f"{rng.choice(words)}@example.com" for _ in range(rng.randint(1, 4))],
    }


@cache
def json_pretty(split: Split) -> list[str]:
    if split == "fit":
        return [json.dumps(d, indent=2) for d in _payloads(1)]
    rng, words = random.Random(11), _words("eval")
    return [json.dumps(_api_response(rng, words), indent=rng.choice([2, 2, 4])) for _ in range(300)]


@cache
def json_compact(split: Split) -> list[str]:
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    if split == "fit":
        return [json.dumps(d, **compact) for d in _payloads(2)]  # type: ignore[arg-type]
    rng, words = random.Random(12), _words("eval")
    return [json.dumps(_api_response(rng, words), **compact) for _ in range(300)]  # type: ignore[arg-type]


@cache
def json_numeric(split: Split) -> list[str]:
    if split == "fit":
        return [json.dumps(d, separators=(",", ":") if i % 2 else None) for i, d in enumerate(_fit_numeric())]
    rng = random.Random(13)
    return [json.dumps(_numeric_doc(rng), separators=(",", ":") if i % 2 else None) for i in range(200)]


@cache
def json_tool_args(split: Split) -> list[str]:
    if split == "fit":
        docs, rng, sources = _payloads(3), random.Random(5), code("fit")
        for doc in docs[::4]:  # some carry source text, as file-writing tools do
            source = rng.choice(sources)
            start = rng.randrange(len(source) - 1000)
            doc[_key(rng)] = source[start : start + rng.randint(100, 1000)]
        return [json.dumps(d, ensure_ascii=False) for d in docs]
    rng, words, sources = random.Random(14), _words("eval"), code("eval")
    return [json.dumps(_tool_args(rng, words, sources)) for _ in range(400)]


CORPORA: dict[str, Callable[[Split], list[str]]] = {
    "prose": prose,
    "code": code,
    "json-pretty": json_pretty,
    "json-compact": json_compact,
    "json-numeric": json_numeric,
    "json-tool-args": json_tool_args,
}
KINDS = tuple(CORPORA)
