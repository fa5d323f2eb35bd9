"""The xdist workers' shared machine (``tests/support/machine.py``): a quiet test waits for the test
running on another worker, and no other test starts while it waits or runs. Real processes, real flocks."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from pathlib import Path

HOLDER = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from support.machine import machine
name, alone, where = sys.argv[1], sys.argv[2] == "alone", Path(sys.argv[3])
with machine(alone, "t", where):
    (where / f"{{name}}.in").touch()
    while not (where / f"{{name}}.go").exists():
        time.sleep(0.02)
    (where / f"{{name}}.out").touch()
"""


def _wait(cond: object, what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_a_quiet_test_waits_for_the_running_one_and_holds_back_the_next(tmp_path: Path) -> None:
    script = HOLDER.format(tests=str(Path(__file__).parent))

    def holder(name: str, mode: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-c", script, name, mode, str(tmp_path)])

    def turn_taken() -> bool:
        with open(tmp_path / "roost-tests-t.turn", "a") as f:
            try:
                fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            return False

    running = holder("running", "shared")  # a test on the other worker
    _wait((tmp_path / "running.in").exists, "the first test never started")
    quiet = holder("quiet", "alone")
    _wait(turn_taken, "the quiet test never asked for its turn")
    later = holder("later", "shared")  # the other worker's next test
    time.sleep(0.5)
    assert not (tmp_path / "quiet.in").exists(), "the quiet test started beside a running one"
    (tmp_path / "running.go").touch()
    _wait((tmp_path / "quiet.in").exists, "the quiet test never started after the running one ended")
    time.sleep(0.5)
    assert not (tmp_path / "later.in").exists(), "another test started while the quiet one ran"
    (tmp_path / "quiet.go").touch()
    _wait((tmp_path / "later.in").exists, "the next test never started after the quiet one")
    (tmp_path / "later.go").touch()
    for p in (running, quiet, later):
        assert p.wait(timeout=30) == 0
    assert (tmp_path / "running.out").stat().st_mtime_ns <= (tmp_path / "quiet.in").stat().st_mtime_ns
    assert (tmp_path / "quiet.out").stat().st_mtime_ns <= (tmp_path / "later.in").stat().st_mtime_ns


def test_two_tests_share_the_machine_at_once(tmp_path: Path) -> None:
    script = HOLDER.format(tests=str(Path(__file__).parent))
    procs = [subprocess.Popen([sys.executable, "-c", script, n, "shared", str(tmp_path)]) for n in ("a", "b")]
    _wait(lambda: (tmp_path / "a.in").exists() and (tmp_path / "b.in").exists(), "two ordinary tests did not run at once")
    for n in ("a", "b"):
        (tmp_path / f"{n}.go").touch()
    assert all(p.wait(timeout=30) == 0 for p in procs)
