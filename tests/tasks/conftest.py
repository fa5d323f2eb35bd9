"""Fixtures for the task tests."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from roost.settings import ROOST_LOGGER


@pytest.fixture
def roost_to_the_api() -> Iterator[None]:
    """``roost`` as Prefect sets it up when it is an extra logger (``PREFECT_LOGGING_EXTRA_LOGGERS``, as
    ``roost run`` and the deployments set it): its API handler, at INFO (``flows/identity.py``), so a
    flow run in this process gets roost's module loggers' lines (a server's, ``tasks/serve.py``)."""
    from prefect.logging.handlers import APILogHandler

    logger = logging.getLogger(ROOST_LOGGER)
    handler, level = APILogHandler(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
