"""download_and_verify against a real olah on loopback: happy path, pinning, tampering, resume,
401/404 without retries, disk preflight."""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hub_samples import PRIVATE, REPO, SharedHub, sha256_of

from roost.errors import CheckFailed, UserError
from roost.hub.download import (
    DownloadProgress,
    DownloadSpec,
    HubUnreachable,
    RetryPolicy,
    download_and_verify,
    format_bytes,
)
from roost.hub.integrity import IntegrityError, state_dir
from roost.hub.mirror import HubMirror
from roost.hub.publish import lfs_object_path, mirror_repo_path, publish_repo
from roost.hub.testing import shard_name, write_checkpoint_files
from roost.net import free_port

SELECTED = {
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors.index.json",
    shard_name(1, 2),
    shard_name(2, 2),
    "tokenizer.json",
    "tokenizer_config.json",
}
FAST_RETRY = RetryPolicy(attempts=8, base_s=0.5, cap_s=4.0)


def git_oid(path: Path) -> str:
    return subprocess.run(
        ["git", "hash-object", str(path)], capture_output=True, text=True, check=True
    ).stdout.strip()


def test_happy_path_fetches_selected_files_and_verifies_each(shared_hub: SharedHub, tmp_path: Path) -> None:
    seen: list[DownloadProgress] = []
    result = download_and_verify(
        DownloadSpec(repo_id=REPO),
        tmp_path / "dl",
        endpoint=shared_hub.endpoint,
        progress=seen.append,
        progress_interval=0.05,
    )

    assert result.commit == shared_hub.main and result.revision == "main" and not result.cached
    assert {f.path for f in result.files} == SELECTED  # README.md, original/*.pth, .gitattributes left out
    for f in result.files:
        local = tmp_path / "dl" / f.path
        src = shared_hub.main_src / f.path
        assert f.verified and f.source == "download"
        assert f.size == local.stat().st_size == src.stat().st_size
        assert f.sha256 == sha256_of(local) == sha256_of(src)
        assert f.lfs == f.path.endswith(".safetensors")
        assert f.git_oid == (None if f.lfs else git_oid(src))
    assert result.bytes == sum(f.size for f in result.files) == result.downloaded_bytes
    assert not (tmp_path / "dl" / "README.md").exists() and not (tmp_path / "dl" / "original").exists()
    downloads = [p for p in seen if p.phase == "download"]
    assert downloads[-1].bytes_done == downloads[-1].bytes_total == result.bytes
    assert downloads[-1].files_done == len(SELECTED) and downloads[-1].rate_bps > 0
    assert [p for p in seen if p.phase == "verify"][-1].bytes_done == result.bytes


def test_warm_rerun_skips_download_and_hashing_with_one_log_line(
    shared_hub: SharedHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = DownloadSpec(repo_id=REPO)
    first = download_and_verify(spec, tmp_path / "dl", endpoint=shared_hub.endpoint)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="roost"):
        t0 = time.perf_counter()
        again = download_and_verify(spec, tmp_path / "dl", endpoint=shared_hub.endpoint)
        warm_s = time.perf_counter() - t0
    roost_lines = [r.getMessage() for r in caplog.records if r.name.startswith("roost")]
    assert again.cached and again.commit == first.commit and again.hashed_bytes == 0 == again.downloaded_bytes
    assert len(roost_lines) == 1 and "skipping download and hashing" in roost_lines[0]
    assert warm_s < 1.0
    assert [f.sha256 for f in again.files] == [f.sha256 for f in first.files]
    # a narrower selection of the same commit is warm too: nothing is fetched or hashed again
    narrow = download_and_verify(
        DownloadSpec(repo_id=REPO, allow_patterns=["*.json"]), tmp_path / "dl", endpoint=shared_hub.endpoint
    )
    assert narrow.cached and {f.path for f in narrow.files} == {p for p in SELECTED if p.endswith(".json")}
    # pinned to the commit, the warm path needs no Hub at all
    offline = download_and_verify(
        spec.pinned(first.commit), tmp_path / "dl", endpoint=f"http://127.0.0.1:{free_port()}"
    )
    assert offline.cached and offline.commit == first.commit


def test_pinning_a_revision_that_is_not_the_branch_head(shared_hub: SharedHub, tmp_path: Path) -> None:
    by_tag = download_and_verify(
        DownloadSpec(repo_id=REPO, revision="v1"), tmp_path / "a", endpoint=shared_hub.endpoint
    )
    assert by_tag.commit == shared_hub.v1 != shared_hub.main
    for name in ("config.json", shard_name(2, 2)):
        assert sha256_of(tmp_path / "a" / name) == sha256_of(shared_hub.v1_src / name)
    by_sha = download_and_verify(
        DownloadSpec(repo_id=REPO, revision=shared_hub.v1.upper()),
        tmp_path / "a",
        endpoint=shared_hub.endpoint,
    )
    assert by_sha.commit == shared_hub.v1 and by_sha.cached

    # moving the same directory to main fetches only what differs between the commits
    moved = download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "a", endpoint=shared_hub.endpoint)
    sources = {f.path: f.source for f in moved.files}
    assert moved.commit == shared_hub.main
    assert sources[shard_name(1, 2)] == "cache"
    assert sources[shard_name(2, 2)] == "download"  # same size, other bytes: hashed, found stale, fetched
    assert sources["config.json"] == "download"
    assert sha256_of(tmp_path / "a" / shard_name(2, 2)) == sha256_of(shared_hub.main_src / shard_name(2, 2))


