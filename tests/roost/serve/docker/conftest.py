"""Docker fixtures (engine, cached base image, tiny model, the nothing-left-behind guard): ``tests/docker_fixtures.py``."""

from docker_fixtures import base_image, docker_engine, docker_tiny_model, nothing_left_behind

__all__ = ["base_image", "docker_engine", "docker_tiny_model", "nothing_left_behind"]
