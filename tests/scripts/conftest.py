"""Docker fixtures for ``scripts/install-spark``'s box tests (``tests/docker_fixtures.py``); only tests that
take ``docker_engine`` start Docker."""

from docker_fixtures import base_image, docker_engine

__all__ = ["base_image", "docker_engine"]
