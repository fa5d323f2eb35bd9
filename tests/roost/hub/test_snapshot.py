"""download_and_verify against a real olah on loopback: happy path, pinning, tampering, resume,
401/404 without retries, a gated repository, disk preflight, the warm-state key."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from hub_samples import PRIVATE, REPO, SharedHub, sha256_of
from support.hub import GatedHub, HubProxy, shard_name, write_checkpoint_files

from roost.errors import CheckFailed, UserError
from roost.hub._local_folder import Fingerprint, state_dir
from roost.hub.errors import HubUnreachable
from roost.hub.integrity import HubFile, IntegrityError
from roost.hub.mirror import HubMirror
from roost.hub.progress import DownloadProgress
from roost.hub.publish import lfs_object_path, mirror_repo_path, publish_repo
from roost.hub.snapshot import (
    DownloadResult,
    DownloadSpec,
    RetryPolicy,
    download_and_verify,
    select_files,
    warm_state_key,
)
from roost.net import free_port
from roost.units import format_bytes, format_seconds

SELECTED = {  # roost.hub.patterns: everything but original/*.pth and .gitattributes
    "README.md",
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
    assert {f.path for f in result.files} == SELECTED
    for f in result.files:
        local = tmp_path / "dl" / f.path
        src = shared_hub.main_src / f.path
        assert f.verified and f.source == "download"
        assert f.size == local.stat().st_size == src.stat().st_size
        assert f.sha256 == sha256_of(local) == sha256_of(src)
        assert f.lfs == f.path.endswith(".safetensors")
        assert f.git_oid == (None if f.lfs else git_oid(src))
    assert result.bytes == sum(f.size for f in result.files) == result.downloaded_bytes
    assert not (tmp_path / "dl" / "original").exists() and not (tmp_path / "dl" / ".gitattributes").exists()
    downloads = [p for p in seen if p.phase == "download"]
    assert downloads[-1].bytes_done == downloads[-1].bytes_total == result.bytes
    assert downloads[-1].files_done == len(SELECTED) and downloads[-1].rate_bps > 0
    assert [p for p in seen if p.phase == "verify"][-1].bytes_done == result.bytes


def test_warm_rerun_skips_download_and_hashing_with_one_log_line(
    shared_hub: SharedHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spec = DownloadSpec(repo_id=REPO)
    first = download_and_verify(spec, tmp_path / "dl", endpoint=shared_hub.endpoint)
    before = {f.path: Fingerprint.of(tmp_path / "dl" / f.path) for f in first.files}
    caplog.clear()
    with HubProxy(shared_hub.endpoint) as proxy, caplog.at_level(logging.INFO, logger="roost"):
        again = download_and_verify(spec, tmp_path / "dl", endpoint=proxy.endpoint)
    roost_lines = [r.getMessage() for r in caplog.records if r.name.startswith("roost")]
    assert again.cached and again.commit == first.commit and again.hashed_bytes == 0 == again.downloaded_bytes
    assert {f.source for f in again.files} == {"cache"}
    assert len(roost_lines) == 1 and "skipping download and hashing" in roost_lines[0]
    # by branch, the one request is the refs lookup that resolves it: no listing, no file
    assert proxy.requests == [f"GET /api/models/{REPO}/refs 200"]
    assert {f.path: Fingerprint.of(tmp_path / "dl" / f.path) for f in again.files} == before
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
    assert offline.cached and offline.commit == first.commit and offline.hashed_bytes == 0


def test_two_downloads_into_one_directory_at_once_fetch_it_once(
    shared_hub: SharedHub, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two landings on one machine (two hosts' workers sharing ROOST_HOME) download the same commit into
    the same directory: the second waits for the first, then finds every file verified."""
    results: list[DownloadResult] = []
    errors: list[BaseException] = []

    def one() -> None:
        try:
            results.append(download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl",
                                               endpoint=shared_hub.endpoint))
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    with caplog.at_level(logging.INFO, logger="roost"):
        threads = [threading.Thread(target=one) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
    assert errors == [] and len(results) == 3
    fetched = [r for r in results if not r.cached]
    assert len(fetched) == 1 and fetched[0].downloaded_bytes == fetched[0].bytes
    assert all(r.commit == shared_hub.main and r.downloaded_bytes == 0 for r in results if r.cached)
    assert any("waiting for another download into" in r.getMessage() for r in caplog.records)
    for f in fetched[0].files:
        assert sha256_of(tmp_path / "dl" / f.path) == sha256_of(shared_hub.main_src / f.path)


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


@pytest.mark.parametrize("change", ["one byte flipped", "cut short"])
def test_a_file_corrupted_after_download_is_set_aside_and_fetched_again(
    shared_hub: SharedHub, tmp_path: Path, caplog: pytest.LogCaptureFixture, change: str
) -> None:
    dl = tmp_path / "dl"
    name = shard_name(1, 2)
    shard = dl / name
    with HubProxy(shared_hub.endpoint) as proxy:
        download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=proxy.endpoint)
        expected = sha256_of(shard)
        size = shard.stat().st_size
        if change == "one byte flipped":  # same size: found by hashing it (its ctime moved)
            with open(shard, "r+b") as f:
                f.seek(1_500_000)
                byte = f.read(1)
                f.seek(1_500_000)
                f.write(bytes([byte[0] ^ 0xFF]))
        else:  # another size: found without hashing it
            os.truncate(shard, 1_000_000)
        corrupted = shard.read_bytes()

        proxy.requests.clear()
        with caplog.at_level(logging.INFO, logger="roost"):
            result = download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=proxy.endpoint)
        fetched = [r for r in proxy.requests if "/resolve/" in r]

    assert fetched == [f"GET /{REPO}/resolve/{shared_hub.main}/{name} 200"]  # that file alone, once
    assert sha256_of(shard) == expected == sha256_of(shared_hub.main_src / name)
    [copy] = (state_dir(dl) / "corrupt").iterdir()  # set aside, never deleted
    assert re.fullmatch(re.escape(name) + r"\.corrupt-\d{8}T\d{6}Z", copy.name)
    assert copy.read_bytes() == corrupted
    files = {f.path: f for f in result.files}
    assert files[name].source == "download" and files[name].corrupt_copy == f".roost/corrupt/{copy.name}"
    assert files[name].sha256 == expected and files[name].resumed_from == 0
    assert {f.source for p, f in files.items() if p != name} == {"cache"}
    assert all(f.corrupt_copy is None for p, f in files.items() if p != name)
    assert result.summary().endswith(f"hashed {format_bytes(result.hashed_bytes)}, "
                                     f"1 corrupt file set aside and fetched again, {format_seconds(result.seconds)})")

    [line] = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]  # one line says it all
    found = (f"sha256 expected {expected}, found {sha256_of(copy)}" if change == "one byte flipped"
             else f"size expected {size} bytes, found 1000000 bytes")
    assert line.startswith(f"corrupt file fetched again: {name}: {found} (changed on disk after roost verified it at ")
    assert line.endswith(f"; the corrupt copy is kept at {copy}; {size:,} bytes fetched anew from the Hub and verified")

    again = download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=shared_hub.endpoint)
    assert again.cached  # the fetched file is verified and recorded
    assert [p.name for p in (state_dir(dl) / "corrupt").iterdir()] == [copy.name]


