"""Every test here needs Docker: ``nothing_left_behind`` (autouse) takes the engine and its leak
guard for each (the engine, base image and tiny model fixtures come from ``tests/roost/serve/conftest.py``)."""

from docker_fixtures import nothing_left_behind

__all__ = ["nothing_left_behind"]
