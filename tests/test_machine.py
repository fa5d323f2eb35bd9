"""The machine every test process on it shares (``tests/support/machine.py``): a quiet test waits for the
tests running elsewhere, of this run or another, no other test starts while it waits or runs, and the
other registered test processes and their children are stopped while it runs and continued after,
however it ends. Real processes, real flocks, real signals; each test its own machine directory
(``ROOST_TESTS_MACHINE_DIR``), but this process's own hold is checked on the real one."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.machine import MACHINE_DIR, register, unregister

TESTS = Path(__file__).parent

HOLDER = """
import dataclasses, json, subprocess, sys, time
from pathlib import Path
from support.machine import machine
name, alone, where = sys.argv[1], sys.argv[2] == "alone", Path(sys.argv[3])
own = subprocess.Popen(["sleep", "600"], start_new_session=True)  # of the holder's own tree: never paused
try:
    with machine(alone, label=name) as pause:
        (where / f"{name}.tmp").write_text(json.dumps({"pause": pause and dataclasses.asdict(pause), "own": own.pid}))
        (where / f"{name}.tmp").replace(where / f"{name}.in")
        deadline = time.monotonic() + 60  # a stopped test process cannot say go: end, and fail the test
        while not (where / f"{name}.go").exists():
            if time.monotonic() > deadline:
                sys.exit(3)
            time.sleep(0.02)
        (where / f"{name}.out").touch()
finally:
    own.kill()
"""

OTHER = """
import subprocess, sys, time
from pathlib import Path
from support.machine import register
where = Path(sys.argv[1])
assert register(label="other")
kids = [subprocess.Popen(["sleep", "600"], start_new_session=True) for _ in range(2)]
(where / "other.tmp").write_text(" ".join(str(k.pid) for k in kids))
(where / "other.tmp").replace(where / "other.kids")
while not (where / "other.go").exists():
    time.sleep(0.05)