def test_a_corrupt_file_the_hub_serves_wrong_again_fails_naming_it(shared_hub: SharedHub, tmp_path: Path) -> None:
    src = write_checkpoint_files(tmp_path / "src", shard_sizes=[200_000], seed=6)
    publish_repo(src, shared_hub.mirrors_root, "acme/rots-twice")
    name = shard_name(1, 1)
    dl = tmp_path / "dl"
    download_and_verify(DownloadSpec(repo_id="acme/rots-twice"), dl, endpoint=shared_hub.endpoint)
    expected = sha256_of(dl / name)
    data = bytearray((dl / name).read_bytes())
    data[50] ^= 0xFF  # the copy on disk rots...
    (dl / name).write_bytes(bytes(data))
    local_found = hashlib.sha256(bytes(data)).hexdigest()
    obj = lfs_object_path(mirror_repo_path(shared_hub.mirrors_root, "acme/rots-twice"), expected)
    served = bytearray(obj.read_bytes())
    served[100] ^= 0xFF  # ...and so does the Hub's stored object; its listing still names the right digest
    obj.write_bytes(bytes(served))

    with pytest.raises(IntegrityError) as info:
        download_and_verify(DownloadSpec(repo_id="acme/rots-twice"), dl, endpoint=shared_hub.endpoint)
    [copy] = (state_dir(dl) / "corrupt").iterdir()
    assert isinstance(info.value, CheckFailed) and info.value.exit_code == 1 and sha256_of(copy) == local_found
    assert str(info.value).startswith(
        f"integrity check failed for 1 file: {name}: sha256 expected {expected}, "
        f"found {hashlib.sha256(bytes(served)).hexdigest()} (as fetched again, after the copy on disk was found "
        f"changed since roost verified it (sha256 {local_found}); that copy is kept at {copy}); "
    )


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
    with HubProxy(shared_hub.endpoint) as proxy:
        with caplog.at_level(logging.WARNING, logger="roost"), pytest.raises(UserError) as missing:
            download_and_verify(DownloadSpec(repo_id="acme/no-such-model"), tmp_path / "a", endpoint=proxy.endpoint)
        assert str(missing.value) == (
            f"repository acme/no-such-model does not exist on {proxy.endpoint} (HTTP 404): check the repo id for typos"
        )
        with caplog.at_level(logging.WARNING, logger="roost"), pytest.raises(UserError) as private:
            download_and_verify(DownloadSpec(repo_id=PRIVATE), tmp_path / "b", endpoint=proxy.endpoint)
    assert str(private.value) == (
        f"repository {PRIVATE} was not found on {proxy.endpoint} without a token (HTTP 401): check the "
        "repo id for typos; if it is private, set HF_TOKEN (or the Prefect Secret block) to a token with "
        "read access to it"
    )
    # one request each (the refs lookup), none retried
    assert proxy.requests == [
        "GET /api/models/acme/no-such-model/refs 404",
        f"GET /api/models/{PRIVATE}/refs 401",
    ]
    assert not [r for r in caplog.records if "transient" in r.getMessage()]


