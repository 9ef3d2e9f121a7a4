"""Every framework example the docs print is the code a test runs: none can drift from what works.

The examples live beside the tests that run them (tests/test_langchain_history.py,
tests/test_openai_agents.py, tests/readme_langgraph_example.py, tests/readme_store_example.py);
here each must appear on its page of docs/integrations/ as printed, and the store's runs in a process of its own.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests import test_langchain_history, test_openai_agents

ROOT = Path(__file__).resolve().parent.parent
PAGES = {
    "sync": "sync.md",
    "langchain": "langchain.md",
    "openai-agents": "openai-agents.md",
    "langgraph-saver": "langgraph-checkpointer.md",
    "langgraph-store": "langgraph-store.md",
}


def body(path: Path) -> str:
    """A module's code without its first-line docstring."""
    return path.read_text().split("\n", 2)[2]


EXAMPLES = {
    "sync": test_langchain_history.README_SYNC,
    "langchain": test_langchain_history.README_LANGCHAIN,
    "openai-agents": test_openai_agents.README_EXAMPLE,
    "langgraph-saver": body(ROOT / "tests" / "readme_langgraph_example.py"),
    "langgraph-store": body(ROOT / "tests" / "readme_store_example.py"),
}


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_the_docs_print_the_example_the_tests_run(name: str) -> None:
    code = textwrap.dedent(EXAMPLES[name]).strip("\n")
    page = ROOT / "docs" / "integrations" / PAGES[name]
    assert f"```python\n{code}\n```" in page.read_text(), f"{page.name}'s example differs from the one its test runs"


def test_the_store_example_runs_as_printed(tmp_path: Path) -> None:
    script = tmp_path / "example.py"
    script.write_text(EXAMPLES["langgraph-store"])
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["lives in Oslo", "['city']", "food", "[('users', 'u1')]"]
