"""The CLI as a test runs it in-process: ``roost.cli.main`` with ``sys.argv`` set, its exit code and
what it printed (stdout, stderr)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest


def run_roost(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, str, str]:
    from roost.cli import main

    monkeypatch.setattr(sys, "argv", ["roost", *args])
    with pytest.raises(SystemExit) as done:
        main()
    out = capsys.readouterr()
    return int(done.value.code or 0), out.out, out.err


def land_saved_local(name: str, update: dict[str, Any], *args: str, timeout: float = 1800) -> dict[str, Any]:
    """Save the demo profile with ``update`` as model-profile block ``name`` (as a user edits one in the UI),
    land it with ``roost run --profile NAME --json --no-notify ARGS`` (needs ``PREFECT_API_URL``: the
    ``prefect_api`` fixture) and return the run record; a failed run fails the caller with its stderr."""
    from blocks.profiles import ModelProfileBlock
    from roost.profiles import LOCAL

    ModelProfileBlock.from_profile(LOCAL.model_copy(update={"name": name, **update})).save(name, overwrite=True)
    res = subprocess.run([str(Path(sys.executable).parent / "roost"), "run", "--profile", name, "--json", "--no-notify",
                          *args], capture_output=True, text=True, timeout=timeout, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-4000:]
    record: dict[str, Any] = json.loads(res.stdout[res.stdout.index("{"):])
    return record
