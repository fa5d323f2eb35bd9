"""Docker fixtures for the serving tests (engine, cached base image, tiny model; the engine's
teardown is the nothing-left-behind guard): ``tests/docker_fixtures.py``. Only tests that take
``docker_engine`` start or need Docker; the fast tests here import nothing of the Docker SDK."""

from docker_fixtures import base_image, docker_engine, docker_tiny_model

__all__ = ["base_image", "docker_engine", "docker_tiny_model"]
