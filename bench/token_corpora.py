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
- json-cloud: compact, identifier-heavy cloud API responses (PascalCase or camelCase keys, ARNs,
  resource ids, hashes, no spaces); fit on AWS-shaped ones (EC2, IAM, Lambda, S3, CloudTrail),
  eval on Azure, Google Cloud and Kubernetes-shaped ones.
- json-random-case: compact JSON dense with random-case strings; fit on API keys, base64 blobs and
  URL-safe ids, eval on JWTs, Stripe-style ids, presigned URLs, short links and base62 cursors.
"""

from __future__ import annotations

import ast
import base64
import json
import random
import re
import string
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


# --- identifier-heavy cloud API responses ---

_ALNUM = string.ascii_letters + string.digits
_B64URL = _ALNUM + "-_"


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _random_case(rng: random.Random, n: int, alphabet: str = _ALNUM) -> str:
    return "".join(rng.choice(alphabet) for _ in range(n))


def _uuid(rng: random.Random) -> str:
    h = _hex(rng, 32)
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _stamp(rng: random.Random, millis: bool = True) -> str:
    day = f"20{rng.randint(19, 26)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    hms = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    return f"{day}T{hms}.{rng.randint(0, 999):03d}Z" if millis else f"{day}T{hms}Z"


_AWS_REGIONS = ["us-east-1", "us-west-2", "eu-west-1", "eu-central-1", "ap-southeast-2", "ap-northeast-1"]
_AWS_NAMES = ["Orders", "Billing", "Ingest", "Thumbnail", "Auth", "Search", "Export", "Webhook", "Report", "Sync"]
_AWS_ROLES = ["Service", "Execution", "ReadOnly", "Admin", "Deploy", "Lambda", "Ecs", "Glue"]


def _arn(rng: random.Random, account: str) -> str:
    region, name = rng.choice(_AWS_REGIONS), rng.choice(_AWS_NAMES)
    return rng.choice(
        [
            f"arn:aws:iam::{account}:role/service-role/{name}{rng.choice(_AWS_ROLES)}Role-{_random_case(rng, 12)}",
            f"arn:aws:lambda:{region}:{account}:function:{name}Handler",
            f"arn:aws:s3:::{name.lower()}-{account}-{region}/{_hex(rng, 8)}/*",
            f"arn:aws:sns:{region}:{account}:{name}Notifications",
            f"arn:aws:dynamodb:{region}:{account}:table/{name}Table/stream/{_stamp(rng)[:-5]}",
            f"arn:aws:kms:{region}:{account}:key/{_uuid(rng)}",
        ]
    )


def _ec2_instance(rng: random.Random, account: str) -> dict[str, Any]:
    ip = f"10.{rng.randint(0, 255)}.{rng.randint(0, 255)}.{rng.randint(1, 254)}"
    region = rng.choice(_AWS_REGIONS)
    return {
        "InstanceId": f"i-0{_hex(rng, 16)}",
        "ImageId": f"ami-0{_hex(rng, 16)}",
        "InstanceType": rng.choice(["t3.micro", "m5.large", "c6g.xlarge", "r6i.2xlarge"]),
        "LaunchTime": _stamp(rng, millis=False),
        "Placement": {"AvailabilityZone": f"{region}{rng.choice('abc')}", "Tenancy": "default"},
        "PrivateDnsName": f"ip-{ip.replace('.', '-')}.{region}.compute.internal",
        "PrivateIpAddress": ip,
        "State": {"Code": 16, "Name": rng.choice(["running", "stopped", "pending"])},
        "SubnetId": f"subnet-0{_hex(rng, 16)}",
        "VpcId": f"vpc-0{_hex(rng, 16)}",
        "SecurityGroups": [
            {"GroupName": f"{rng.choice(_AWS_NAMES).lower()}-sg", "GroupId": f"sg-0{_hex(rng, 16)}"}
            for _ in range(rng.randint(1, 3))
        ],
        "IamInstanceProfile": {"Arn": _arn(rng, account), "Id": "AIPA" + _random_case(rng, 17, string.ascii_uppercase)},
        "Tags": [
            {"Key": "Name", "Value": f"{rng.choice(_AWS_NAMES).lower()}-prod-{rng.randint(1, 40):02d}"},
            {"Key": "CostCenter", "Value": str(rng.randint(1000, 9999))},
        ],
    }


def _aws_response(rng: random.Random) -> dict[str, Any]:
    account = str(rng.randint(10**11, 10**12 - 1))
    meta = {"RequestId": _uuid(rng), "HTTPStatusCode": 200, "RetryAttempts": 0}
    kind = rng.randrange(5)
    if kind == 0:
        reservations = [
            {"ReservationId": f"r-0{_hex(rng, 16)}", "OwnerId": account, "Instances": [_ec2_instance(rng, account)]}
            for _ in range(rng.randint(1, 3))
        ]
        return {"Reservations": reservations, "ResponseMetadata": meta}
    if kind == 1:
        roles = [
            {
                "Path": "/service-role/",
                "RoleName": f"{rng.choice(_AWS_NAMES)}{rng.choice(_AWS_ROLES)}Role",
                "RoleId": "AROA" + _random_case(rng, 17, string.ascii_uppercase + string.digits),
                "Arn": _arn(rng, account),
                "CreateDate": _stamp(rng, millis=False),
                "MaxSessionDuration": 3600,
            }
            for _ in range(rng.randint(1, 6))
        ]
        return {"Roles": roles, "IsTruncated": rng.random() < 0.3, "ResponseMetadata": meta}
    if kind == 2:
        functions = [
            {
                "FunctionName": f"{rng.choice(_AWS_NAMES)}Handler",
                "FunctionArn": _arn(rng, account),
                "Runtime": rng.choice(["python3.12", "nodejs20.x", "java21"]),
                "Role": _arn(rng, account),
                "Handler": "app.handler",
                "CodeSize": rng.randint(1000, 50_000_000),
                "CodeSha256": base64.b64encode(rng.randbytes(32)).decode(),
                "LastModified": _stamp(rng)[:-1] + "+0000",
                "RevisionId": _uuid(rng),
                "MemorySize": rng.choice([128, 256, 512, 1024]),
            }
            for _ in range(rng.randint(1, 4))
        ]
        return {"Functions": functions, "ResponseMetadata": meta}
    if kind == 3:
        contents = [
            {
                "Key": f"{rng.choice(_AWS_NAMES).lower()}/{_stamp(rng)[:10]}/{_hex(rng, 12)}.parquet",
                "LastModified": _stamp(rng),
                "ETag": f'"{_hex(rng, 32)}"',
                "Size": rng.randint(0, 10**9),
                "StorageClass": rng.choice(["STANDARD", "STANDARD_IA", "GLACIER"]),
            }
            for _ in range(rng.randint(1, 8))
        ]
        return {"Contents": contents, "Name": f"data-{account}", "KeyCount": len(contents), "ResponseMetadata": meta}
    events = [
        {
            "EventId": _uuid(rng),
            "EventName": rng.choice(["AssumeRole", "PutObject", "RunInstances", "UpdateFunctionCode", "CreateKey"]),
            "EventTime": _stamp(rng, millis=False),
            "EventSource": rng.choice(["sts.amazonaws.com", "s3.amazonaws.com", "ec2.amazonaws.com"]),
            "AccessKeyId": "ASIA" + _random_case(rng, 16, string.ascii_uppercase + string.digits),
            "Resources": [{"ResourceType": "AWS::IAM::Role", "ResourceName": _arn(rng, account)}],
        }
        for _ in range(rng.randint(1, 4))
    ]
    return {"Events": events, "NextToken": base64.b64encode(rng.randbytes(48)).decode(), "ResponseMetadata": meta}


_AZURE_TYPES = [
    ("Microsoft.Compute", "virtualMachines"), ("Microsoft.Network", "networkInterfaces"),
    ("Microsoft.Storage", "storageAccounts"), ("Microsoft.KeyVault", "vaults"), ("Microsoft.Web", "sites"),
]  # fmt: skip
_AZURE_LOCATIONS = ["westeurope", "northeurope", "eastus2", "uksouth", "swedencentral"]
_GCP_ZONES = ["us-central1-a", "europe-west4-b", "asia-east1-c", "europe-north1-a"]


def _azure_resource(rng: random.Random, words: list[str], subscription: str) -> dict[str, Any]:
    provider, kind = rng.choice(_AZURE_TYPES)
    group = f"rg-{rng.choice(words)}-{rng.choice(['prod', 'dev', 'test'])}-{rng.choice(['weu', 'neu', 'eus'])}"
    name = f"{kind[:2]}-{rng.choice(words)}-{rng.randint(1, 99):02d}"
    rid = f"/subscriptions/{subscription}/resourceGroups/{group}/providers/{provider}/{kind}/{name}"
    return {
        "id": rid,
        "name": name,
        "type": f"{provider}/{kind}",
        "location": rng.choice(_AZURE_LOCATIONS),
        "tags": {"owner": rng.choice(words), "costCenter": f"CC{rng.randint(100, 999)}"},
        "properties": {
            "provisioningState": rng.choice(["Succeeded", "Updating", "Failed"]),
            "vmId": _uuid(rng),
            "timeCreated": _stamp(rng)[:-1] + f"{rng.randint(0, 9999):04d}+00:00",
            "hardwareProfile": {"vmSize": rng.choice(["Standard_D2s_v5", "Standard_B2ms", "Standard_E4as_v5"])},
            "networkProfile": {"networkInterfaces": [{"id": rid.replace(kind, "networkInterfaces") + "-nic"}]},
        },
        "etag": f"W/\"datetime'{_stamp(rng)[:-1].replace(':', '%3A')}'\"",
    }


def _gcp_instance(rng: random.Random, words: list[str], project: str) -> dict[str, Any]:
    zone = rng.choice(_GCP_ZONES)
    name = f"{rng.choice(words)}-{_hex(rng, 4)}"
    base = f"https://www.googleapis.com/compute/v1/projects/{project}"
    machine = rng.choice(["e2-medium", "n2-standard-4", "t2d-standard-2"])
    return {
        "kind": "compute#instance",
        "id": str(rng.randint(10**18, 10**19 - 1)),
        "creationTimestamp": _stamp(rng)[:-1] + "-07:00",
        "name": name,
        "machineType": f"{base}/zones/{zone}/machineTypes/{machine}",
        "status": rng.choice(["RUNNING", "TERMINATED", "STAGING"]),
        "zone": f"{base}/zones/{zone}",
        "networkInterfaces": [
            {
                "network": f"{base}/global/networks/default",
                "networkIP": f"10.{rng.randint(128, 191)}.0.{rng.randint(2, 254)}",
                "name": "nic0",
                "fingerprint": base64.b64encode(rng.randbytes(8)).decode(),
            }
        ],
        "selfLink": f"{base}/zones/{zone}/instances/{name}",
        "labelFingerprint": base64.b64encode(rng.randbytes(8)).decode(),
        "serviceAccounts": [{"email": f"{rng.randint(10**11, 10**12 - 1)}-compute@developer.gserviceaccount.com"}],
    }


def _k8s_pod(rng: random.Random, words: list[str]) -> dict[str, Any]:
    app = rng.choice(words)
    name = f"{app}-{_hex(rng, 10)[:9]}-{_random_case(rng, 5, string.ascii_lowercase + string.digits)}"
    return {
        "metadata": {
            "name": name,
            "namespace": rng.choice(["default", "prod", "kube-system"]),
            "uid": _uuid(rng),
            "resourceVersion": str(rng.randint(10**5, 10**8)),
            "creationTimestamp": _stamp(rng, millis=False),
            "labels": {"app.kubernetes.io/name": app, "pod-template-hash": _hex(rng, 10)[:9]},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "uid": _uuid(rng)}],
        },
        "spec": {
            "nodeName": f"gke-prod-pool-{_hex(rng, 8)}-{_random_case(rng, 4, string.ascii_lowercase)}",
            "containers": [{"name": app, "image": f"gcr.io/{app}/{app}@sha256:{_hex(rng, 64)}"}],
        },
        "status": {"phase": rng.choice(["Running", "Pending", "Succeeded"]), "podIP": f"10.4.{rng.randint(0, 255)}.7"},
    }


def _cloud_eval(rng: random.Random, words: list[str]) -> dict[str, Any]:
    kind = rng.randrange(3)
    if kind == 0:
        subscription = _uuid(rng)
        return {"value": [_azure_resource(rng, words, subscription) for _ in range(rng.randint(1, 4))]}
    if kind == 1:
        project = f"{rng.choice(words)}-{rng.choice(words)}-{rng.randint(100000, 999999)}"
        items = [_gcp_instance(rng, words, project) for _ in range(rng.randint(1, 3))]
        return {"kind": "compute#instanceList", "items": items, "nextPageToken": _random_case(rng, 40, _B64URL)}
    items = [_k8s_pod(rng, words) for _ in range(rng.randint(1, 3))]
    return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": str(rng.randint(10**6, 10**8))},
            "items": items}  # fmt: skip


def _compact(
    split: Split, fit: Callable[[random.Random], Any], held_out: Callable[[random.Random, list[str]], Any], seed: int
) -> list[str]:
    """300 compact documents of `fit`'s generator (seed `seed`) or of `held_out`'s (`seed + 1`, eval words)."""
    if split == "fit":
        rng = random.Random(seed)
        docs = [fit(rng) for _ in range(300)]
    else:
        rng, words = random.Random(seed + 1), _words("eval")
        docs = [held_out(rng, words) for _ in range(300)]
    return [json.dumps(d, separators=(",", ":")) for d in docs]


@cache
def json_cloud(split: Split) -> list[str]:
    return _compact(split, _aws_response, _cloud_eval, 21)


# --- random-case strings: keys, tokens, ids ---


def _random_case_fit(rng: random.Random) -> dict[str, Any]:
    def secret() -> str:
        kind = rng.randrange(4)
        if kind == 0:
            return f"sk_{rng.choice(['live', 'test'])}_{_random_case(rng, rng.choice([24, 32, 48]))}"
        if kind == 1:
            return base64.b64encode(rng.randbytes(rng.randint(12, 96))).decode()
        if kind == 2:
            return _random_case(rng, 21, _B64URL)  # nanoid
        return _random_case(rng, 11, _B64URL)  # a video id

    return {
        "keys": [{"id": _random_case(rng, 16), "secret": secret(), "created": rng.randint(1_600_000_000, 1_800_000_000)}
                 for _ in range(rng.randint(1, 6))],
        "cursor": secret(),
        "nonce": base64.b64encode(rng.randbytes(16)).decode(),
    }  # fmt: skip


def _jwt(rng: random.Random, words: list[str]) -> str:
    header = {"alg": rng.choice(["RS256", "ES256", "HS256"]), "typ": "JWT", "kid": _random_case(rng, 20, _B64URL)}
    claims = {"sub": _uuid(rng), "iss": f"https://{rng.choice(_DOMAINS)}/",
              "iat": rng.randint(1_600_000_000, 1_800_000_000), "scope": " ".join(rng.sample(words, 3))}  # fmt: skip

    def part(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).decode().rstrip("=")

    return ".".join([part(json.dumps(header).encode()), part(json.dumps(claims).encode()), part(rng.randbytes(64))])


def _random_case_eval(rng: random.Random, words: list[str]) -> dict[str, Any]:
    kind = rng.randrange(4)
    if kind == 0:
        return {"access_token": _jwt(rng, words), "token_type": "Bearer", "expires_in": 3600,
                "refresh_token": _random_case(rng, 64, _B64URL)}  # fmt: skip
    if kind == 1:
        prefixes = ["cus", "pi", "ch", "sub", "in", "pm", "txn"]
        return {
            "object": "list",
            "data": [
                {"id": f"{rng.choice(prefixes)}_{_random_case(rng, rng.choice([14, 24]))}", "object": "charge",
                 "amount": rng.randint(100, 99999), "customer": f"cus_{_random_case(rng, 14)}",
                 "payment_intent": f"pi_{_random_case(rng, 24)}", "client_secret": f"pi_{_random_case(rng, 24)}"
                 f"_secret_{_random_case(rng, 25)}"}
                for _ in range(rng.randint(1, 4))
            ],
            "has_more": rng.random() < 0.5,
        }  # fmt: skip
    if kind == 2:
        key = f"{rng.choice(words)}/{_random_case(rng, 22, _B64URL)}.jpg"
        signature = _hex(rng, 64)
        credential = "AKIA" + _random_case(rng, 16, string.ascii_uppercase + string.digits)
        return {"url": f"https://{rng.choice(words)}.s3.amazonaws.com/{key}?X-Amz-Algorithm=AWS4-HMAC-SHA256"
                f"&X-Amz-Credential={credential}%2F20250101%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature={signature}",
                "fields": {"key": key, "policy": base64.b64encode(rng.randbytes(120)).decode()}}  # fmt: skip
    return {
        "links": [{"short": f"https://bit.ly/{_random_case(rng, 7)}", "id": _random_case(rng, 10)}
                  for _ in range(rng.randint(1, 5))],
        "next": base64.urlsafe_b64encode(json.dumps({"after": _random_case(rng, 12)}).encode()).decode(),
    }  # fmt: skip


@cache
def json_random_case(split: Split) -> list[str]:
    return _compact(split, _random_case_fit, _random_case_eval, 31)


CORPORA: dict[str, Callable[[Split], list[str]]] = {
    "prose": prose,
    "code": code,
    "json-pretty": json_pretty,
    "json-compact": json_compact,
    "json-numeric": json_numeric,
    "json-tool-args": json_tool_args,
    "json-cloud": json_cloud,
    "json-random-case": json_random_case,
}
KINDS = tuple(CORPORA)