def test_a_gated_repo_needs_the_token_it_was_granted(shared_hub: SharedHub, tmp_path: Path) -> None:
    token = "hf_granted_" + os.urandom(8).hex()
    with GatedHub(shared_hub.endpoint, REPO, token) as gated:
        with pytest.raises(UserError) as anonymous:
            download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "a", endpoint=gated.endpoint)
        assert str(anonymous.value) == (
            f"{REPO} is a gated repository and no token was given (HTTP 401): accept its conditions at "
            f"{gated.endpoint}/{REPO} with your account, then set HF_TOKEN (or the Secret block) to a read "
            "token of that account"
        )
        wrong = "hf_other_" + os.urandom(8).hex()
        with pytest.raises(UserError) as refused:
            download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "a", endpoint=gated.endpoint, token=wrong)
        assert str(refused.value).startswith(
            f"{REPO} is a gated repository and the token roost used has not been granted access (HTTP 403): "
        )
        assert wrong not in str(refused.value)
        assert gated.requests == [f"GET /api/models/{REPO}/refs 401", f"GET /api/models/{REPO}/refs 403"]
        assert not (tmp_path / "a").exists() or not any((tmp_path / "a").rglob("*.safetensors"))

        granted = download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "a", endpoint=gated.endpoint, token=token)
        # the files came through the gate, each with the token: a listing, then one download per file
        downloads = [r for r in gated.requests[2:] if "/resolve/" in r]
        assert len(downloads) == len(SELECTED) and all(r.endswith(" 200") for r in downloads)
        # a /resolve/ download without the token is refused too, as on the Hub
        url = f"{gated.endpoint}/{REPO}/resolve/{granted.commit}/config.json"
        bare = httpx.get(url, timeout=10)
        assert (bare.status_code, bare.headers["x-error-code"]) == (401, "GatedRepo")
        assert httpx.get(url, headers={"authorization": f"Bearer {token}"}, timeout=10).content == (
            shared_hub.main_src / "config.json"
        ).read_bytes()
    assert granted.commit == shared_hub.main and not granted.cached
    assert {f.path for f in granted.files} == SELECTED
    for f in granted.files:
        assert f.sha256 == sha256_of(shared_hub.main_src / f.path)


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


