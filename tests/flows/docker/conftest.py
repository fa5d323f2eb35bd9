"""The docker fixtures of tests/roost/serve/docker/conftest.py (engine, cached base image, tiny
model, the session's nothing-left-behind guard), loaded from that file so both trees share them."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[2] / "roost" / "serve" / "docker" / "conftest.py"
_spec = importlib.util.spec_from_file_location("roost_docker_fixtures", _path)
assert _spec is not None and _spec.loader is not None
_mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mod)

docker_engine = _mod.docker_engine
base_image = _mod.base_image
docker_tiny_model = _mod.docker_tiny_model
nothing_left_behind = _mod.nothing_left_behind
