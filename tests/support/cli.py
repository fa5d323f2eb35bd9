"""The CLI as a test runs it in-process: ``roost.cli.main`` with ``sys.argv`` set, its exit code and
what it printed (stdout, stderr)."""

from __future__ import annotations

import sys

import pytest


def run_roost(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    from roost.cli import main

    monkeypatch.setattr(sys, "argv", ["roost", *args])
    with pytest.raises(SystemExit) as done:
        main()
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err
