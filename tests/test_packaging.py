"""The wheel users install carries every module, every schema version and the web console's files; the
sdist carries the console too (a wheel built from it serves /ui/)."""

from __future__ import annotations

import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CONSOLE = sorted(p.name for p in (ROOT / "helix_es" / "service" / "console").iterdir())  # served at /ui/


def test_wheel_has_every_module_and_schema(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        check=True,
        timeout=300,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("helix_es-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in ("helix_es", "projectors"):
        for source in (ROOT / package).rglob("*.py"):
            assert str(source.relative_to(ROOT)) in names, f"{source.relative_to(ROOT)} is missing from the wheel"
    for schema in (ROOT / "schemas").glob("*.avsc"):
        assert f"helix_es/schemas/{schema.name}" in names
    for asset in CONSOLE:
        assert f"helix_es/service/console/{asset}" in names, f"the console's {asset} is missing from the wheel"


def test_sdist_has_the_console(tmp_path: Path) -> None:
    assert {"index.html", "app.js", "style.css"} <= set(CONSOLE)
    build = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    done = subprocess.run(
        [sys.executable, "-c", build, str(tmp_path)], cwd=ROOT, check=True, timeout=300, capture_output=True, text=True
    )
    sdist = tmp_path / done.stdout.strip().splitlines()[-1]
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    for asset in CONSOLE:
        assert f"helix_es/service/console/{asset}" in names, f"the console's {asset} is missing from the sdist"
