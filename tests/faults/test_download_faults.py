"""``roost download`` as a real process against the real local Hub mirror (olah), faulted from outside:

- ``kill -9`` midway through a file, then run again: what was complete is not fetched again, the
  partial file resumes with a ``Range`` request from its last byte, every byte is verified against the
  Hub's listing, exit 0. The files go through ``RangeHub`` (``support.hub``: the API from olah, the
  file bytes from the mirror's own store, honouring ``Range`` as huggingface.co's CDN does, slowed on
  purpose so the kill lands mid-file) and every request per file is counted there.
- one byte of a verified shard changed in place, its size, mtime and inode kept: the next run hashes it
  (its ctime moved: ``roost.hub._local_folder``), finds it corrupt, sets the copy aside under
  ``.roost/corrupt/`` with one stderr line naming the file, both digests and where the copy is, fetches
  that file alone once and ends verified (exit 0). Requests counted at ``HubProxy`` in front of olah.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from support.cli import ROOST
from support.hub import HubProxy, RangeHub, local_hub, shard_name, write_checkpoint_files

from roost.hub._local_folder import Fingerprint, partial_dir
from roost.hub.mirror import HubMirror

REPO = "acme/faulty"
BIG = 6_000_000


@dataclass
class FaultHub:
    mirror: HubMirror
    mirrors_root: Path
    src: Path
    commit: str
    listing: dict[str, dict[str, object]]  # path -> the Hub's tree entry


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultHub]:
    base = tmp_path_factory.mktemp("fault-hub")
    src = write_checkpoint_files(base / "src", shard_sizes=[BIG, 1_000_000], seed=31)
    with local_hub(base / "mirrors", {REPO: src}) as (mirror, commits):
        commit = commits[REPO]
        tree = httpx.get(f"{mirror.endpoint}/api/models/{REPO}/tree/{commit}", params={"recursive": "true"},
                         timeout=30, follow_redirects=True).json()
        yield FaultHub(mirror, base / "mirrors", src, commit, {e["path"]: e for e in tree if e["type"] == "file"})


def roost_download(endpoint: str, local_dir: Path) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "ROOST_DEBUG")}
    env["HF_ENDPOINT"] = endpoint
    return subprocess.Popen([ROOST, "download", REPO, "--local-dir", str(local_dir), "--json"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


def hub_digest_matches(hub: FaultHub, path: str, local: Path, record: dict[str, object]) -> bool:
    """The file on disk hashes to what the Hub's listing says: its LFS sha256, else its git blob id."""
    entry = hub.listing[path]
    data = local.read_bytes()
    lfs = entry.get("lfs")
    if isinstance(lfs, dict):
        return hashlib.sha256(data).hexdigest() == lfs["oid"] == record["sha256"]
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return blob == entry["oid"] == record["git_oid"] and hashlib.sha256(data).hexdigest() == record["sha256"]


def _part_sizes(parts: Path) -> list[int]:
    """Sizes of the partial files now; one may be renamed into place between the listing and its stat."""
    sizes = []
    for p in parts.glob("*.part") if parts.exists() else []:
        with contextlib.suppress(FileNotFoundError):
            sizes.append(p.stat().st_size)
    return sizes


