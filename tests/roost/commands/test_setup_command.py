"""``roost setup`` refuses unusable input before it talks to any server: one line, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.cli import ROOST
from support.errors import assert_one_line_error


def _setup(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    return subprocess.run([ROOST, "setup", *args], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.parametrize(("args", "message"), [
    ([], "PREFECT_API_URL is not set: start a server (`prefect server start`)"),
    (["--cron", "61 3 * * *"], "--cron '61 3 * * *' --timezone 'UTC': "),
    (["--timezone", "Mars/Olympus"], "--timezone 'Mars/Olympus'"),
    (["--zombie-after", "10"], "--zombie-after 10 s is too short"),
    (["--hosts", " , "], "--hosts is empty"),
    (["--source", "/tmp"], "--source /tmp: no flows/land.py there"),
])
def test_unusable_input(args: list[str], message: str) -> None:
    out = _setup(*args)
    assert_one_line_error(out.returncode, out.stderr, message, exact=True)


def test_listed_in_help() -> None:
    out = subprocess.run([ROOST, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "setup" in out.stdout


def test_module_does_not_import_prefect() -> None:
    """roost/cli.py imports every command module at start: setup's Prefect imports wait for the command."""
    code = ("import sys, roost.commands.setup; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('prefect', 'deployments', 'blocks')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "[]\n"


def test_help_names_the_host_block_type() -> None:
    out = subprocess.run([ROOST, "setup", "--help"], capture_output=True, text=True, timeout=120,
                         env=dict(os.environ, COLUMNS="200", TERM="dumb", NO_COLOR="1"))
    assert out.returncode == 0, out.stderr
    text = " ".join(out.stdout.replace("│", " ").split())
    assert "saved roost-host blocks" in text and "saved as spark-host are migrated to roost-host" in text
