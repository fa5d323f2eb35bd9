"""The results store's tests run against both kinds of store: a directory and an S3-compatible bucket
(moto's server on loopback, ``support.s3``: a stand-in for S3), through the same ``ObjectStore``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.s3 import MotoS3

from roost.store.objects import LocalStore, ObjectStore
from roost.store.s3 import S3Store


@pytest.fixture(scope="session")
def s3_server(session_dir: Path) -> Iterator[MotoS3]:
    with MotoS3(session_dir / "moto") as server:
        yield server


def new_bucket(s3: MotoS3) -> str:
    name = f"roost-{uuid.uuid4().hex[:12]}"
    s3.create_bucket(name)
    return name


@pytest.fixture
def s3_store(s3_server: MotoS3) -> S3Store:
    return S3Store(new_bucket(s3_server), "team/results", s3_server.credentials())


@pytest.fixture(params=["dir", "s3"])
def any_store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A fresh empty store of each kind."""
    if request.param == "dir":
        return LocalStore(tmp_path / "store")
    s3: MotoS3 = request.getfixturevalue("s3_server")
    return S3Store(new_bucket(s3), "team/results", s3.credentials())
