"""docker-compose.yml's `server` runs `helix-es serve` on the projector's image, with the service extra.

The stack itself runs in scripts/ci-docker (a real Docker engine); these checks keep the file,
the sample keys and both image builds agreeing without one.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent


def compose() -> dict[str, Any]:
    services: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    return services


def test_server_runs_helix_es_serve_on_the_projector_image() -> None:
    services = compose()
    server, projector = services["server"], services["projector"]
    assert server["image"] == projector["image"]
    assert server["build"] == projector["build"]
    command = server["command"]
    assert command[:2] == ["helix-es", "serve"]
    assert command[command.index("--config") + 1] == "/config/helix.yaml"
    assert command[command.index("--keys") + 1] == "/config/keys.json"
    assert command[command.index("--host") + 1] == "0.0.0.0"  # reachable through the published port
    port = command[command.index("--port") + 1]
    assert any(p.startswith("127.0.0.1:") and p.endswith(f":{port}") for p in server["ports"])
    assert server["volumes"] == projector["volumes"]
    assert server["environment"] == projector["environment"]
    assert set(server["depends_on"]) == {"kafka", "redis", "postgres"}


def test_server_healthcheck_asks_healthz() -> None:
    check = compose()["server"]["healthcheck"]
    assert check["test"][0] == "CMD"
    assert any("/healthz" in part for part in check["test"])
    assert "python3.11" in check["test"]  # no curl in either image; both have python3.11 on PATH


def test_sample_keys_file_maps_keys_to_namespaces() -> None:
    keys = json.loads((ROOT / "scripts" / "docker" / "keys.json").read_text())
    assert keys and all(isinstance(k, str) and k for k in keys)
    assert all(isinstance(v, list) and v and all(isinstance(n, str) for n in v) for v in keys.values())


def test_both_image_builds_install_the_service_extra() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "service" in extras
    dockerfile = (ROOT / "scripts" / "docker" / "projector.Dockerfile").read_text()
    assert re.search(r"pip install '\.\[service\]'", dockerfile)
    images = (ROOT / "scripts" / "images").read_text()
    assert re.search(r"helix_es-\*\.whl\"?\)\[service\]", images)
