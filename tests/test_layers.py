"""The code's shape, as docs/architecture.md tells it: checked from the imports themselves.

The layer contracts are import-linter's (pyproject.toml, `lint-imports`, also run by scripts/test);
these tests add what it cannot say: no module imports the package it belongs to, no lazy
attributes in the package root, and modules of one concern stay small.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("helix_es", "projectors")
MAX_LINES = 500  # "none over about 500 lines"


def _graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES)


def test_the_import_contracts_hold() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


def test_no_module_imports_the_package_it_belongs_to() -> None:
    graph = _graph()
    found = []
    for module in sorted(graph.modules):
        for imported in graph.find_modules_directly_imported_by(module):
            if module.startswith(imported + "."):
                found.append(f"{module} -> {imported}")
    assert found == []


def test_the_library_never_imports_projectors_and_projectors_never_the_cli() -> None:
    graph = _graph()

    def cli(module: str) -> bool:
        return module == "helix_es.cli" or module.startswith("helix_es.cli.")

    library = [m for m in graph.modules if m.split(".")[0] == "helix_es" and not cli(m)]
    wrong = [
        (m, i) for m in library for i in graph.find_modules_directly_imported_by(m) if i.split(".")[0] == "projectors"
    ]
    wrong += [
        (m, i)
        for m in graph.modules
        if m.split(".")[0] == "projectors"
        for i in graph.find_modules_directly_imported_by(m)
        if cli(i)
    ]
    assert wrong == []


def test_the_package_root_has_no_lazy_attributes() -> None:
    tree = ast.parse((ROOT / "helix_es" / "__init__.py").read_text())
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    assert "__getattr__" not in functions
    import helix_es

    for name in helix_es.__all__:
        assert name in vars(helix_es), f"helix_es.{name} is not bound when the package is imported"


def test_modules_stay_small() -> None:
    big = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            lines = len(path.read_text().splitlines())
            if lines > MAX_LINES:
                big[str(path.relative_to(ROOT))] = lines
    assert big == {}


def test_the_package_ships_its_type_information() -> None:
    assert (ROOT / "helix_es" / "py.typed").is_file()


def test_every_package_is_installed() -> None:
    """A package missing from pyproject's list imports from a checkout and is absent from a wheel or an image."""
    import tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("helix_es", "projectors")
        for p in (ROOT / top).glob("**/__init__.py")
    }
    assert found - listed == set()


def test_no_store_adapter_names_an_event_type() -> None:
    """A view owns what an event means: its fold turns events into the view's ops, and a store
    applies ops. An event type named under `helix_es/stores/` (code or comment) is meaning leaking
    into an adapter, which a new event would then have to touch."""
    from typing import get_args

    from helix_es.model.events import Payload

    types = [t.__name__ for t in get_args(Payload)]
    assert len(types) >= 10
    found = []
    for path in sorted((ROOT / "helix_es" / "stores").rglob("*.py")):
        text = path.read_text()
        found += [f"{path.relative_to(ROOT)}: {t}" for t in types if re.search(rf"\b{t}\b", text)]
    assert found == []


def _imports_of(path: Path) -> set[str]:
    """The top-level packages a module imports (anywhere in it: functions and TYPE_CHECKING blocks too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_log_layer_imports_the_kafka_client() -> None:
    log = ROOT / "helix_es" / "log"
    wrong = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if not path.is_relative_to(log) and "aiokafka" in _imports_of(path)
    ]
    assert wrong == [], f"import aiokafka only under helix_es/log/ (use helix_es.log.kafka_clients): {wrong}"


def test_only_the_store_layer_imports_the_store_drivers() -> None:
    stores = ROOT / "helix_es" / "stores"
    drivers = {"asyncpg", "redis"}
    wrong = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if not path.is_relative_to(stores) and drivers & _imports_of(path)
    ]
    assert wrong == [], f"import asyncpg and redis only under helix_es/stores/ (registry.transient, ...): {wrong}"


LOG_KINDS = {"kafka", "embedded"}
LOG_KIND_MODULE = ROOT / "helix_es" / "log" / "kind.py"


def _log_kind_literals(path: Path) -> list[int]:
    """Lines comparing something to a log kind's name (`log.type == "kafka"`, `kind in ("embedded", ...)`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Compare):
            continue
        for side in [node.left, *node.comparators]:
            names = side.elts if isinstance(side, ast.Tuple | ast.List | ast.Set) else [side]
            if any(isinstance(n, ast.Constant) and n.value in LOG_KINDS for n in names):
                found.append(node.lineno)
    return found


def test_only_the_log_kind_module_compares_to_a_log_kinds_name() -> None:
    """What `log.type` means is decided once, in helix_es/log/kind.py (`LogConfig.kind`): everywhere
    else asks a kind's properties (broker, inline, groups), so a new log kind changes one module."""
    found = [
        f"{path.relative_to(ROOT)}:{line}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path != LOG_KIND_MODULE
        for line in _log_kind_literals(path)
    ]
    assert found == [], f"ask LogConfig.kind (helix_es.log.kind) instead: {found}"
