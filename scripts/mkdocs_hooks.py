"""mkdocs hooks: the benchmark notes and pictures the pages show, served from where they live.

`bench/NOTES.md`, `bench/latency.png` and `bench/screenshots/*.png` are written by the benchmark
scripts under `bench/`; the site takes them from there, so the pages link to one copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parent.parent
SHARED = [
    "bench/NOTES.md",
    "bench/latency.png",
    "bench/screenshots/console-timeline.png",
    "bench/screenshots/console-diff.png",
    "bench/screenshots/console-facts.png",
]


def on_files(files: Files, config: Any) -> Files:
    for src in SHARED:
        files.append(File.generated(config, src, abs_src_path=str(ROOT / src)))
    return files
