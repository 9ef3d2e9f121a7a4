"""The wheel users install carries every module and every schema version."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
    for asset in (ROOT / "helix_es" / "service" / "console").glob("*"):  # the web console helix-es serve mounts at /ui/
        assert f"helix_es/service/console/{asset.name}" in names, f"console/{asset.name} is missing from the wheel"
