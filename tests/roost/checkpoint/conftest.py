"""Header-exact replicas, written once per session (sparse files: a few MB for 70 GB of 'weights')."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import replicas


@pytest.fixture(scope="session")
def replica_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("replicas")


@pytest.fixture(scope="session")
def ornith_9b_dir(replica_root: Path) -> Path:
    return replicas.write_replica(replicas.ornith_9b(), replica_root / "ornith-9b")


@pytest.fixture(scope="session")
def ornith_35b_dir(replica_root: Path) -> Path:
    return replicas.write_replica(replicas.ornith_35b_a3b(), replica_root / "ornith-35b")


@pytest.fixture(scope="session")
def nvfp4_dir(replica_root: Path) -> Path:
    """A shrunk (8 layers, 32 experts) ModelOpt NVFP4 MoE with MTP: same structure, fast to write."""
    return replicas.write_replica(replicas.nvfp4_moe_mtp(layers=8, experts=32, num_shards=3), replica_root / "nvfp4")
