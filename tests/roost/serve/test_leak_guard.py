"""The Docker leak guard (``tests/docker_fixtures.py``) fails when it cannot ask the engine: a guard
that cannot look must never pass."""

from __future__ import annotations

from pathlib import Path

import docker
import pytest
from docker_fixtures import _check_nothing_left


def test_an_unreachable_engine_fails_the_guard(tmp_path: Path) -> None:
    client = docker.DockerClient(base_url=f"unix://{tmp_path / 'no-engine.sock'}", version="1.41", timeout=5)
    with pytest.raises(pytest.fail.Exception, match="cannot ask the Docker engine"):
        _check_nothing_left(client)
    client.close()
