"""Docker fixtures: a real engine (scripts/docker-up), the local vLLM CPU base image
(scripts/build-test-base-image, cached across sessions), and a guard that nothing roost made is left
behind: when the session ends, every container, image and network labelled ``ai.roost.managed=true``
is removed, and a leaked container fails the session, as does an engine the guard cannot ask. The
cached base images (``ai.roost.base=true``, ``roost/debian-bookworm:minbase``) stay.

The guard is part of ``docker_engine`` (every Docker test uses it), so it runs whenever the engine
was used and only then. Test trees that need Docker import these fixtures in their ``conftest.py``
(``tests/roost/serve``, ``tests/tasks/docker``, ``tests/flows/docker``); ``nothing_left_behind``
(autouse there) makes every test of a Docker-only tree take the engine, and so the guard.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import docker

REPO = Path(__file__).resolve().parents[1]
BASE_IMAGE = os.environ.get("ROOST_TEST_BASE_IMAGE", "roost/vllm-cpu-base:0.32.0")
ROOTFS_IMAGE = "roost/debian-bookworm:minbase"
MANAGED = "ai.roost.managed=true"


def _run_script(name: str, timeout: int) -> str:
    proc = subprocess.run([str(REPO / "scripts" / name)], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"scripts/{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc.stdout.strip()


@pytest.fixture(scope="session")
def docker_engine() -> Iterator[docker.DockerClient]:
    """A client for a running dockerd (started by scripts/docker-up when it is not running).

    At the end of the session: nothing roost made may remain (see the module doc); a guard that
    cannot ask the engine fails instead of passing.
    """
    import docker

    _run_script("docker-up", timeout=300)
    client = docker.from_env(version="auto", timeout=300)
    try:
        yield client
        _check_nothing_left(client)
    finally:
        client.close()


@pytest.fixture(scope="session")
def base_image(docker_engine: docker.DockerClient) -> str:
    """The local stand-in for nvcr.io/nvidia/vllm (built once, kept between sessions)."""
    # ROOST_HOME is per session in tests; the rootfs tarball cache belongs to the real home.
    env_home = os.environ.get("ROOST_HOME")
    os.environ["ROOST_HOME"] = str(Path.home() / ".cache" / "roost")
    try:
        _run_script("build-test-base-image", timeout=3600)
    finally:
        if env_home is not None:
            os.environ["ROOST_HOME"] = env_home
    return BASE_IMAGE


def _leftovers(client: docker.DockerClient) -> tuple[list[str], list[str], list[str]]:
    containers = [str(c.name) for c in client.containers.list(all=True, filters={"label": MANAGED})]
    images = [str(i.id) for i in client.images.list(all=True, filters={"label": MANAGED})]
    networks = [str(n.name) for n in client.networks.list(filters={"label": MANAGED})]
    return containers, images, networks


def _clean(client: docker.DockerClient) -> None:
    from docker.errors import APIError, NotFound

    for c in client.containers.list(all=True, filters={"label": MANAGED}):
        with contextlib.suppress(NotFound):
            c.remove(force=True)
    for n in client.networks.list(filters={"label": MANAGED}):
        with contextlib.suppress(NotFound):
            n.remove()
    for _ in range(3):  # child images first: retry until the labelled set is empty
        images = client.images.list(all=True, filters={"label": MANAGED})
        if not images:
            break
        for i in images:
            with contextlib.suppress(NotFound, APIError):
                client.images.remove(str(i.id), force=True, noprune=False)
    # No `images.prune`: other builds (a base image, another session) may be running on the engine,
    # and their stage images are dangling until they finish.


def _check_nothing_left(client: docker.DockerClient) -> None:
    """Fail when a roost container is left (then remove it and every roost image and network);
    fail too when the engine cannot be asked: a guard that cannot look must not pass."""
    try:
        client.ping()
        containers, _, _ = _leftovers(client)
        _clean(client)
        after = _leftovers(client)
    except Exception as exc:  # DockerException, or requests' ConnectionError from an engine gone away
        pytest.fail(f"the leak guard cannot ask the Docker engine what roost left behind: {exc}")
    assert after == ([], [], []), f"could not remove roost leftovers (containers, images, networks): {after}"
    assert not containers, f"tests left roost containers behind: {containers}"


@pytest.fixture(scope="session", autouse=True)
def nothing_left_behind(docker_engine: docker.DockerClient) -> None:
    """Autouse in Docker-only test trees: each of their tests takes the engine and so its guard."""


@pytest.fixture(scope="session")
def docker_tiny_model(session_dir: Path) -> Path:
    """The demo checkpoint for container tests (own copy: mounted read-only into containers)."""
    from roost.demo.model import generate_tiny_model

    return generate_tiny_model(session_dir / "docker-tiny-model", seed=0, num_shards=2)
