"""The documentation: docs/ builds into a site, and every snippet in README.md and docs/ runs or is checked.

What happens to a fenced block depends on its language:

- `python` runs. A page's blocks run in order in one process and one namespace, as in a notebook,
  with top-level `await` allowed, in a fresh directory (the embedded log lands in `.helix/log`
  there); what they print is compared where EXPECTED lists it. A page whose config names a Kafka
  log runs on the suite's Kafka and Redis, under a topic prefix of its own and with a longer read
  timeout, while `helix-es project` folds for it. One block runs in another test, as printed:
  the MCP client (RUN_ELSEWHERE), which starts `helix-es mcp` and so needs this checkout's CLI.
- `sh`: every `helix-es` command is parsed by the CLI's own argparse parser (each alternative of
  a `[a | b]` placeholder, each optional group included); every `bench/`, `scripts/` and `tests/`
  file a block names exists; and the commands that need no service run (`helix-es demo` on the
  embedded default). The REST page's curl calls run in tests/test_service.py, against a server.
- `yaml` loads; a config (a mapping with `memory`, `agents`, `checkpoints` or `store`) loads with
  the project's own loader as `helix-es project` reads it (`helix_es.config.load_served`), and so
  does a config a shell block writes with a `<<'YAML'` heredoc.
- `json` loads.
- A block without a language is a diagram or a program's output; the test that runs the program
  compares its output (the MCP and REST pages).
"""

from __future__ import annotations

import ast
import importlib.util
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import helix_es
from helix_es.cli.main import parser
from helix_es.config import load_served
from tests.conftest import ROOT, stop, unique

DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.M | re.S)
CONFIG_KEYS = {"memory", "agents", "checkpoints", "store"}
# Blocks run by another test, as printed there: (page, first line of the block) -> the test.
RUN_ELSEWHERE = {
    ("docs/integrations/mcp.md", "import asyncio"): "tests/test_mcp.py::test_the_readme_example_runs_as_printed",
}
# What a page's python blocks print, in order, where the page states it.
EXPECTED = {
    "docs/forgetting.md": ["1", "[]", "3 system True", "6"],
    "README.md": [
        "3",
        "What's the weather in Oslo?",
        "I moved to Porto last September s-43",
        "[('Lisbon', False), ('Porto', True)]",
    ],
    "docs/usage.md": ["1", "True"],
    "docs/facts.md": [
        "Lisbon 2024-01-05 2024-09-01",
        "Porto 2024-09-01 None",
        "['Lisbon']",
        "[('lives_in', 'Lisbon'), ('works_at', 'Globex')]",
    ],
    "docs/recall.md": ["I moved to Porto last September march 0 2024-03-02", "['keyword', 'mode', 'vector']"],
    "docs/views/conversation.md": ["['turn 2', 'turn 3', 'turn 4']", "[]"],
    "docs/views/long-term.md": [
        "['I am vegetarian.', 'Book a table for two in Oslo.']",
        "['I am vegetarian.']",
        "Book a table for two in Oslo. trip-lisbon",
    ],
    "docs/views/vector.md": ["[]", "['The hotel in Lisbon has a rooftop pool.']"],
    "docs/views/composite.md": ["['two', 'three', 'one']"],
    "docs/views/sliding-window.md": ["['You are a travel assistant.', 'In May.', 'Two people.']", "[]"],
    "docs/integrations/sync.md": ["4", "note 2 from thread 2"],
    "docs/integrations/langgraph-store.md": ["lives in Oslo", "['city']", "food", "[('users', 'u1')]"],
}
RUNNER = """
import ast, asyncio, inspect, json, sys
ns = {"__name__": "__main__"}
for name, code in json.load(open(sys.argv[1])):
    compiled = compile(code, name, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if compiled.co_flags & inspect.CO_COROUTINE:
        asyncio.run(eval(compiled, ns))
    else:
        exec(compiled, ns)
"""


def rel(page: Path) -> str:
    return str(page.relative_to(ROOT))


def blocks(lang: str) -> list[tuple[str, int, str]]:
    """Every block of `lang`: (page, its number on the page, code)."""
    found = []
    for page in PAGES:
        for n, match in enumerate(FENCE.finditer(page.read_text())):
            if match.group(1) == lang:
                found.append((rel(page), n, match.group(2)))
    return found


def elsewhere(page: str, code: str) -> str | None:
    return RUN_ELSEWHERE.get((page, code.split("\n", 1)[0]))


def test_every_block_has_a_language_this_test_knows() -> None:
    langs = {match.group(1) for page in PAGES for match in FENCE.finditer(page.read_text())}
    assert langs <= {"python", "sh", "yaml", "json", ""}, langs


