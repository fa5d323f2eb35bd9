"""The installed ``roost`` entry point: a usage mistake is one line and exit 2, like any unusable input."""

from __future__ import annotations

import subprocess

import pytest
from support.cli import ROOST


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["audit", ".", "--hots", "spark"],
         "roost: error: No such option: --hots (Possible options: --host) (see `roost audit --help`)"),
        (["plan", ".", "--kv-cache-memory-bytes", "lots"],
         "roost: error: Invalid value for '--kv-cache-memory-bytes': Input should be a valid integer, "
         "unable to parse string as an integer (see `roost plan --help`)"),
        (["audit"], "roost: error: give a checkpoint directory or hf://OWNER/NAME[@REVISION] to read from the Hub, "
                    "or --profile P to read that profile's repository from the Hub"),
        (["run", "--profil", "local"],
         "roost: error: No such option: --profil (Possible options: --profile) (see `roost run --help`)"),
        (["serve"], "roost: error: No such command 'serve'. Did you mean 'sweep'? (see `roost --help`)"),
    ],
)
def test_usage_mistakes_are_one_line_exit_2(args: list[str], line: str) -> None:
    r = subprocess.run([ROOST, *args], capture_output=True, text=True, timeout=120)
    assert (r.returncode, r.stderr, r.stdout) == (2, line + "\n", "")


def test_no_command_prints_the_help_exit_2() -> None:
    r = subprocess.run([ROOST], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Usage: roost [OPTIONS] COMMAND" in r.stdout and "audit" in r.stdout


def test_help_is_exit_0() -> None:
    r = subprocess.run([ROOST, "audit", "--help"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "--host" in r.stdout and r.stderr == ""


@pytest.mark.parametrize(
    ("url", "line"),
    [
        ("ftp://worker:8765/", "roost: error: ROOST_RESULTS_URL 'ftp://worker:8765/': must be an http:// or https:// "
                               "URL, e.g. http://worker.tailnet:8765/"),
        ("http://me:hunter2@worker:8765/", "roost: error: ROOST_RESULTS_URL: must not contain a user name or password; "
                                           "give http(s)://host:port/ only"),
    ],
)
def test_a_bad_results_url_is_refused_before_a_run_starts(url: str, line: str) -> None:
    import os

    r = subprocess.run([ROOST, "run"], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, ROOST_RESULTS_URL=url))
    assert (r.returncode, r.stderr, r.stdout) == (2, line + "\n", "")
