"""The olah mirror answers huggingface_hub the way the Hub does (real olah, real huggingface_hub)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from hub_samples import PRIVATE, REPO, SharedHub, sha256_of
from huggingface_hub import HfApi, hf_hub_download, snapshot_download
from huggingface_hub.errors import RepositoryNotFoundError
from huggingface_hub.hf_api import RepoFile
from support.hub import local_hub, shard_name, write_checkpoint_files

from roost.errors import UserError
from roost.hub.mirror import HubMirror


def test_branch_and_tag_resolve_to_their_commits(shared_hub: SharedHub) -> None:
    api = HfApi(endpoint=shared_hub.endpoint, token=False)
    assert api.model_info(REPO, revision="main").sha == shared_hub.main
    assert api.model_info(REPO, revision="v1").sha == shared_hub.v1
    refs = api.list_repo_refs(REPO)
    assert {b.name: b.target_commit for b in refs.branches} == {"main": shared_hub.main}
    assert {t.name: t.target_commit for t in refs.tags} == {"v1": shared_hub.v1}


def test_listing_has_sizes_and_lfs_sha256(shared_hub: SharedHub) -> None:
    api = HfApi(endpoint=shared_hub.endpoint, token=False)
    files = {
        f.path: f
        for f in api.list_repo_tree(REPO, revision=shared_hub.v1, recursive=True)
        if isinstance(f, RepoFile)
    }
    shard = files[shard_name(1, 2)]
    assert shard.size == 3_000_000
    assert shard.lfs is not None and shard.lfs.sha256 == sha256_of(shared_hub.v1_src / shard_name(1, 2))
    config = files["config.json"]
    assert config.lfs is None and config.size == (shared_hub.v1_src / "config.json").stat().st_size
    assert "original/consolidated.pth" in files


def test_hf_hub_download_and_snapshot_download_work(shared_hub: SharedHub, tmp_path: Path) -> None:
    path = hf_hub_download(
        REPO,
        shard_name(2, 2),
        revision="v1",
        endpoint=shared_hub.endpoint,
        token=False,
        cache_dir=tmp_path / "cache",
    )
    assert sha256_of(Path(path)) == sha256_of(shared_hub.v1_src / shard_name(2, 2))
    snap = snapshot_download(
        REPO,
        revision="main",
        endpoint=shared_hub.endpoint,
        token=False,
        local_dir=tmp_path / "snap",
        allow_patterns=["*.json"],
    )
    assert (Path(snap) / "config.json").read_text() == (shared_hub.main_src / "config.json").read_text()


def test_private_repo_answers_401_repo_not_found(shared_hub: SharedHub) -> None:
    api = HfApi(endpoint=shared_hub.endpoint, token=False)
    with pytest.raises(RepositoryNotFoundError) as info:
        api.model_info(PRIVATE, revision="main")
    assert info.value.response.status_code == 401


def test_stop_is_idempotent_and_restart_keeps_the_endpoint(tmp_path: Path) -> None:
    src = write_checkpoint_files(tmp_path / "src", shard_sizes=[1000])
    with local_hub(tmp_path / "mirrors", {"acme/a": src}) as (mirror, commits):
        endpoint = mirror.endpoint
        assert (
            HfApi(endpoint=endpoint, token=False).model_info("acme/a", revision="main").sha
            == commits["acme/a"]
        )
        mirror.kill()
        mirror.kill()
        assert not mirror.is_running()
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{endpoint}/api/models/acme/a/refs", timeout=2)
        mirror.start()
        assert mirror.endpoint == endpoint
        assert httpx.get(f"{endpoint}/api/models/acme/a/refs", timeout=5).status_code == 200
        assert any("/api/models/acme/a/refs 200" in r for r in mirror.requests("/refs"))
    assert not mirror.is_running()
    mirror.stop()  # after close: still a no-op
    assert not mirror.workdir.exists()  # a temp workdir is removed on close


def test_a_port_in_use_is_a_user_error_naming_it(tmp_path: Path) -> None:
    blocker = HubMirror(tmp_path / "m1", workdir=tmp_path / "w1").start()
    try:
        clash = HubMirror(tmp_path / "m2", workdir=tmp_path / "w2", port=blocker.port)
        with pytest.raises(UserError, match=f"port {blocker.port} on 127.0.0.1 is already in use"):
            clash.start()
        assert not clash.is_running()
    finally:
        blocker.stop()
