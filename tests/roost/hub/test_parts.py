"""roost.hub._parts: the digest fed as bytes arrive equals hashing the file, the sidecar's resumable
prefix, the part size."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from roost.hub._parts import (
    PART_MAX,
    PART_MIN,
    RangedFile,
    StreamDigest,
    part_bytes,
    resumable_prefix,
    sidecar_path,
    write_sidecar,
)
from roost.hub.integrity import hash_file
from roost.units import MiB


def test_the_digest_fed_in_pieces_is_the_files(tmp_path: Path) -> None:
    data = os.urandom(3_000_001)
    path = tmp_path / "f"
    path.write_bytes(data)
    counted: list[int] = []
    for git_blob in (False, True):
        d = StreamDigest(len(data), git_blob, counted.append)
        for i in range(0, len(data), 65_537):
            d.update(data[i : i + 65_537])
        assert d.result() == hash_file(path, git_blob=git_blob)
    oid = subprocess.run(["git", "hash-object", str(path)], capture_output=True, text=True, check=True).stdout.strip()
    assert d.result().git_sha1 == oid and sum(counted) == 2 * len(data)


def test_catch_up_reads_only_the_prefix_and_starts_over_when_cut_back(tmp_path: Path) -> None:
    data = os.urandom(1_000_000)
    path = tmp_path / "f.part"
    path.write_bytes(data[:400_000])
    counted: list[int] = []
    d = StreamDigest(len(data), False, counted.append)
    d.catch_up(path, 400_000)
    assert d.read_back == 400_000 == d.fed
    d.update(data[400_000:])
    path.write_bytes(data)
    assert d.result() == hash_file(path)
    d.catch_up(path, 10)  # the partial file holds less than was hashed: start over from it
    assert d.fed == 10 and sum(counted) == 10


def test_resumable_prefix_is_the_contiguous_head_of_completed_parts(tmp_path: Path) -> None:
    part = tmp_path / "x.part"
    assert resumable_prefix(part, 100) == 0
    part.write_bytes(b"\0" * 80)
    assert resumable_prefix(part, 100) == 80  # no sidecar: a stream's partial file, its length
    write_sidecar(part, 100, [(20, 40), (0, 20), (60, 80)])
    assert resumable_prefix(part, 100) == 40  # 40..60 missing: what follows is fetched again
    write_sidecar(part, 999, [(0, 80)])
    assert resumable_prefix(part, 100) == 0  # another file's parts
    sidecar_path(part).write_text("{not json")
    assert resumable_prefix(part, 100) == 0
    sidecar_path(part).write_text(json.dumps({"size": 100, "done": [[0, 90]]}))
    assert resumable_prefix(part, 100) == 80  # never past what the file holds


def test_part_size_is_bounded() -> None:
    assert part_bytes(10 * MiB, 4) == PART_MIN
    assert part_bytes(100 * 1024 * MiB, 16) == PART_MAX
    assert PART_MIN <= part_bytes(600 * MiB, 16) <= PART_MAX


def test_parts_hash_in_order_whatever_order_they_arrive(tmp_path: Path) -> None:
    data = os.urandom(10_000)
    path = tmp_path / "f.part"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    released: list[int] = []
    hashed: list[bool] = []
    d = StreamDigest(len(data), False, lambda n: None)
    rf = RangedFile(path, fd, len(data), 0, 3000, d, released.append, lambda: hashed.append(True))
    parts = [rf.next_part() for _ in range(4)]
    assert rf.next_part() is None and [(p.start, p.end) for p in parts if p] == [
        (0, 3000), (3000, 6000), (6000, 9000), (9000, 10_000)]
    for p in reversed(parts):  # the last part first: nothing can be hashed until the first arrives
        assert p is not None
        rf.write(p, [data[p.start : p.start + 1000]])
        rf.write(p, [data[p.start + 1000 : p.start + 1500], data[p.start + 1500 : p.end]])
        rf.complete(p)
        assert d.fed == (10_000 if p.start == 0 else 0)
    rf.close()
    assert hashed == [True] and released == [3000, 3000, 3000, 1000]
    assert path.read_bytes() == data and d.result() == hash_file(path)
    assert json.loads(sidecar_path(path).read_text())["done"] == [[0, 3000], [3000, 6000], [6000, 9000],
                                                                  [9000, 10_000]]