def test_a_file_tampered_with_after_download_is_caught_by_name(shared_hub: SharedHub, tmp_path: Path) -> None:
    dl = tmp_path / "dl"
    download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=shared_hub.endpoint)
    shard = dl / shard_name(1, 2)
    expected = sha256_of(shard)
    with open(shard, "r+b") as f:  # same size, one byte flipped
        f.seek(1_500_000)
        byte = f.read(1)
        f.seek(1_500_000)
        f.write(bytes([byte[0] ^ 0xFF]))
    found = sha256_of(shard)

    with pytest.raises(IntegrityError) as info:
        download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=shared_hub.endpoint)
    message = str(info.value)
    assert isinstance(info.value, CheckFailed) and info.value.exit_code == 1
    assert shard_name(1, 2) in message and expected in message and found in message
    assert "changed on disk after roost verified it" in message
    assert sha256_of(shard) == found  # reported, not silently replaced


def test_bytes_served_wrong_by_the_hub_fail_the_run_naming_the_file(
    shared_hub: SharedHub, tmp_path: Path
) -> None:
    src = write_checkpoint_files(tmp_path / "src", shard_sizes=[200_000], seed=5)
    publish_repo(src, shared_hub.mirrors_root, "acme/corrupt")
    expected = sha256_of(src / shard_name(1, 1))
    obj = lfs_object_path(mirror_repo_path(shared_hub.mirrors_root, "acme/corrupt"), expected)
    data = bytearray(obj.read_bytes())
    data[100] ^= 0xFF  # the mirror's stored object rots; the listing still names the right digest
    obj.write_bytes(bytes(data))

    with pytest.raises(IntegrityError) as info:
        download_and_verify(
            DownloadSpec(repo_id="acme/corrupt"), tmp_path / "dl", endpoint=shared_hub.endpoint
        )
    found = hashlib.sha256(bytes(data)).hexdigest()
    assert f"{shard_name(1, 1)}: sha256 expected {expected}, found {found} (as fetched)" in str(info.value)


def test_a_touched_but_unchanged_file_is_rehashed_not_fetched(shared_hub: SharedHub, tmp_path: Path) -> None:
    dl = tmp_path / "dl"
    download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=shared_hub.endpoint)
    shard = dl / shard_name(1, 2)
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))

    result = download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=shared_hub.endpoint)
    sources = {f.path: f.source for f in result.files}
    assert not result.cached and result.downloaded_bytes == 0
    assert sources[shard_name(1, 2)] == "disk" and result.hashed_bytes == st.st_size
    assert {s for p, s in sources.items() if p != shard_name(1, 2)} == {"cache"}


def test_disk_preflight_refuses_early_with_both_numbers(shared_hub: SharedHub, tmp_path: Path) -> None:
    with pytest.raises(UserError) as info:
        download_and_verify(
            DownloadSpec(repo_id=REPO),
            tmp_path / "dl",
            endpoint=shared_hub.endpoint,
            free_space=lambda _p: 123_000,
            margin_bytes=1_000_000,
        )
    total = sum((shared_hub.main_src / p).stat().st_size for p in SELECTED)
    message = str(info.value)
    assert info.value.exit_code == 2
    assert f"needs {format_bytes(total)} more" in message and "123.00 kB is free" in message
    assert "1.00 MB margin" in message
    assert not any(p.is_file() and ".roost" not in p.parts for p in (tmp_path / "dl").rglob("*"))


def test_unknown_repo_404_and_private_repo_401_fail_at_once(
    shared_hub: SharedHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="roost"), pytest.raises(UserError) as missing:
        download_and_verify(
            DownloadSpec(repo_id="acme/no-such-model"), tmp_path / "a", endpoint=shared_hub.endpoint
        )
    assert str(missing.value) == (
        f"repository acme/no-such-model does not exist on {shared_hub.endpoint} (HTTP 404): check the repo id for typos"
    )
    with caplog.at_level(logging.WARNING, logger="roost"), pytest.raises(UserError) as private:
        download_and_verify(DownloadSpec(repo_id=PRIVATE), tmp_path / "b", endpoint=shared_hub.endpoint)
    assert f"repository {PRIVATE} was not found on {shared_hub.endpoint} without a token (HTTP 401)" in str(
        private.value
    )
    assert "set HF_TOKEN" in str(private.value)

    time.sleep(0.3)  # let olah flush its access log
    assert len(shared_hub.mirror.requests("/api/models/acme/no-such-model/")) == 1
    assert len(shared_hub.mirror.requests(f"/api/models/{PRIVATE}/")) == 1
    assert not [r for r in caplog.records if "transient" in r.getMessage()]


