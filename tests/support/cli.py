"""The CLI as a test runs it: in-process (``roost.cli.main`` with ``sys.argv`` set, its exit code and what it
printed), or the installed executables of the project's venv (``ROOST``, ``PREFECT``; ``roost_exe`` runs one)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

BIN = Path(sys.executable).parent
"""The project venv's ``bin``: the installed ``roost`` and ``prefect`` entry points."""
ROOST = str(BIN / "roost")
PREFECT = str(BIN / "prefect")


def roost_exe(*args: str, timeout: float = 120, env: dict[str, str] | None = None, drop_env: tuple[str, ...] = (),
              cwd: Path | str | None = None, input: str | None = None) -> subprocess.CompletedProcess[str]:
    """The installed ``roost ARGS`` to its end, its output captured as text: in this process's environment
    (or ``env``), without the variables named in ``drop_env``."""
    full = {k: v for k, v in (os.environ if env is None else env).items() if k not in drop_env}
    return subprocess.run([ROOST, *args], capture_output=True, text=True, timeout=timeout, env=full, cwd=cwd,
                          input=input)


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
    res = roost_exe("run", "--profile", name, "--json", "--no-notify", *args, timeout=timeout)
    assert res.returncode == 0, res.stderr[-4000:]
    record: dict[str, Any] = json.loads(res.stdout[res.stdout.index("{"):])
    return record
