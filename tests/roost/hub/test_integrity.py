"""Digests and the mismatch sentence (one definition, one test each)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from pathlib import Path

import pytest

from roost.errors import CheckFailed
from roost.hub.integrity import FileDigest, HubFile, IntegrityError, check_digest, hash_file, hash_files


def test_hash_file_matches_hashlib_and_git_hash_object(tmp_path: Path) -> None:
    data = os.urandom(9 * 1024 * 1024 + 17)  # more than two read chunks
    path = tmp_path / "blob"
    path.write_bytes(data)
    counted: list[int] = []

    digest = hash_file(path, git_blob=True, on_bytes=counted.append)

    git_oid = subprocess.run(
        ["git", "hash-object", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert digest.sha256 == hashlib.sha256(data).hexdigest()
    assert digest.git_sha1 == git_oid
    assert digest.size == len(data) == sum(counted)


def test_hash_files_in_parallel_gives_the_same_digests(tmp_path: Path) -> None:
    paths = []
    for i in range(5):
        p = tmp_path / f"f{i}"
        p.write_bytes(os.urandom(100_000 * (i + 1)))
        paths.append(p)
    parallel = hash_files(paths, workers=4)
    assert {p: d.sha256 for p, d in parallel.items()} == {
        p: hashlib.sha256(p.read_bytes()).hexdigest() for p in paths
    }


def test_check_digest_names_file_expected_and_found() -> None:
    hub = HubFile(path="model.safetensors", size=3, blob_id="b" * 40, lfs_sha256="a" * 64)
    ok = hash_file_digest(b"abc")
    assert check_digest(hub.model_copy(update={"lfs_sha256": ok.sha256}), ok) is None
    mismatch = check_digest(hub, ok)
    assert mismatch is not None
    assert mismatch.sentence() == f"model.safetensors: sha256 expected {'a' * 64}, found {ok.sha256}"
    short = check_digest(hub.model_copy(update={"size": 4}), ok)
    assert short is not None and short.field == "size"
    err = IntegrityError([mismatch], "run again")
    assert isinstance(err, CheckFailed) and err.exit_code == 1
    assert "model.safetensors" in str(err) and "a" * 64 in str(err) and ok.sha256 in str(err)


def test_non_lfs_files_are_checked_by_git_blob_id() -> None:
    content = b'{"a": 1}\n'
    blob_id = hashlib.sha1(b"blob %d\x00" % len(content) + content).hexdigest()
    hub = HubFile(path="config.json", size=len(content), blob_id=blob_id)
    assert hub.expected_digest == f"git-sha1:{blob_id}"
    assert check_digest(hub, hash_file_digest(content, git_blob=True)) is None
    bad = check_digest(hub, hash_file_digest(b'{"a": 2}\n', git_blob=True))
    assert bad is not None and bad.field == "git blob id" and bad.expected == blob_id


def hash_file_digest(data: bytes, git_blob: bool = False) -> FileDigest:
    with tempfile.NamedTemporaryFile() as t:
        t.write(data)
        t.flush()
        return hash_file(Path(t.name), git_blob=git_blob)


@pytest.mark.parametrize("chunk", [1, 4096, 8 * 1024 * 1024])
def test_any_read_size_gives_the_same_digest(tmp_path: Path, chunk: int) -> None:
    p = tmp_path / "f"
    p.write_bytes(os.urandom(20_000))
    assert hash_file(p, chunk_size=chunk).sha256 == hashlib.sha256(p.read_bytes()).hexdigest()