def test_kill_9_midway_then_rerun_resumes_and_verifies(hub: FaultHub, tmp_path: Path) -> None:
    dl = tmp_path / "dl"
    big = shard_name(1, 2)
    with RangeHub(hub.mirror.endpoint, hub.mirrors_root, delay_s=0.05, chunk=64 * 1024) as slow:  # ~1.3 MB/s a file
        proc = roost_download(slow.endpoint, dl)
        deadline = time.monotonic() + 60
        parts = partial_dir(dl)
        while time.monotonic() < deadline and proc.poll() is None:
            sizes = _part_sizes(parts)
            if (dl / shard_name(2, 2)).exists() and any(n > 1_500_000 for n in sizes):
                os.kill(proc.pid, signal.SIGKILL)
                break
            time.sleep(0.02)
        code, _, err = finish(proc)
        assert code == -signal.SIGKILL, f"the download ended before it was killed: {code} {err}"
        complete = sorted(p.relative_to(dl).as_posix() for p in dl.rglob("*") if p.is_file() and ".roost" not in p.parts)
        [part] = parts.glob("*.part")
        kept = part.stat().st_size
        assert big not in complete and shard_name(2, 2) in complete and 0 < kept < BIG
        first = list(slow.gets)  # (a request still being answered to the killed process may add to it later)
        assert sorted({p for p, _, _ in first}) == sorted({*complete, big})
        assert all(sum(p == q for q, _, _ in first) == 1 for p in complete)  # each asked for once

        rerun_from = len(slow.gets)
        slow.delay_s = 0.0
        code, out, err = finish(roost_download(slow.endpoint, dl))
        assert code == 0, err
        again = slow.gets[rerun_from:]
        sent = slow.sent[rerun_from:]

    # what was complete is not fetched again; the partial resumes from its last byte, and only the rest is sent
    assert not [g for g in again if g[0] in complete]
    assert [g for g in again if g[0] == big] == [(big, f"bytes={kept}-", 206)]
    assert sent[[g[0] for g in again].index(big)] == BIG - kept
    result = json.loads(out)
    files = {f["path"]: f for f in result["files"]}
    assert files[big]["resumed_from"] == kept and files[big]["source"] == "download"
    assert all(files[p]["source"] in ("cache", "disk") for p in complete)
    assert set(files) == set(complete) | {big} | {p for p, _, _ in again}
    for path, record in files.items():
        assert record["verified"] is True and hub_digest_matches(hub, path, dl / path, record), path
    assert not partial_dir(dl).exists()


def test_a_byte_changed_in_place_is_caught_set_aside_and_fetched_anew(hub: FaultHub, tmp_path: Path) -> None:
    dl = tmp_path / "dl"
    shard = shard_name(2, 2)
    with HubProxy(hub.mirror.endpoint) as proxy:
        code, _, err = finish(roost_download(proxy.endpoint, dl))
        assert code == 0, err

        # one byte flipped in place; size, mtime and inode as they were (only the ctime moves, as on any write)
        target = dl / shard
        before = Fingerprint.of(target)
        st = target.stat()
        with open(target, "r+b") as f:
            f.seek(500_000)
            byte = f.read(1)
            f.seek(500_000)
            f.write(bytes([byte[0] ^ 0x01]))
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
        after = Fingerprint.of(target)
        assert (after.size, after.mtime_ns, after.inode) == (before.size, before.mtime_ns, before.inode)
        corrupted = target.read_bytes()
        found = hashlib.sha256(corrupted).hexdigest()
        expected = hub.listing[shard]["lfs"]["oid"]  # type: ignore[index]

        proxy.requests.clear()
        code, out, err = finish(roost_download(proxy.endpoint, dl))
        assert code == 0, err
        fetched = [r for r in proxy.requests if "/resolve/" in r]

    assert fetched == [f"GET /{REPO}/resolve/{hub.commit}/{shard} 200"]  # that file once, the others not at all
    assert hashlib.sha256(target.read_bytes()).hexdigest() == expected
    [copy] = (dl / ".roost" / "corrupt").iterdir()
    assert copy.name.startswith(f"{shard}.corrupt-") and copy.read_bytes() == corrupted  # kept aside, as found
    assert "Traceback" not in err and "roost: error:" not in err
    [line] = [line for line in err.splitlines() if "corrupt" in line]
    assert line.startswith(f"roost: corrupt file fetched again: {shard}: sha256 expected {expected}, found {found} "
                           "(changed on disk after roost verified it at ")
    assert line.endswith(f"kept at {copy}; {len(corrupted):,} bytes fetched anew from the Hub and verified")
    files = {f["path"]: f for f in json.loads(out)["files"]}
    assert files[shard]["source"] == "download" and {f["source"] for p, f in files.items() if p != shard} == {"cache"}
    assert files[shard]["corrupt_copy"] == f".roost/corrupt/{copy.name}"
    for path, record in files.items():
        assert hub_digest_matches(hub, path, dl / path, record), path