"""


def _wait(cond: Callable[[], object], what: str, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _locks(path: Path) -> list[tuple[bool, str, int]]:
    """The flocks on ``path`` from ``/proc/locks``: (waiting, READ/WRITE, pid) each."""
    ino = path.stat().st_ino
    out = []
    for line in Path("/proc/locks").read_text().splitlines():
        f = line.split()
        waiting = f[1] == "->"
        f = f[2:] if waiting else f[1:]
        if f[0] == "FLOCK" and int(f[4].rsplit(":", 1)[1]) == ino:
            out.append((waiting, f[2], int(f[3])))
    return out


def _waiting(pid: int, path: Path) -> bool:
    """Whether process ``pid`` is blocked in flock on ``path`` (the kernel's own list of waiters)."""
    return any(waiting and p == pid for waiting, _, p in _locks(path))


def _state(pid: int) -> str:
    data = Path(f"/proc/{pid}/stat").read_bytes()
    return data[data.rindex(b")") + 2:].split()[0].decode()


@pytest.fixture
def machine_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A machine of the test's own, for the processes it starts (the environment names it)."""
    monkeypatch.setenv("ROOST_TESTS_MACHINE_DIR", str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    yield tmp_path


@pytest.fixture
def spawn(machine_dir: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start a holder (``name``, ``shared`` or ``alone``) or the other test process (``other``); every
    process left (and the sleeps they started) is killed at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(name: str, mode: str = "", **env: str) -> subprocess.Popen[bytes]:
        script, args = (OTHER, []) if name == "other" else (HOLDER, [name, mode])
        proc = subprocess.Popen([sys.executable, "-c", script, *args, str(machine_dir)], env={**os.environ, **env})
        procs.append(proc)
        return proc

    yield start
    pids = [p.pid for p in procs]
    for f in machine_dir.glob("*.in"):
        pids.append(json.loads(f.read_text())["own"])
    if (machine_dir / "other.kids").exists():
        pids += [int(p) for p in (machine_dir / "other.kids").read_text().split()]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for p in procs:
        p.wait(timeout=30)


def test_this_test_holds_the_machine_shared_and_its_process_is_registered() -> None:
    """The conftest hook, under ``-n 0`` as under xdist: this process is in the machine's registry and
    holds the machine's ``busy`` shared while its test runs."""
    me = os.getpid()
    assert (MACHINE_DIR / "pytest" / str(me)).exists(), f"pid {me} is not in {MACHINE_DIR / 'pytest'}"
    assert (False, "READ", me) in _locks(MACHINE_DIR / "busy"), _locks(MACHINE_DIR / "busy")


def test_a_quiet_test_waits_for_the_running_one_and_holds_back_the_next(machine_dir: Path, spawn: Any) -> None:
    running = spawn("running", "shared")  # a test on the other worker
    _wait((machine_dir / "running.in").exists, "the first test never started")
    quiet = spawn("quiet", "alone")
    _wait(lambda: _waiting(quiet.pid, machine_dir / "busy"), "the quiet test never waited for the running one")
    assert not (machine_dir / "quiet.in").exists()
    later = spawn("later", "shared")  # the other worker's next test
    _wait(lambda: _waiting(later.pid, machine_dir / "turn"), "the next test did not wait for the quiet one's turn")
    (machine_dir / "running.go").touch()
    _wait((machine_dir / "quiet.in").exists, "the quiet test never started after the running one ended")
    assert _waiting(later.pid, machine_dir / "turn") and not (machine_dir / "later.in").exists(), \
        "another test started while the quiet one ran"
    (machine_dir / "quiet.go").touch()
    _wait((machine_dir / "later.in").exists, "the next test never started after the quiet one")
    (machine_dir / "later.go").touch()
    for p in (running, quiet, later):
        assert p.wait(timeout=30) == 0
    assert (machine_dir / "running.out").stat().st_mtime_ns <= (machine_dir / "quiet.in").stat().st_mtime_ns
    assert (machine_dir / "quiet.out").stat().st_mtime_ns <= (machine_dir / "later.in").stat().st_mtime_ns


def test_two_tests_share_the_machine_at_once(machine_dir: Path, spawn: Any) -> None:
    procs = [spawn(n, "shared") for n in ("a", "b")]
    _wait(lambda: (machine_dir / "a.in").exists() and (machine_dir / "b.in").exists(),
          "two ordinary tests did not run at once")
    for n in ("a", "b"):
        (machine_dir / f"{n}.go").touch()
    assert all(p.wait(timeout=30) == 0 for p in procs)


def test_two_runs_share_one_machine(machine_dir: Path, spawn: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Two pytest runs (two xdist run ids, two temporary directories) hold one lock: the quiet test of one
    waits for the test of the other."""
    def run(name: str) -> dict[str, str]:
        return {"PYTEST_XDIST_TESTRUNUID": f"run-{name}", "TMPDIR": str(tmp_path_factory.mktemp(name))}

    running = spawn("running", "shared", **run("a"))
    _wait((machine_dir / "running.in").exists, "the first run's test never started")
    quiet = spawn("quiet", "alone", **run("b"))
    _wait(lambda: _waiting(quiet.pid, machine_dir / "busy"), "the other run's quiet test did not wait for it")
    assert not (machine_dir / "quiet.in").exists()
    (machine_dir / "running.go").touch()
    _wait((machine_dir / "quiet.in").exists, "the quiet test never started after the other run's test ended")
    (machine_dir / "quiet.go").touch()
    assert running.wait(timeout=30) == 0 and quiet.wait(timeout=30) == 0


def _other(machine_dir: Path, spawn: Any) -> tuple[subprocess.Popen[bytes], list[int]]:
    """Another registered test process, with two children in sessions of their own (as servers are)."""
    other = spawn("other")
    _wait((machine_dir / "other.kids").exists, "the other test process never started its children")
    kids = [int(p) for p in (machine_dir / "other.kids").read_text().split()]
    assert str(other.pid) in os.listdir(machine_dir / "pytest")
    return other, kids


def test_a_quiet_test_pauses_the_other_test_processes_and_their_children(machine_dir: Path, spawn: Any) -> None:
    """Stopped (state ``T``) from the quiet test's start to its end, then continued; the holder's own tree
    and ancestors run on (this process is registered too, and is the holder's parent); a child the
    other process had stopped itself stays stopped."""
    other, (kid, stopped_kid) = _other(machine_dir, spawn)
    os.kill(stopped_kid, signal.SIGSTOP)  # e.g. a test's hung upstream: not the watchdog's to continue
    _wait(lambda: _state(stopped_kid) == "T", "SIGSTOP did not stop the child")
    assert register(machine_dir)
    try:
        quiet = spawn("quiet", "alone")
        _wait((machine_dir / "quiet.in").exists, "the quiet test never started")
        held = json.loads((machine_dir / "quiet.in").read_text())
        states = {pid: _state(pid) for pid in (other.pid, kid, stopped_kid, held["own"], quiet.pid)}
        assert [states[other.pid], states[kid], states[stopped_kid]] == ["T", "T", "T"], states
        assert states[held["own"]] != "T" and states[quiet.pid] != "T", states
        assert held["pause"] == {"pytest": [other.pid], "paused": 2, "denied": 0}
        (machine_dir / "quiet.go").touch()
        assert quiet.wait(timeout=30) == 0
    finally:
        unregister(machine_dir)
    states = {pid: _state(pid) for pid in (other.pid, kid, stopped_kid)}
    assert states[other.pid] != "T" and states[kid] != "T" and states[stopped_kid] == "T", states
    log = (machine_dir / "log").read_text()
    assert f"pid {quiet.pid} quiet: paused 2 processes of 1 other pytest processes [{other.pid}]" in log, log
    assert f"pid {quiet.pid} quiet: resumed 2 processes" in log, log


def test_a_quiet_test_killed_leaves_nothing_stopped(machine_dir: Path, spawn: Any) -> None:
    """The holder SIGKILLed mid-measurement (a timeout, the OOM killer): its watchdog continues what it
    stopped, and the machine is free for the next test."""
    other, kids = _other(machine_dir, spawn)
    quiet = spawn("quiet", "alone")
    _wait((machine_dir / "quiet.in").exists, "the quiet test never started")
    assert [_state(pid) for pid in (other.pid, *kids)] == ["T", "T", "T"]
    quiet.kill()
    assert quiet.wait(timeout=30) == -signal.SIGKILL
    _wait(lambda: all(_state(pid) != "T" for pid in (other.pid, *kids)),
          "the processes the killed quiet test paused stayed stopped", timeout_s=10)
    _wait(lambda: f"pid {quiet.pid} quiet: resumed 3 processes" in (machine_dir / "log").read_text(),
          "the watchdog did not log the resume")
    after = spawn("after", "alone")
    _wait((machine_dir / "after.in").exists, "the machine stayed held after the quiet test was killed")
    assert json.loads((machine_dir / "after.in").read_text())["pause"]["paused"] == 3
    (machine_dir / "after.go").touch()
    assert after.wait(timeout=30) == 0
    assert all(_state(pid) != "T" for pid in (other.pid, *kids))