def test_the_site_builds_with_no_warnings(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (tmp_path / "site" / "reference" / "api" / "index.html").exists()


def test_the_reference_pages_are_what_the_script_writes() -> None:
    spec = importlib.util.spec_from_file_location("api_reference", ROOT / "scripts" / "api_reference.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for page, text in module.pages().items():
        assert page.read_text() == text, f"{rel(page)} is stale: run python scripts/api_reference.py"


# -- python ------------------------------------------------------------------------------------

PYTHON_PAGES = sorted({page for page, _, code in blocks("python") if not elsewhere(page, code)})


def _kafka_setup(request: pytest.FixtureRequest, code: str, tmp_path: Path) -> tuple[str, dict[str, str]]:
    """The block on the suite's services: its own topic prefix, a longer read timeout, a projector."""
    bootstrap = request.getfixturevalue("kafka_bootstrap")
    redis_url = request.getfixturevalue("redis_url")
    code = code.replace("log: {type: kafka, ", f"log: {{type: kafka, topic_prefix: {unique('docs')}, ", 1)
    code = code.replace("\nmemory:\n", "\nmemory:\n  read_timeout: 60\n", 1)
    config = next(
        node.value.value
        for node in ast.walk(ast.parse(code))
        if isinstance(node, ast.Assign)
        and [getattr(t, "id", None) for t in node.targets] == ["config"]
        and isinstance(node.value, ast.Constant)
    )
    assert "topic_prefix" in config and "read_timeout" in config
    (tmp_path / "helix.yaml").write_text(config)
    return code, {"HELIX_KAFKA_BOOTSTRAP": bootstrap, "HELIX_REDIS_URL": redis_url}


@pytest.mark.parametrize("page", PYTHON_PAGES)
def test_the_python_blocks_run(page: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    codes = [(f"{page} block {n}", code) for p, n, code in blocks("python") if p == page and not elsewhere(p, code)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    projector = None
    if any("type: kafka" in code for _, code in codes):
        assert len(codes) == 1, "a Kafka page runs one block"
        code, services = _kafka_setup(request, codes[0][1], tmp_path)
        codes, env = [(codes[0][0], code)], {**env, **services}
        cmd = [sys.executable, "-m", "helix_es.cli", "project", "--config", "helix.yaml"]
        projector = subprocess.Popen(cmd, cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True)
    (tmp_path / "blocks.json").write_text(json.dumps(codes))
    try:
        done = subprocess.run(
            [sys.executable, "-c", RUNNER, "blocks.json"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
    finally:
        if projector is not None:
            stop(projector)
    assert done.returncode == 0, done.stderr[-4000:]
    if page in EXPECTED:
        assert done.stdout.splitlines() == EXPECTED[page]


def test_the_blocks_run_elsewhere_are_there() -> None:
    pages = {(page, code.split("\n", 1)[0]) for page, _, code in blocks("python")}
    for (page, first), test in RUN_ELSEWHERE.items():
        assert (page, first) in pages, f"{page} has no block starting {first!r}"
        path, name = test.split("::")
        assert f"def {name}(" in (ROOT / path).read_text(), test


# -- sh ----------------------------------------------------------------------------------------


def commands(code: str) -> list[str]:
    """The block's shell commands: continuations joined, comments and heredoc bodies dropped."""
    text = code.replace("\\\n", " ")
    lines, heredoc = [], None
    for line in text.split("\n"):
        if heredoc is not None:
            heredoc = None if line.strip() == heredoc else heredoc
            continue
        if match := re.search(r"<<'?(\w+)'?", line):
            heredoc = match.group(1)
        line = re.sub(r"(^|\s)#.*$", "", line).strip()
        if line:
            lines.extend(part.strip() for part in re.split(r"&&|;|(?<![>&])&(?!&)", line) if part.strip())
    return lines


SERVICE_ADDRESSES = {
    "HELIX_KAFKA_BOOTSTRAP": "127.0.0.1:9092",
    "HELIX_REDIS_URL": "redis://127.0.0.1:6379/0",
    "HELIX_POSTGRES_DSN": "postgresql://helix:helix@127.0.0.1/helix",
}
# What an upper-case placeholder stands for, where the parser checks its type.
PLACEHOLDERS = {"N": "3", "O": "12", "TIME": "now", "NAME": "target@v2", "F": "helix.yaml", "K": "keys.json"}


def variants(command: str) -> list[list[str]]:
    """A command's argument lists: each `[a | b]` placeholder as a, as b, and left out."""
    groups = re.findall(r"\[([^\[\]]+)\]", command)
    choices = [["", *(alt.strip() for alt in group.split("|"))] for group in groups]
    found = []
    for picked in itertools.product(*choices):
        text = command
        for group, choice in zip(groups, picked, strict=True):
            text = text.replace(f"[{group}]", choice, 1)
        found.append([PLACEHOLDERS.get(word, word) for word in shlex.split(text)])
    return found


def helix_commands() -> list[tuple[str, list[str]]]:
    found = []
    for page, _, code in blocks("sh"):
        for command in commands(code):
            words = command.split()
            at = next((i for i, word in enumerate(words) if word.split("/")[-1] == "helix-es"), None)
            if at is not None:  # helix-es, or .venv/bin/helix-es
                found.extend((page, argv) for argv in variants(" ".join(words[at + 1 :])))
    return found


def test_every_helix_es_command_in_a_shell_block_parses() -> None:
    found = helix_commands()
    assert len(found) >= 40, len(found)
    cli = parser()
    for page, argv in found:
        try:
            cli.parse_args(argv)
        except SystemExit as exc:
            pytest.fail(f"{page}: helix-es {shlex.join(argv)} does not parse (exit {exc.code})")


def test_every_file_a_shell_block_names_exists() -> None:
    named = set()
    for _, _, code in blocks("sh"):
        text = "\n".join(commands(code))  # comments may name what a command writes
        named |= set(re.findall(r"(?<![\w/.])((?:bench|scripts|tests)/[\w./-]+\w)", text))
    assert named
    missing = sorted(path for path in named if not (ROOT / path).exists())
    assert not missing, missing


def test_the_shell_commands_that_need_no_service_run(tmp_path: Path) -> None:
    runnable = [argv for _, argv in helix_commands() if argv == ["demo"]]
    assert runnable, "the README's demo command"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for argv in runnable[:1]:
        done = subprocess.run(
            [sys.executable, "-m", "helix_es.cli", *argv],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=240,
            env=env,
        )
        assert done.returncode == 0, done.stderr[-4000:]
        assert "search" in done.stdout


# -- yaml and json -----------------------------------------------------------------------------


@pytest.mark.parametrize(("page", "n", "code"), blocks("yaml"), ids=lambda v: str(v)[:40])
def test_the_yaml_blocks_load_and_configs_load_as_configs(page: str, n: int, code: str) -> None:
    data = yaml.safe_load(code)
    if isinstance(data, dict) and CONFIG_KEYS & set(data):
        assert load_served(data)  # every view the file names, as `helix-es project` reads it


def test_the_configs_a_shell_block_writes_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # The block runs after `eval "$(scripts/services up)"`, which sets the services' addresses.
    for var, value in SERVICE_ADDRESSES.items():
        monkeypatch.setenv(var, os.environ.get(var, value))
    written = [
        (page, body)
        for page, _, code in blocks("sh")
        for body in re.findall(r"<<'?YAML'?\n(.*?)^YAML$", code, re.M | re.S)
    ]
    assert written, "the rebuild walkthrough's helix.yaml"
    for page, body in written:
        assert load_served(yaml.safe_load(body)), page


@pytest.mark.parametrize(("page", "n", "code"), blocks("json"), ids=lambda v: str(v)[:40])
def test_the_json_blocks_load(page: str, n: int, code: str) -> None:
    json.loads(code)


# -- the README, the changelog, the repository ------------------------------------------------


def test_the_readme_is_a_front_door_whose_links_resolve() -> None:
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    for target in re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme):
        if "://" not in target:
            assert (ROOT / target).exists(), target


def changelog_versions() -> list[tuple[str, str]]:
    return re.findall(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", (ROOT / "CHANGELOG.md").read_text(), re.M)


def test_the_changelog_is_cut_into_dated_releases_the_newest_being_the_package_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    releases = changelog_versions()
    assert len(releases) >= 2
    assert releases[0][0] == helix_es.__version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'\nversion = "{helix_es.__version__}"\n' in pyproject
    dates = [date for _, date in releases]
    assert dates == sorted(dates, reverse=True)
    versions = [tuple(int(part) for part in version.split(".")) for version, _ in releases]
    assert versions == sorted(versions, reverse=True)
    headings = re.findall(r"^## (.*)$", text, re.M)
    assert headings[0] == "[Unreleased]" and len(headings) == len(releases) + 1
    unreleased = text.split("## [Unreleased]", 1)[1].split("\n## ", 1)[0]
    assert len(unreleased.splitlines()) <= 40
    for section in re.findall(r"^### (.*)$", text, re.M):
        assert section in {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}, section


def test_nothing_in_the_repository_points_to_a_design_file_outside_it() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    word = "DES" + "IGN"  # spelled apart so this file does not find itself
    hits = [
        name
        for name in files
        if (ROOT / name).is_file()
        and (ROOT / name).suffix in {".md", ".py", ".yml", ".yaml", ".toml", ""}
        and word in (ROOT / name).read_text(errors="replace")
    ]
    assert not hits, hits


def test_every_page_is_in_the_navigation() -> None:
    config: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    listed = set(re.findall(r"[\w/.-]+\.md", json.dumps(config["nav"])))
    pages = {str(page.relative_to(DOCS)) for page in DOCS.rglob("*.md")}
    assert pages <= listed, pages - listed
