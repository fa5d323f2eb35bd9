"""The machine every pytest process on it shares (``tests/conftest.py``): a test marked ``quiet`` runs
while no other test on the machine does, and with every other pytest process paused.

One directory for the whole machine (:data:`MACHINE_DIR`, whatever the xdist run id, ``-n``, ``TMPDIR``
or user), holding:

- ``turn`` and ``busy``, two flocks (:func:`machine`): every test of every run holds ``busy`` shared while
  it runs, a quiet test holds it exclusive;
- ``pytest/<pid>``, the registry of the processes that run tests (:func:`register`): each xdist worker,
  or the one process of ``-n 0``, enters its pid at session start;
- ``log``, a line for each pause and each resume (how many processes, for which test).

Holding ``busy`` exclusive keeps the other processes' *tests* away, not their servers: an idle vLLM, a
Prometheus scraping every second, gateways, a Prefect server and its workers, Prefect's own log and
event threads inside the pytest process. So while a quiet test holds the machine (its setup to its
teardown), every other registered pytest process and all its descendants (by ``/proc`` ppid links:
servers started with ``start_new_session`` are descendants too) are stopped with SIGSTOP, and
continued with SIGCONT when it ends. The stopping is done by a watchdog (``python machine.py watch``,
:func:`_watch`), a child of the quiet test's process in a session of its own, holding the read end of
a pipe: it stops the set, reports, then blocks on the pipe; a line, EOF (the holder closed it, or died:
SIGKILL, a timeout) or the holder's death seen through a pidfd makes it continue everything it stopped
and exit. Nothing stays stopped whichever way the holder ends, short of the watchdog itself being
SIGKILLed.

Not paused: the quiet test's own process tree (and its ancestors); processes another process started
that left the tree (double-forked daemons, reparented to init); Docker containers (children of
containerd, not of the worker: a container another worker started keeps running); processes already
stopped (a test's own SIGSTOP is left alone, and not continued); another user's processes unless root
(counted as "not permitted"). The other pytest processes are between tests when stopped: each is
blocked in flock on ``turn``/``busy`` or outside a test (collection), never inside one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

MACHINE_DIR = Path("/tmp/roost-tests-machine")
"""The one directory of every run on the machine. ``ROOST_TESTS_MACHINE_DIR`` replaces it (tests of this
module only: a run that sets it shares the machine with nobody)."""

STOPPED = frozenset("TtZX")  # stopped, traced, zombie, dead: not ours to stop (nor to continue)


def machine_dir(where: Path | None = None) -> Path:
    """The machine directory, created for every user (0o777): ``where``, or :data:`MACHINE_DIR`."""
    d = Path(where or os.environ.get("ROOST_TESTS_MACHINE_DIR") or MACHINE_DIR)
    for sub in (d, d / "pytest"):
        if not sub.is_dir():
            sub.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(PermissionError):
                os.chmod(sub, 0o777)  # not sticky: any user's run cleans up a dead pid's entry
    return d


def _open(path: Path, flags: int) -> int:
    """Open ``path``, creating it for every user if it is missing (an existing file of another user is
    opened without O_CREAT, which ``fs.protected_*`` may refuse)."""
    try:
        return os.open(path, flags)
    except FileNotFoundError:
        fd = os.open(path, flags | os.O_CREAT, 0o666)
        with contextlib.suppress(PermissionError):
            os.fchmod(fd, 0o666)
        return fd


# ---- /proc -------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Proc:
    ppid: int
    state: str
    start: int  # clock ticks after boot: a pid and its start time name one process


def _proc(pid: int) -> Proc | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = data[data.rindex(b")") + 2:].split()
    return Proc(ppid=int(rest[1]), state=rest[0].decode(), start=int(rest[19]))


def _processes() -> dict[int, Proc]:
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit() and (p := _proc(int(name))) is not None:
            table[int(name)] = p
    return table


def _ancestors(pid: int, table: dict[int, Proc]) -> list[int]:
    out: list[int] = []
    while (p := table.get(pid)) is not None and p.ppid > 0 and p.ppid not in out:
        out.append(pid := p.ppid)
    return out


def _descendants(roots: Iterable[int], table: dict[int, Proc]) -> list[int]:
    """``roots`` and their descendants, parents before children."""
    children: dict[int, list[int]] = {}
    for pid, p in table.items():
        children.setdefault(p.ppid, []).append(pid)
    out, seen = [], set()
    queue = [r for r in roots if r in table]
    while queue:
        pid = queue.pop(0)
        if pid not in seen:
            seen.add(pid)
            out.append(pid)
            queue.extend(children.get(pid, []))
    return out


# ---- the registry ------------------------------------------------------------------------------


def _registered(d: Path, clean: bool = False) -> list[int]:
    """The live registered pytest processes (an entry whose pid died, or names a later process with
    that pid, is stale: removed when ``clean``)."""
    out = []
    for entry in (d / "pytest").iterdir():
        if not entry.name.isdigit():
            continue
        p = _proc(int(entry.name))
        try:
            live = p is not None and int(entry.read_text().split()[0]) == p.start
        except (OSError, ValueError, IndexError):
            live = False  # being written (never: written by rename) or gone
        if live:
            out.append(int(entry.name))
        elif clean:
            with contextlib.suppress(OSError):
                entry.unlink()
    return out


def register(where: Path | None = None, label: str = "") -> bool:
    """Enter this process in the machine's registry of test processes, after cleaning stale entries.

    Waits while a quiet test holds the machine (``turn`` shared, as a test does): a run starting then
    registers, collects and imports after it, instead of beside it unpaused.

    Returns False, registering nothing, in a pytest run started by a test of a registered process (a
    nested run): that test already holds the machine, and a nested run waiting for ``turn`` behind a
    quiet test of the outer run, itself waiting for that test, would never go on."""
    d = machine_dir(where)
    mine = os.getpid()
    registered = set(_registered(d))
    if registered & set(_ancestors(mine, _processes())):
        return False
    fd = _open(d / "turn", os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH)
        _registered(d, clean=True)
        me = _proc(mine)
        assert me is not None
        tmp = d / "pytest" / f".{mine}.tmp"
        tmp.write_text(f"{me.start} {label}\n")
        tmp.chmod(0o666)
        tmp.replace(d / "pytest" / str(mine))
    finally:
        os.close(fd)  # releases turn
    return True


def unregister(where: Path | None = None) -> None:
    with contextlib.suppress(FileNotFoundError):
        (machine_dir(where) / "pytest" / str(os.getpid())).unlink()


# ---- the lock ----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Pause:
    """What a quiet test's watchdog stopped: ``paused`` processes of the ``pytest`` processes (pids)."""

    pytest: list[int]
    paused: int
    denied: int  # another user's processes, without the permission to stop them

    def summary(self) -> str:
        text = f"paused {self.paused} processes of {len(self.pytest)} other pytest processes {self.pytest}"
        return text + (f" ({self.denied} not permitted)" if self.denied else "")


