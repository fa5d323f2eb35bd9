"""A dataset repository in huggingface_hub's cache through roost's client (roost/hub/cache.py), against a
real olah on loopback: the same layout as huggingface_hub's own download, each cache read by the other,
the cache alone offline or when the Hub does not answer, and every fetched file verified."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from roost.errors import UserError
from roost.hub._retries import RetryPolicy
from roost.hub.cache import NotInCache, RepoCache, download_to_cache
from roost.hub.integrity import IntegrityError
from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo
from roost.net import free_port

REPO = "acme/evalset"
ALLOW = ["*.parquet", "*.jsonl", "*.json"]


@pytest.fixture(scope="module")
def dataset_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubMirror, str]]:
    base = tmp_path_factory.mktemp("dataset-hub")
    src = base / "src"
    (src / "main").mkdir(parents=True)
    (src / "main" / "test-00000-of-00001.parquet").write_bytes(os.urandom(200_000))  # LFS: named by sha256
    (src / "main" / "train.jsonl").write_text('{"question": "q", "answer": "#### 1"}\n' * 50)
    (src / "empty.json").write_text("")
    (src / "README.md").write_text("# evalset\n")
    sha = publish_repo(src, base / "mirrors", REPO, repo_type="datasets")
    mirror = HubMirror(base / "mirrors", workdir=base / "olah")
    mirror.start()
    try:
        yield mirror, sha
    finally:
        mirror.stop()


@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh cache directory, online (huggingface_hub reads its settings once, at import)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return tmp_path / "hub"


def _tree(root: Path) -> dict[str, str]:
    """Every path under ``root``: a symlink's target, a blob's size, another file's text."""
    out: dict[str, str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = "-> " + os.readlink(p)
        elif p.is_dir():
            out[rel] = "dir"
        elif rel == "CACHEDIR.TAG":
            out[rel] = "a cache directory tag"
        elif "/blobs/" in rel:
            out[rel] = f"{p.stat().st_size} bytes"
        else:
            out[rel] = p.read_text()
    return out


def test_the_layout_is_huggingface_hubs_and_each_reads_the_others_cache(
    dataset_hub: tuple[HubMirror, str], hf_cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from huggingface_hub import constants, snapshot_download

    mirror, sha = dataset_hub
    theirs = Path(snapshot_download(REPO, repo_type="dataset", endpoint=mirror.endpoint, allow_patterns=ALLOW))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_cache.parent / "roost"))
    ours = download_to_cache(REPO, endpoint=mirror.endpoint, allow_patterns=ALLOW)
    assert (ours.commit, ours.path.name, theirs.name) == (sha, sha, sha)
    assert ours.fetched_bytes > 200_000 and not ours.cache_only
    assert _tree(hf_cache) == _tree(hf_cache.parent / "roost")  # refs, blobs, links, trees, locks
    assert sorted(p.relative_to(ours.path).as_posix() for p in ours.path.rglob("*") if p.is_file()) == [
        "empty.json", "main/test-00000-of-00001.parquet", "main/train.jsonl"]

    # huggingface_hub reads roost's cache offline; roost reads huggingface_hub's without fetching a byte
    assert snapshot_download(REPO, repo_type="dataset", allow_patterns=ALLOW, local_files_only=True) == str(ours.path)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hf_cache))
    again = download_to_cache(REPO, endpoint=mirror.endpoint, allow_patterns=ALLOW)
    assert (again.path, again.fetched_bytes) == (theirs, 0)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for revision in ("main", sha):
        offline = download_to_cache(REPO, revision=revision, endpoint=mirror.endpoint, allow_patterns=ALLOW)
        assert (offline.path, offline.cache_only) == (theirs, True)


def test_the_cache_answers_when_the_hub_does_not(dataset_hub: tuple[HubMirror, str], hf_cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    mirror, sha = dataset_hub
    dead = f"http://127.0.0.1:{free_port()}"
    once = RetryPolicy(attempts=1, unanswered_attempts=1)
    with pytest.raises(NotInCache, match=rf"{REPO}@main is not in the Hub cache .* the Hub did not answer"):
        download_to_cache(REPO, endpoint=dead, allow_patterns=ALLOW, retry=once)
    warm = download_to_cache(REPO, endpoint=mirror.endpoint, allow_patterns=ALLOW)
    cached = download_to_cache(REPO, endpoint=dead, allow_patterns=ALLOW, retry=once)
    assert (cached.commit, cached.path, cached.cache_only) == (sha, warm.path, True)

    # offline, a snapshot missing a file its listing names is not taken
    (warm.path / "main" / "train.jsonl").unlink()
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(NotInCache, match="HF_HUB_OFFLINE is set"):
        download_to_cache(REPO, endpoint=mirror.endpoint, allow_patterns=ALLOW)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    mended = download_to_cache(REPO, endpoint=mirror.endpoint, allow_patterns=ALLOW)
    assert (mended.path / "main" / "train.jsonl").is_file() and mended.fetched_bytes == 0  # its blob was there


def test_a_file_that_does_not_match_the_listing_is_refused_and_dropped(
    dataset_hub: tuple[HubMirror, str], hf_cache: Path
) -> None:
    mirror, sha = dataset_hub
    warm = download_to_cache(REPO, endpoint=mirror.endpoint, allow_patterns=ALLOW)
    cache = RepoCache(hf_cache, REPO, "dataset")
    listing = cache.read_tree(sha)
    assert listing is not None
    jsonl = next(f for f in listing if f.path == "main/train.jsonl")
    wrong = jsonl.model_copy(update={"blob_id": "0" * 40})
    cache.write_tree(sha, [wrong if f is jsonl else f for f in listing])  # the listing now names other bytes
    (warm.path / "main" / "train.jsonl").unlink()
    with pytest.raises(IntegrityError, match=r"main/train.jsonl: git blob id expected 0{40}, found"):
        download_to_cache(REPO, endpoint=mirror.endpoint, allow_patterns=ALLOW)
    assert not cache.blob(wrong).exists() and not cache.blob(wrong).with_suffix(".incomplete").exists()
    assert not (warm.path / "main" / "train.jsonl").exists()


def test_a_revision_git_would_not_accept_is_refused_before_any_request(hf_cache: Path) -> None:
    with pytest.raises(UserError, match=r"revision '\.\./\.\./x' of acme/evalset is not a branch, tag or commit"):
        download_to_cache(REPO, revision="../../x", endpoint=f"http://127.0.0.1:{free_port()}")
    assert not hf_cache.exists()
