"""roost.inputs.files: only regular files are read, in bounded size, and nothing waits on a FIFO."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from roost.errors import UserError
from roost.inputs.files import check_regular, read_regular, read_tail


def test_a_regular_file_is_read_whole_within_its_limit(tmp_path: Path) -> None:
    f = tmp_path / "a.json"
    f.write_bytes(b"x" * 100)
    assert read_regular(f, limit=100, what="the file") == b"x" * 100
    with pytest.raises(UserError, match="100 bytes, more than 99"):
        read_regular(f, limit=99, what="the file")


@pytest.mark.parametrize("kind", ["dir", "fifo", "chardev"])
def test_what_is_not_a_regular_file_is_named_and_never_waited_on(tmp_path: Path, kind: str) -> None:
    path = {"dir": tmp_path, "chardev": Path("/dev/zero")}.get(kind, tmp_path / "fifo")
    if kind == "fifo":
        os.mkfifo(path)
    done = threading.Event()
    errors: list[str] = []

    def read() -> None:
        try:
            read_regular(path, limit=10, what="the log")
        except UserError as exc:
            errors.append(str(exc))
        done.set()

    threading.Thread(target=read, daemon=True).start()
    assert done.wait(5), "read_regular waited on a FIFO or a device"
    word = {"dir": "a directory", "fifo": "a FIFO", "chardev": "a character device"}[kind]
    assert errors and word in errors[0] and "the log must be a file" in errors[0]
    with pytest.raises(UserError, match=word):
        read_tail(path, limit=10, what="the log")
    with pytest.raises(UserError, match=word):
        check_regular(path, what="the log")


def test_missing_and_too_long_paths_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="not found; pass"):
        read_regular(tmp_path / "nope", limit=10, what="x")
    with pytest.raises(UserError, match="path too long") as info:
        read_regular(tmp_path / ("a" * 5000), limit=10, what="x")
    assert len(str(info.value)) < 400 and "\n" not in str(info.value)


def test_the_tail_of_a_big_file_starts_at_a_line(tmp_path: Path) -> None:
    f = tmp_path / "big.log"
    f.write_bytes(b"".join(b"line %06d\n" % i for i in range(100_000)))
    tail = read_tail(f, limit=1000, what="the log")
    assert len(tail) <= 1000 and tail.startswith(b"line ") and tail.endswith(b"line 099999\n")
    assert read_tail(f, limit=10**9, what="the log") == f.read_bytes()