@contextlib.contextmanager
def machine(alone: bool, where: Path | None = None, label: str = "") -> Iterator[Pause | None]:
    """The machine, shared with every other test on it, or this test's alone (then yields the
    :class:`Pause` of the other pytest processes; shared: None).

    Two flocks in the machine directory: every test holds ``busy`` shared while it runs, and a test that
    must run alone holds it exclusive, so it waits for the tests running elsewhere to end. ``turn``
    bounds that wait: taken exclusive first, it stops the other processes from starting another test
    (each takes it shared, briefly, before ``busy``), which flock alone would let them do ahead of a
    waiting exclusive lock. Held alone, the other registered pytest processes and their descendants are
    stopped until the end (the module's docstring)."""
    d = machine_dir(where)
    turn, busy = _open(d / "turn", os.O_RDONLY), _open(d / "busy", os.O_RDONLY)
    try:
        fcntl.flock(turn, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        fcntl.flock(busy, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turn, fcntl.LOCK_UN)
            yield None
        else:
            with _paused(d, label) as pause:
                yield pause
    finally:
        os.close(busy)  # closing releases the locks
        os.close(turn)


@contextlib.contextmanager
def _paused(d: Path, label: str, ready_timeout_s: float = 120) -> Iterator[Pause]:
    watchdog = subprocess.Popen([sys.executable, "-I", "-S", __file__, "watch", str(d), str(os.getpid()), label],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
    assert watchdog.stdin is not None and watchdog.stdout is not None
    try:
        ready, _, _ = select.select([watchdog.stdout], [], [], ready_timeout_s)
        line = watchdog.stdout.readline() if ready else b""
        if not line:
            raise RuntimeError(f"the machine's watchdog did not pause the other pytest processes "
                               f"(exit {watchdog.poll()}; see {d / 'log'})")
        yield Pause(**json.loads(line))
    finally:
        with contextlib.suppress(BrokenPipeError):
            watchdog.stdin.write(b"resume\n")
            watchdog.stdin.close()
        try:
            watchdog.wait(timeout=60)
        except subprocess.TimeoutExpired:
            watchdog.terminate()  # it continues what it stopped, then exits
            watchdog.wait(timeout=60)
        watchdog.stdout.close()


# ---- the watchdog ------------------------------------------------------------------------------


def _log(d: Path, text: str) -> None:
    line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {text}\n".encode()
    with contextlib.suppress(OSError):
        path = d / "log"
        if path.exists() and path.stat().st_size > 1 << 20:
            path.replace(d / "log.1")
        fd = _open(path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)


def _wait_stopped(pids: Iterable[int], timeout_s: float = 2.0) -> None:
    """Until each of ``pids`` is stopped or gone: SIGSTOP takes effect when the process next runs, and
    until then it can still start a child."""
    deadline = time.monotonic() + timeout_s
    pending = list(pids)
    while pending and time.monotonic() < deadline:
        pending = [pid for pid in pending if (p := _proc(pid)) is not None and p.state not in STOPPED]
        if pending:
            time.sleep(0.001)


def _stop_others(d: Path, holder: int, stopped: dict[int, int]) -> Pause:
    """Stop the registered pytest processes other than ``holder``'s tree and its ancestors, with their
    descendants, scanning again after each round until a scan finds nothing new (a stopped process
    starts nothing)."""
    roots: list[int] = []
    denied: set[int] = set()
    for _ in range(50):
        table = _processes()
        own = {holder, *_ancestors(holder, table), *_descendants([holder], table)}
        roots = [pid for pid in _registered(d) if pid not in own]
        targets = [pid for pid in _descendants(roots, table)
                   if pid not in own and pid not in stopped and pid not in denied and table[pid].state not in STOPPED]
        if not targets:
            break
        for pid in targets:
            try:
                os.kill(pid, signal.SIGSTOP)
                stopped[pid] = table[pid].start
            except ProcessLookupError:
                pass  # exited meanwhile
            except PermissionError:
                denied.add(pid)
        _wait_stopped(targets)
    else:
        raise RuntimeError("the other pytest processes kept starting processes through 50 scans")
    return Pause(pytest=sorted(roots), paused=len(stopped), denied=len(denied))


def _resume(stopped: dict[int, int]) -> int:
    resumed = 0
    for pid, start in stopped.items():
        p = _proc(pid)
        if p is not None and p.start == start:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
                resumed += 1
    return resumed


def _watch(d: Path, holder: int, label: str) -> int:
    """The watchdog of a quiet test's process ``holder``: pause the others, report, wait for the end."""

    def ended(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, ended)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the holder ends the pause (a Ctrl-C reaches it)
    try:
        holder_fd: int | None = os.pidfd_open(holder)
    except (AttributeError, OSError):
        holder_fd = None
    if os.getppid() != holder:
        return 1  # the holder ended before its watchdog started
    stopped: dict[int, int] = {}
    t0 = time.monotonic()
    try:
        pause = _stop_others(d, holder, stopped)
        _log(d, f"pid {holder} {label}: {pause.summary()}")
        sys.stdout.write(json.dumps(dataclasses.asdict(pause)) + "\n")
        sys.stdout.flush()
        # a line or EOF on stdin (the holder's end, or its death), or the holder's death (a fork of it
        # may still hold the pipe open)
        while True:
            ready, _, _ = select.select([sys.stdin.buffer] + ([holder_fd] if holder_fd is not None else []), [], [],
                                       None if holder_fd is not None else 1.0)
            if ready or os.getppid() != holder:
                break
    finally:
        resumed = _resume(stopped)
        _log(d, f"pid {holder} {label}: resumed {resumed} processes after {time.monotonic() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["watch"]:
        sys.exit(_watch(Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else ""))
    sys.exit("usage: machine.py watch DIR HOLDER_PID [LABEL]")
