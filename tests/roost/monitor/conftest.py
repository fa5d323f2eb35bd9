"""Docker fixtures for the container tests of ``roost monitor up`` (engine; the rootfs image the test
Prometheus image is built on): ``tests/docker_fixtures.py``. Only tests that take ``docker_engine``
start Docker."""

from docker_fixtures import base_image, docker_engine

__all__ = ["base_image", "docker_engine"]
