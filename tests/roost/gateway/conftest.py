"""Fixtures of the gateway tests: ``roost gateway serve`` in front of the synthetic server (FAKE
backend, ``tests/roost/bench/synthetic_server.py``), with a SQLite usage database in the module's
directory (``support.gateway``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from bench_synthetic import Synthetic, start_synthetic
from support.gateway import UPSTREAM_KEY, GatewayProcess


@pytest.fixture(scope="module")
def backend() -> Iterator[Synthetic]:
    """The synthetic server as the gateway's backend, requiring the upstream key."""
    server = start_synthetic(api_key=UPSTREAM_KEY)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def gw_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("gateway")


@pytest.fixture(scope="module")
def gateway(backend: Synthetic, gw_dir: Path) -> Iterator[GatewayProcess]:
    """A gateway in front of the synthetic server with short limits (1 MiB bodies, 2 s to send a body,
    2 s of a client not reading)."""
    gw = GatewayProcess(f"sqlite:///{gw_dir / 'usage.db'}", [backend.base_url], log_path=gw_dir / "gateway.log",
                        extra=["--max-body-mb", "1", "--body-timeout", "2", "--client-timeout", "2",
                               "--poll-interval", "0.5"])
    gw.start()
    try:
        yield gw
    finally:
        gw.stop()
