"""roost.hub._fetch against real servers on loopback: a large file in ranged parts from a Hub that honours
``Range`` (``support.hub.RangeHub``, in front of the real olah), the one-stream fallback against olah
itself (it answers a ranged request with the whole file, 200), resume per part after an interrupted
run, a corrupt part found by the digest, and no read of a file after its last byte.

The part sizes are shrunk (monkeypatched) so a few-MB shard comes in a dozen parts."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from hub_samples import REPO, SharedHub, sha256_of
from support.hub import HubProxy, RangeHub, shard_name, write_checkpoint_files

from roost.hub import _fetch, _parts
from roost.hub._local_folder import partial_dir, partial_path, partial_size, state_dir
from roost.hub.integrity import HubFile, IntegrityError
from roost.hub.progress import DownloadProgress
from roost.hub.publish import lfs_object_path, mirror_repo_path, publish_repo
from roost.hub.snapshot import DownloadSpec, download_and_verify

PART = 256 * 1024
SHARD = shard_name(1, 2)  # 3,000,000 bytes in the shared repo: 12 parts


@pytest.fixture(autouse=True)
def small_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_parts, "PART_MIN", PART)
    monkeypatch.setattr(_parts, "PART_MAX", PART)
    monkeypatch.setattr(_fetch, "RANGED_MIN", 2 * PART)


def shard_gets(hub: RangeHub, name: str) -> list[tuple[str | None, int]]:
    return [(rng, status) for path, rng, status in hub.gets if path == name]


def covered(ranges: list[str | None]) -> list[tuple[int, int]]:
    out = []
    for r in ranges:
        assert r is not None and r.startswith("bytes=")
        a, b = r.removeprefix("bytes=").split("-")
        out.append((int(a), int(b) + 1))
    return sorted(out)


def test_a_large_file_comes_in_ranged_parts_byte_exact_and_verified(shared_hub: SharedHub, tmp_path: Path) -> None:
    size = (shared_hub.main_src / SHARD).stat().st_size
    with RangeHub(shared_hub.endpoint, shared_hub.mirrors_root) as hub:
        result = download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=hub.endpoint)
    got = shard_gets(hub, SHARD)
    assert {status for _, status in got} == {206} and len(got) == -(-size // PART)
    assert covered([r for r, _ in got]) == [(s, min(s + PART, size)) for s in range(0, size, PART)]
    for f in result.files:  # every file byte-exact and verified as it arrived
        assert (tmp_path / "dl" / f.path).read_bytes() == (shared_hub.main_src / f.path).read_bytes()
        assert f.verified and f.source == "download" and f.sha256 == sha256_of(shared_hub.main_src / f.path)
    assert result.downloaded_bytes == result.bytes and not partial_dir(tmp_path / "dl").exists()


def test_shorter_slices_than_asked_are_asked_again(shared_hub: SharedHub, tmp_path: Path) -> None:
    with RangeHub(shared_hub.endpoint, shared_hub.mirrors_root, slice_bytes=100_000) as hub:
        result = download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=hub.endpoint)
    assert len(shard_gets(hub, SHARD)) > 12
    shard = next(f for f in result.files if f.path == SHARD)
    assert shard.sha256 == sha256_of(shared_hub.main_src / SHARD) == sha256_of(tmp_path / "dl" / SHARD)


def test_a_server_that_ignores_range_gets_one_stream_from_the_probe_answer(
    shared_hub: SharedHub, tmp_path: Path
) -> None:
    # olah answers a ranged request with 200 and the whole file: the probe's answer is taken as the stream
    with HubProxy(shared_hub.endpoint) as proxy:
        result = download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=proxy.endpoint)
    fetched = [r for r in proxy.requests if r.split()[1].endswith("/" + SHARD)]
    assert fetched == [f"GET /{REPO}/resolve/{shared_hub.main}/{SHARD} 200"]  # one request, no second try
    shard = next(f for f in result.files if f.path == SHARD)
    assert shard.sha256 == sha256_of(shared_hub.main_src / SHARD) == sha256_of(tmp_path / "dl" / SHARD)
    assert not partial_dir(tmp_path / "dl").exists()


class Interrupted(Exception):
    """The run stopped from outside (as by Ctrl-C) midway through the shard."""


def test_an_interrupted_ranged_transfer_resumes_per_part(shared_hub: SharedHub, tmp_path: Path) -> None:
    dl = tmp_path / "dl"
    spec = DownloadSpec(repo_id=REPO, allow_patterns=[SHARD])
    size = (shared_hub.main_src / SHARD).stat().st_size

    def interrupt(p: DownloadProgress) -> None:
        if p.phase == "download" and p.bytes_done > size // 2:
            raise Interrupted

    with RangeHub(shared_hub.endpoint, shared_hub.mirrors_root, delay_s=0.01, chunk=64 * 1024) as slow, \
            pytest.raises(Interrupted):
        download_and_verify(spec, dl, endpoint=slow.endpoint, progress=interrupt, progress_interval=0.02)
    hub_file = HubFile(path=SHARD, size=size, blob_id="x",
                       lfs_sha256=hashlib.sha256((shared_hub.main_src / SHARD).read_bytes()).hexdigest())
    part = partial_path(dl, hub_file)
    sidecar = json.loads(_parts.sidecar_path(part).read_text())
    prefix = partial_size(dl, hub_file)
    assert sidecar["size"] == size and 0 < prefix < size and prefix % PART == 0
    assert all((e - s) == PART or e == size for s, e in sidecar["done"])
    # the parts on disk are the file's bytes at their offsets
    assert part.read_bytes()[:prefix] == (shared_hub.main_src / SHARD).read_bytes()[:prefix]

    with RangeHub(shared_hub.endpoint, shared_hub.mirrors_root) as hub:
        result = download_and_verify(spec, dl, endpoint=hub.endpoint)
    starts = [s for s, _ in covered([r for r, _ in shard_gets(hub, SHARD)])]
    assert min(starts) == prefix  # only what was not complete is fetched again
    [shard] = result.files
    assert shard.resumed_from == prefix and result.downloaded_bytes == size - prefix
    assert shard.sha256 == hub_file.lfs_sha256 == sha256_of(dl / SHARD)
    assert not partial_dir(dl).exists()


def test_a_corrupt_part_is_found_and_stops_the_run(shared_hub: SharedHub, tmp_path: Path) -> None:
    src = write_checkpoint_files(tmp_path / "src", shard_sizes=[2_000_000, 1_500_000], seed=11)
    publish_repo(src, shared_hub.mirrors_root, "acme/rotten-part")
    name = shard_name(1, 2)
    expected = sha256_of(src / name)
    obj = lfs_object_path(mirror_repo_path(shared_hub.mirrors_root, "acme/rotten-part"), expected)
    data = bytearray(obj.read_bytes())
    data[5 * PART + 17] ^= 0xFF  # one byte of the sixth part rots in the Hub's store; the listing stays
    obj.write_bytes(bytes(data))

    with RangeHub(shared_hub.endpoint, shared_hub.mirrors_root) as hub, pytest.raises(IntegrityError) as info:
        download_and_verify(DownloadSpec(repo_id="acme/rotten-part"), tmp_path / "dl", endpoint=hub.endpoint)
    found = hashlib.sha256(bytes(data)).hexdigest()
    assert f"{name}: sha256 expected {expected}, found {found} (as fetched)" in str(info.value)
    assert {s for _, s in shard_gets(hub, name)} == {206}
    assert not (tmp_path / "dl" / name).exists()  # the bad bytes never reach the file's place
    assert not list(partial_dir(tmp_path / "dl").glob(f"*{expected}*"))  # nor are they resumed from


_WATCH: dict[str, list[str]] = {}
"""Directory watched -> each path under it opened with read access (by ``open()``, ``os.open``,
``Path.open`` alike: the audit hook sees them all)."""


def _on_open(event: str, args: tuple[object, ...]) -> None:
    if event != "open" or not _WATCH:
        return
    path, mode, flags = args
    if not isinstance(path, str | bytes | os.PathLike):
        return
    text = os.fsdecode(path)
    if mode is not None:
        reading = "r" in str(mode) or "+" in str(mode)
    else:
        reading = isinstance(flags, int) and flags & os.O_ACCMODE != os.O_WRONLY
    for watched, seen in list(_WATCH.items()):
        if reading and text.startswith(watched + os.sep):
            seen.append(text)


sys.addaudithook(_on_open)  # an audit hook cannot be removed: it records only while _WATCH names a directory


@pytest.mark.parametrize("server", ["ranged", "one stream (olah)"])
def test_no_file_is_read_after_its_last_byte(shared_hub: SharedHub, tmp_path: Path, server: str) -> None:
    dl = tmp_path / "dl"
    seen: list[DownloadProgress] = []
    opened: list[str] = []
    with RangeHub(shared_hub.endpoint, shared_hub.mirrors_root) as hub:
        endpoint = hub.endpoint if server == "ranged" else shared_hub.endpoint
        _WATCH[str(dl)] = opened
        try:
            result = download_and_verify(DownloadSpec(repo_id=REPO), dl, endpoint=endpoint, progress=seen.append,
                                         progress_interval=0.02)
        finally:
            del _WATCH[str(dl)]
    # neither a partial file nor a file in its place was opened with read access (roost's bookkeeping is:
    # the manifest read at the start, temp files made with mkstemp's O_RDWR)
    assert [p for p in opened if p.endswith(".part") or ".roost" not in p] == []
    assert any("download.json" in p for p in opened)  # the hook does see this run's opens
    verify = [p for p in seen if p.phase == "verify"][-1]
    assert verify.bytes_done == verify.bytes_total == result.bytes  # every byte hashed once, as it arrived
    assert result.downloaded_bytes == result.bytes and all(f.verified for f in result.files)
    if server == "ranged":
        assert {s for _, s in shard_gets(hub, SHARD)} == {206}
    assert not state_dir(dl).joinpath("partial").exists()


def test_a_resumed_transfer_reads_back_only_its_prefix(shared_hub: SharedHub, tmp_path: Path) -> None:
    dl = tmp_path / "dl"
    size = (shared_hub.main_src / SHARD).stat().st_size
    sha = sha256_of(shared_hub.main_src / SHARD)
    part = partial_path(dl, HubFile(path=SHARD, size=size, blob_id="x", lfs_sha256=sha))
    part.parent.mkdir(parents=True)
    part.write_bytes((shared_hub.main_src / SHARD).read_bytes()[:1_000_000])  # an earlier run's stream
    opened: list[str] = []
    _WATCH[str(dl)] = opened
    try:
        with RangeHub(shared_hub.endpoint, shared_hub.mirrors_root) as hub:
            result = download_and_verify(DownloadSpec(repo_id=REPO, allow_patterns=[SHARD]), dl,
                                         endpoint=hub.endpoint)
    finally:
        del _WATCH[str(dl)]
    assert [p for p in opened if p.endswith(".part") or ".roost" not in p] == [str(part)]  # once, for the prefix
    assert result.files[0].resumed_from == 1_000_000 and result.downloaded_bytes == size - 1_000_000
    assert min(s for s, _ in covered([r for r, _ in shard_gets(hub, SHARD)])) == 1_000_000
    assert sha256_of(dl / SHARD) == sha


class RangeLostMidFirstPart(RangeHub):
    """FAKE fault (no real server can be made to do it on cue): the shard's first part breaks off after
    ``CUT`` bytes, and the retry of that part is answered ``200`` with the whole file, as by a node that
    ignores ``Range``, while the other parts are already being fetched from nodes that honour it."""

    CUT = 100_000

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.cut = self.ignored = False

    def serve(self, handler: BaseHTTPRequestHandler) -> bool:
        asked = handler.headers.get("range") or ""
        if not handler.path.endswith("/" + SHARD) or not asked.startswith("bytes="):
            return super().serve(handler)
        start = int(asked.removeprefix("bytes=").split("-")[0])
        if start == 0 and not self.cut:
            self.cut = True
            parts = unquote(urlsplit(handler.path).path).lstrip("/").split("/")
            blob = self._blob(f"{parts[0]}/{parts[1]}", parts[3], "/".join(parts[4:]))
            assert isinstance(blob, Path)
            size = blob.stat().st_size
            with self._lock:
                self.gets.append((SHARD, asked, 206))
                self.sent.append(self.CUT)
            handler.send_response(206)
            handler.send_header("Content-Range", f"bytes 0-{PART - 1}/{size}")
            handler.send_header("Content-Length", str(PART))
            handler.end_headers()
            handler.wfile.write(blob.read_bytes()[: self.CUT])
            handler.wfile.flush()
            handler.close_connection = True
            return True
        if start == self.CUT and not self.ignored:
            self.ignored = True
            del handler.headers["Range"]
        return super().serve(handler)


def test_a_200_to_a_parts_retry_once_the_parts_are_open_is_refused_and_asked_again(
    shared_hub: SharedHub, tmp_path: Path
) -> None:
    """The probe's 200 is the file's one stream; a 200 to the first part's retry, after a 206 opened the
    parts to the other connections, is not: taking it would close the partial file under their writes.
    It is refused and the part asked for again; the file lands byte-exact."""
    # a slow link (0.8 s a part): the other parts are under way when the first one's retry is answered
    with RangeLostMidFirstPart(shared_hub.endpoint, shared_hub.mirrors_root, delay_s=0.1, chunk=32 * 1024) as hub:
        result = download_and_verify(DownloadSpec(repo_id=REPO, allow_patterns=[SHARD]), tmp_path / "dl",
                                     endpoint=hub.endpoint)
    first_part = [(rng, status) for rng, status in shard_gets(hub, SHARD)
                  if rng is None or rng.startswith("bytes=0-") or rng.startswith(f"bytes={hub.CUT}-")]
    assert hub.cut and hub.ignored
    assert [s for _, s in first_part] == [206, 200, 206], first_part  # cut, the whole file refused, the rest
    [shard] = result.files
    assert shard.verified and shard.sha256 == sha256_of(shared_hub.main_src / SHARD) == sha256_of(tmp_path / "dl" / SHARD)
    assert not partial_dir(tmp_path / "dl").exists()
