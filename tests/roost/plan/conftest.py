"""Replicas for the plan tests (sparse; written once per session)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import replicas


@pytest.fixture(scope="session")
def plan_9b_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replicas.write_replica(replicas.ornith_9b(), tmp_path_factory.mktemp("plan") / "ornith-9b")


@pytest.fixture(scope="session")
def plan_35b_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replicas.write_replica(replicas.ornith_35b_a3b(), tmp_path_factory.mktemp("plan") / "ornith-35b")