def test_a_token_that_cannot_read_a_private_repo_gets_its_own_sentence(
    shared_hub: SharedHub, tmp_path: Path
) -> None:
    secret = "hf_test_" + os.urandom(8).hex()
    with pytest.raises(UserError) as info:
        download_and_verify(
            DownloadSpec(repo_id=PRIVATE), tmp_path, endpoint=shared_hub.endpoint, token=secret
        )
    assert "with the token roost used (HTTP 401)" in str(info.value)
    assert secret not in str(info.value)


def test_a_bad_revision_lists_what_exists(shared_hub: SharedHub, tmp_path: Path) -> None:
    with pytest.raises(
        UserError, match=r"revision 'v2' does not exist in acme/tiny \(branches: main; tags: v1\)"
    ):
        download_and_verify(DownloadSpec(repo_id=REPO, revision="v2"), tmp_path, endpoint=shared_hub.endpoint)


# -------------------------------------------------------------------- transfers cut midway (own olah)

BIG = 24_000_000


@pytest.fixture(scope="module")
def big_hub_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubMirror, Path]]:
    """An olah of its own: these tests kill it mid-transfer."""
    base = tmp_path_factory.mktemp("big-hub")
    src = write_checkpoint_files(base / "src", shard_sizes=[BIG, 500_000], seed=7)
    publish_repo(src, base / "mirrors", "acme/big")
    mirror = HubMirror(base / "mirrors", workdir=base / "olah")
    mirror.start()
    yield mirror, src
    mirror.stop()


@pytest.fixture
def big_hub(big_hub_server: tuple[HubMirror, Path]) -> tuple[HubMirror, Path]:
    big_hub_server[0].start()  # running again if a previous test left it killed
    return big_hub_server


def test_a_transfer_cut_midway_resumes_and_completes(big_hub: tuple[HubMirror, Path], tmp_path: Path) -> None:
    mirror, src = big_hub
    cut: dict[str, object] = {}

    def restart() -> None:
        time.sleep(1.0)
        mirror.start()

    def cut_once(p: DownloadProgress) -> None:
        part_dir = state_dir(tmp_path / "dl") / "partial"
        parts = list(part_dir.glob("*.part")) if part_dir.exists() else []
        big = [q for q in parts if q.stat().st_size > 4_000_000]
        if p.phase == "download" and "at" not in cut and big:
            mirror.kill()  # SIGKILL: the connection drops mid-file
            cut["at"] = big[0].stat().st_size
            cut["inode"] = big[0].stat().st_ino
            threading.Thread(target=restart, daemon=True).start()

    result = download_and_verify(
        DownloadSpec(repo_id="acme/big"),
        tmp_path / "dl",
        endpoint=mirror.endpoint,
        progress=cut_once,
        progress_interval=0.05,
        retry=FAST_RETRY,
    )

    shard = next(f for f in result.files if f.path == shard_name(1, 2))
    assert "at" in cut, "the transfer was never cut"
    assert 0 < shard.resumed_from < BIG
    assert shard.sha256 == sha256_of(src / shard_name(1, 2)) == sha256_of(tmp_path / "dl" / shard_name(1, 2))
    assert (tmp_path / "dl" / shard_name(1, 2)).stat().st_ino == cut["inode"]  # appended to, never rewritten


def test_an_interrupted_run_resumes_from_the_partial_file(
    big_hub: tuple[HubMirror, Path], tmp_path: Path
) -> None:
    mirror, src = big_hub
    dl = tmp_path / "dl"

    def kill_midway(p: DownloadProgress) -> None:
        if p.phase == "download" and p.bytes_done > 6_000_000 and mirror.is_running():
            mirror.kill()

    with pytest.raises(HubUnreachable, match="attempts failed"):
        download_and_verify(
            DownloadSpec(repo_id="acme/big"),
            dl,
            endpoint=mirror.endpoint,
            progress=kill_midway,
            progress_interval=0.05,
            retry=RetryPolicy(attempts=2, base_s=0.1, cap_s=0.2),
        )
    parts = list((state_dir(dl) / "partial").glob("*.part"))
    expected = hashlib.sha256((src / shard_name(1, 2)).read_bytes()).hexdigest()
    assert [p.name for p in parts] == [f"sha256-{expected}.part"]
    kept = parts[0].stat().st_size
    assert 0 < kept < BIG

    mirror.start()
    result = download_and_verify(DownloadSpec(repo_id="acme/big"), dl, endpoint=mirror.endpoint)
    shard = next(f for f in result.files if f.path == shard_name(1, 2))
    assert shard.resumed_from == kept and shard.sha256 == expected
    assert result.downloaded_bytes == BIG - kept
    assert not (state_dir(dl) / "partial").exists()
