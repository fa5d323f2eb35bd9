"""The download directory: fingerprints, the manifest, partial files and the plan of what to do."""

from __future__ import annotations

import datetime as dt
import hashlib
import os
from pathlib import Path

from roost.hub._local_folder import (
    Fingerprint,
    Manifest,
    VerifiedEntry,
    load_manifest,
    manifest_path,
    partial_path,
    partial_size,
    plan_local_files,
    write_manifest,
)
from roost.hub.integrity import HubFile


def test_fingerprint_changes_when_the_file_is_rewritten(tmp_path: Path) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"one")
    before = Fingerprint.of(p)
    os.utime(p, ns=(before.mtime_ns + 1_000_000, before.mtime_ns + 1_000_000))
    assert Fingerprint.of(p) != before
    assert Fingerprint.maybe(tmp_path / "missing") is None


def test_manifest_round_trips_atomically_and_a_corrupt_one_is_ignored(tmp_path: Path) -> None:
    f = tmp_path / "x.safetensors"
    f.write_bytes(b"x")
    hub = HubFile(path="x.safetensors", size=1, blob_id="0" * 40, lfs_sha256=hashlib.sha256(b"x").hexdigest())
    entry = VerifiedEntry(
        expected=hub.expected_digest,
        sha256=hub.lfs_sha256 or "",
        fingerprint=Fingerprint.of(f),
        verified_at=dt.datetime(2026, 1, 1, tzinfo=dt.UTC),
    )
    manifest = Manifest(repo_id="a/b", commit="c" * 40, listing=[hub], verified={hub.path: entry})
    write_manifest(tmp_path, manifest)
    assert load_manifest(tmp_path) == manifest
    assert manifest.unchanged(tmp_path, manifest.listing)
    assert [p.name for p in manifest_path(tmp_path).parent.iterdir()] == ["download.json"]  # no temp left
    f.write_bytes(b"y")
    os.utime(f, ns=(1, 1))
    assert not manifest.unchanged(tmp_path, manifest.listing)
    manifest_path(tmp_path).write_text("{not json")
    assert load_manifest(tmp_path) is None




def lfs_file(path: str, content: bytes) -> HubFile:
    return HubFile(path=path, size=len(content), blob_id="0" * 40, lfs_sha256=hashlib.sha256(content).hexdigest())


def test_plan_sorts_files_by_what_the_directory_holds(tmp_path: Path) -> None:
    verified_at = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    files = {name: lfs_file(name, name.encode() * 10) for name in ("cached", "touched", "new", "shrunk", "stranger")}
    for name in ("cached", "touched", "shrunk"):
        (tmp_path / name).write_bytes(name.encode() * 10)
    (tmp_path / "stranger").write_bytes(b"s" * files["stranger"].size)  # right size, never verified

    def entry(name: str) -> VerifiedEntry:
        f = files[name]
        return VerifiedEntry(
            expected=f.expected_digest, sha256=f.lfs_sha256 or "", fingerprint=Fingerprint.of(tmp_path / name),
            verified_at=verified_at,
        )

    verified = {name: entry(name) for name in ("cached", "touched", "shrunk")}
    st = (tmp_path / "touched").stat()
    os.utime(tmp_path / "touched", ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    (tmp_path / "shrunk").write_bytes(b"x")

    plan = plan_local_files(tmp_path, list(files.values()), verified)

    assert [f.path for f in plan.cached] == ["cached"]
    assert [f.path for f in plan.to_hash] == ["touched", "stranger"]
    assert [f.path for f in plan.to_fetch] == ["new"]
    assert [m.sentence() for m in plan.mismatches] == [
        "shrunk: size expected 60 bytes, found 1 bytes (changed on disk after roost verified it at 2026-01-02 03:04:05Z)"
    ]


def test_a_partial_file_is_named_by_its_expected_digest_and_capped_at_its_size(tmp_path: Path) -> None:
    f = lfs_file("model.safetensors", b"abc")
    assert partial_path(tmp_path, f) == tmp_path / ".roost" / "partial" / f"sha256-{f.lfs_sha256}.part"
    assert partial_size(tmp_path, f) == 0
    partial_path(tmp_path, f).parent.mkdir(parents=True)
    partial_path(tmp_path, f).write_bytes(b"ab")
    assert partial_size(tmp_path, f) == 2
    partial_path(tmp_path, f).write_bytes(b"abcdef")  # a server that sent too much
    assert partial_size(tmp_path, f) == 3
