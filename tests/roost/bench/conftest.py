"""Fixtures of the benchmark tests: the synthetic streaming server (the ground truth; see
``synthetic_server.py``), started as its own process once per module and stopped after."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from bench_synthetic import Synthetic, start_synthetic


@pytest.fixture(scope="module")
def synthetic() -> Iterator[Synthetic]:
    server = start_synthetic()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fresh_synthetic() -> Iterator[Synthetic]:
    """A server of its own, for a test that kills it."""
    server = start_synthetic()
    try:
        yield server
    finally:
        server.stop()
