"""publish_repo writes olah's local-mirror layout: non-bare git, branch main, LFS pointers + objects."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from roost.errors import UserError
from roost.hub.publish import lfs_object_path, lfs_pointer, mirror_repo_path, publish_repo


def git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, check=True, text=True
    ).stdout.strip()


def test_large_files_become_lfs_pointers_small_files_blobs(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    weights = b"\x01\x02" * 5000
    (src / "model.safetensors").write_bytes(weights)
    (src / "config.json").write_text('{"a": 1}\n')
    (src / "sub").mkdir()
    (src / "sub" / "big.txt").write_bytes(b"x" * 2048)

    commit = publish_repo(src, tmp_path / "mirrors", "acme/x", lfs_min_bytes=1024)

    repo = mirror_repo_path(tmp_path / "mirrors", "acme/x")
    assert repo == tmp_path / "mirrors" / "models" / "acme" / "x"
    assert (repo / ".git").is_dir()  # non-bare, as olah expects
    assert git(repo, "rev-parse", "refs/heads/main") == commit
    assert git(repo, "symbolic-ref", "HEAD") == "refs/heads/main"
    sha = hashlib.sha256(weights).hexdigest()
    assert git(repo, "show", f"{commit}:model.safetensors").encode() + b"\n" == lfs_pointer(sha, len(weights))
    assert lfs_object_path(repo, sha).read_bytes() == weights
    assert git(repo, "show", f"{commit}:config.json") == '{"a": 1}'
    big_sha = hashlib.sha256(b"x" * 2048).hexdigest()
    assert git(repo, "show", f"{commit}:sub/big.txt").startswith("version https://git-lfs.github.com/spec/v1")
    assert lfs_object_path(repo, big_sha).exists()
    attrs = git(repo, "show", f"{commit}:.gitattributes")
    assert "*.safetensors filter=lfs" in attrs and "sub/big.txt filter=lfs" in attrs


def test_second_publish_adds_a_commit_and_keeps_the_first(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("1\n")
    first = publish_repo(src, tmp_path / "m", "acme/x", tag="v1")
    (src / "config.json").write_text("2\n")
    second = publish_repo(src, tmp_path / "m", "acme/x")
    repo = mirror_repo_path(tmp_path / "m", "acme/x")

    assert first != second
    assert git(repo, "rev-parse", f"{second}^") == first
    assert git(repo, "rev-parse", "v1^{commit}") == first
    assert git(repo, "show", f"{first}:config.json") == "1"
    assert git(repo, "show", f"{second}:config.json") == "2"
    assert publish_repo(src, tmp_path / "m", "acme/x") == second  # nothing changed: no new commit


def test_bad_repo_id_and_empty_source_are_user_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="ORG/NAME"):
        publish_repo(tmp_path, tmp_path / "m", "no-slash")
    with pytest.raises(UserError, match="holds no files"):
        publish_repo(tmp_path / "empty", tmp_path / "m", "acme/x")
