"""Docker discovery reads roost's container labels on a real engine, and nothing else."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest

from roost.hosts import CPU
from roost.serve.discover import probe
from roost.serve.docker.backend import DockerBackend

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]

ROOTFS_IMAGE = "roost/debian-bookworm:minbase"


def test_lists_running_roost_containers_of_the_host(docker_engine: docker.DockerClient, base_image: str) -> None:
    host = CPU.model_copy(update={"name": "discover", "backend": "docker"})
    labels = {"ai.roost.managed": "true", "ai.roost.host": "discover", "ai.roost.model": "tiny", "ai.roost.port": "18123"}
    made = []
    try:
        made.append(docker_engine.containers.run(ROOTFS_IMAGE, ["sleep", "120"], name="roost-discover-tiny",
                                                 labels=labels, detach=True))
        made.append(docker_engine.containers.run(ROOTFS_IMAGE, ["true"], name="roost-discover-exited",
                                                 labels=labels | {"ai.roost.model": "gone"}, detach=True))
        made[-1].wait(timeout=60)
        made.append(docker_engine.containers.run(ROOTFS_IMAGE, ["sleep", "120"], name="not-roost-discover",
                                                 labels={k: v for k, v in labels.items() if k != "ai.roost.managed"},
                                                 detach=True))
        made.append(docker_engine.containers.run(ROOTFS_IMAGE, ["sleep", "120"], name="roost-elsewhere-tiny",
                                                 labels=labels | {"ai.roost.host": "elsewhere"}, detach=True))
        (found,) = DockerBackend(host, client=docker_engine).servers()
        assert (found.container, found.served_model_name, found.port, found.backend, found.host) == (
            "roost-discover-tiny", "tiny", 18123, "docker", "discover")
        assert found.base_url == "http://127.0.0.1:18123" and found.started_at is not None
        assert (found.image, found.log_location) == (ROOTFS_IMAGE, "docker logs roost-discover-tiny")
        assert probe(found, None, timeout_s=2) == "unreachable"
    finally:
        for c in made:
            with contextlib.suppress(Exception):
                c.remove(force=True)