def test_selection_keeps_roost_bookkeeping_and_the_directory_safe() -> None:
    def hub(path: str) -> HubFile:
        return HubFile(path=path, size=1, blob_id="0" * 40)

    spec = DownloadSpec(
        repo_id="org/model", allow_patterns=["*.json", "*.safetensors"], ignore_patterns=["original/*"]
    )
    picked = select_files(
        [
            hub("config.json"),
            hub(".roost/download.json"),
            hub("original/x.safetensors"),
            hub("a/model.safetensors"),
            hub("README.md"),
        ],
        spec,
    )
    assert [f.path for f in picked] == ["a/model.safetensors", "config.json"]
    with pytest.raises(UserError, match="outside the download directory"):
        select_files([hub("../escape.json")], spec)


def test_default_patterns_leave_out_original_weights_and_other_formats() -> None:
    names = ["model-00001-of-00002.safetensors", "model.safetensors.index.json", "config.json",
             "tokenizer.json", "tokenizer.model", "chat_template.jinja", "merges.txt", "README.md",
             "original/consolidated.00.pth", "original/params.json", "pytorch_model.bin", "model.gguf",
             "onnx/model.onnx", "flax_model.msgpack", ".gitattributes", ".roost/download.json"]
    picked = select_files([HubFile(path=n, size=1, blob_id="0" * 40) for n in names], DownloadSpec(repo_id="o/m"))
    assert [f.path for f in picked] == sorted(names[:8])


def test_warm_state_key_exists_only_while_verified_and_changes_with_the_files(
    shared_hub: SharedHub, tmp_path: Path
) -> None:
    spec = DownloadSpec(repo_id=REPO)
    dl = tmp_path / "dl"
    assert warm_state_key(spec, dl, endpoint=shared_hub.endpoint) is None  # nothing downloaded yet
    result = download_and_verify(spec, dl, endpoint=shared_hub.endpoint)
    key = warm_state_key(spec, dl, endpoint=shared_hub.endpoint)
    assert key is not None and len(key) == 32
    assert warm_state_key(spec.pinned(result.commit), dl, endpoint=f"http://127.0.0.1:{free_port()}") == key
    assert warm_state_key(DownloadSpec(repo_id=REPO, revision="v1"), dl, endpoint=shared_hub.endpoint) is None
    shard = dl / shard_name(1, 2)
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))
    assert warm_state_key(spec, dl, endpoint=shared_hub.endpoint) is None  # touched: not known verified
    download_and_verify(spec, dl, endpoint=shared_hub.endpoint)  # re-hashes the touched shard
    assert warm_state_key(spec, dl, endpoint=shared_hub.endpoint) not in (None, key)


def test_result_round_trips_through_json(shared_hub: SharedHub, tmp_path: Path) -> None:
    result = download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=shared_hub.endpoint)
    assert DownloadResult.model_validate_json(result.model_dump_json()) == result
    assert result.summary() == (
        f"{REPO}@{result.commit} verified in {tmp_path / 'dl'}: {len(SELECTED)} files, "
        f"{format_bytes(result.bytes)} (fetched {format_bytes(result.bytes)}, hashed {format_bytes(result.bytes)}, "
        f"{format_seconds(result.seconds)})"
    )


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
        stats = []
        for q in part_dir.glob("*.part") if part_dir.exists() else []:
            with contextlib.suppress(FileNotFoundError):  # a finished file is renamed away between glob and stat
                stats.append(q.stat())
        big = [st for st in stats if st.st_size > 4_000_000]
        if p.phase == "download" and "at" not in cut and big:
            mirror.kill()  # SIGKILL: the connection drops mid-file
            cut["at"] = big[0].st_size
            cut["inode"] = big[0].st_ino
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
