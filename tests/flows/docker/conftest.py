"""Docker fixtures (engine, cached base image, tiny model, the nothing-left-behind guard): ``tests/docker_fixtures.py``;
and the remote engine, set up from the first test here while the landings run."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from docker_fixtures import base_image, docker_engine, docker_tiny_model, nothing_left_behind
from support.remote_engine import Prefetch

__all__ = ["base_image", "docker_engine", "docker_tiny_model", "nothing_left_behind", "remote_engine_prefetch"]

REMOTE_ENGINE_TESTS = "test_remote_engine_e2e.py"


@pytest.fixture(scope="session", autouse=True)
def remote_engine_prefetch(request: pytest.FixtureRequest, session_dir: Path, base_image: str) -> Iterator[Prefetch | None]:
    """When the session runs the remote-engine tests: their second engine, its ~4 GB base image loaded
    (``support.remote_engine``: 70-110 s), set up in a thread from the first test in this directory, so the load
    overlaps the landing tests before them instead of adding to the run (the module tears it down at its end)."""
    if not any(item.path.name == REMOTE_ENGINE_TESTS for item in request.session.items):
        yield None
        return
    prefetch = Prefetch(session_dir / "remote-engine" / "dockerd.log", images=[base_image])
    try:
        yield prefetch
    finally:
        prefetch.close()
