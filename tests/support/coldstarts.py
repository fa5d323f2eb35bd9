"""The vLLM cold starts a test session makes, counted from the outside (test-only).

Every pytest process that runs tests (each xdist worker, or the one process of ``-n 0``) runs a
:class:`Scanner` thread from ``tests/conftest.py``: every :data:`SCAN_INTERVAL_S` it lists ``/proc`` and
looks at the processes it has not seen yet. A vLLM API server (``python -m vllm.entrypoints.openai.api_server``,
as ``roost.serve.process.vllm_command`` and ``roost.serve.docker.containers.docker_run_kwargs`` start it,
or ``vllm serve``) is this session's when

- this pytest process is among its ancestors (the process backend, ``roost run``, a Prefect worker's flow
  run: all children of children of the test), or
- it runs in a Docker container (its ``/proc/<pid>/cgroup`` names the container) that mounts a directory
  under one of the session's own directories (the containers' checkpoints lie in the session dir), or on
  an engine of the session's own (``support.remote_engine``: a ``dockerd`` the test started).

Its start is the process's own start time (``/proc/<pid>/stat``); it is ready when its log says so
(:data:`roost.vllm.wordings.APP_STARTED`, uvicorn's line: ``/health`` answers 200): the process backend's
log is the file its stdout goes to (``/proc/<pid>/fd/1``), read from its size when the server was found;
a container's is Docker's ``<id>-json.log``, whose lines carry their own times. A log line seen in the
process backend's file is timed when the scanner reads it (to :data:`SCAN_INTERVAL_S`). Each start is
put down to the test running when it was found (``pytest_runtest_logstart``): a module fixture's server
to the module's first test. A start-to-ready time includes any time the server spent stopped by a quiet
test elsewhere (``support.machine``). The scan costs about 1 ms of CPU a second.

Each xdist worker hands its starts to the controller (``workeroutput``), which sums them up at the end of the
run (:func:`summary_lines`; ``-n 0``: the one process). Nothing here fails a test: a scan or a read that
fails is skipped.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import re
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from roost.vllm.wordings import APP_STARTED

SCAN_INTERVAL_S = 0.5
"""How often the scanner lists /proc and reads the logs of servers not yet ready."""
API_SERVER_MODULES = ("vllm.entrypoints.openai.api_server",)
"""The modules a ``python -m`` starts a vLLM API server with (``vllm.entrypoints.cli.main serve`` too)."""
READ_CAP = 1 << 20
"""At most this many new log bytes are read per server per scan (the rest at the next one)."""
_CONTAINER_ID = re.compile(r"(?:/docker/|docker-)([0-9a-f]{64})\b")
_PYTHON_OPTS_WITH_VALUE = {"-X", "-W", "-Q"}


# --- reading one process (pure parts first) -----------------------------------------------------------


def is_api_server(argv: Sequence[str], modules: Sequence[str] = API_SERVER_MODULES) -> bool:
    """Whether ``argv`` (a ``/proc/<pid>/cmdline``) starts a vLLM API server: ``python [opts] -m MODULE``
    with MODULE one of ``modules``, ``python -m vllm.entrypoints.cli.main serve`` or ``vllm serve``.

    Not: ``python -c ... vllm.entrypoints...`` (a stand-in's argv), ``python SCRIPT -m ...`` (a fake
    interpreter script), ``docker-init -- python3 -m ...`` (the container's init: its child is the server),
    ``vllm bench serve`` (a client)."""
    if not argv:
        return False
    exe = os.path.basename(argv[0])
    if exe == "vllm":
        return len(argv) > 1 and argv[1] == "serve"
    if not exe.startswith("python"):
        return False
    i = 1
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "-m":
        if argv[i] == "-c" or argv[i] == "-":
            return False
        i += 2 if argv[i] in _PYTHON_OPTS_WITH_VALUE else 1
    if i + 1 >= len(argv) or argv[i] != "-m":
        return False
    module = argv[i + 1]
    if module in modules:
        return True
    return module == "vllm.entrypoints.cli.main" and argv[i + 2:i + 3] == ["serve"]


def parse_stat(text: str) -> tuple[int, int]:
    """``(ppid, starttime)`` from a ``/proc/<pid>/stat`` line; ``starttime`` in clock ticks after boot.
    The command name (in parentheses) may hold spaces and parentheses: the fields follow its last ``)``."""
    rest = text[text.rindex(")") + 2:].split()
    return int(rest[1]), int(rest[19])


def container_id(cgroup: str) -> str | None:
    """The Docker container a ``/proc/<pid>/cgroup`` names (``/docker/<id>``, ``docker-<id>.scope``), if any."""
    m = _CONTAINER_ID.search(cgroup)
    return m[1] if m else None


def option(argv: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` in ``argv`` (``--flag V`` or ``--flag=V``)."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg[len(flag) + 1:]
    return None


def describe(argv: Sequence[str], container: str = "") -> str:
    """``served-name via venv-or-container``: which server this was, for the summary."""
    name = option(argv, "--served-model-name") or Path(option(argv, "--model") or "?").name
    if container:
        return f"{name} in container {container}"
    venv = Path(argv[0]).parent.parent.name if "/" in argv[0] else argv[0]
    return f"{name} on {venv}"


# --- readiness from a log -------------------------------------------------------------------------------


class ReadyWatch:
    """Reads a log as it grows and tells when the ready line (:data:`APP_STARTED`) arrives.

    ``docker``: the log is Docker's json-file log (one JSON object a line: ``log``, ``stream``, ``time``),
    and the ready time is the line's own ``time``; otherwise a plain log, and the time is ``now`` when the
    line is first read."""

    def __init__(self, path: Path, offset: int, *, docker: bool) -> None:
        self.path, self.offset, self.docker = path, offset, docker
        self._partial = b""

    def feed(self, data: bytes, now: float) -> float | None:
        """Take the next bytes of the log; the ready time if the ready line is among them."""
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            at = self._ready_at(raw, now)
            if at is not None:
                return at
        return None

    def _ready_at(self, raw: bytes, now: float) -> float | None:
        if APP_STARTED.text.encode() not in raw:
            return None
        if not self.docker:
            return now
        try:
            entry = json.loads(raw)
            if not APP_STARTED.marker.search(entry.get("log", "")):
                return None
            return dt.datetime.fromisoformat(entry["time"]).timestamp()
        except (ValueError, KeyError, TypeError):
            return now

    def poll(self, now: float | None = None) -> float | None:
        """Read what the log gained since the last poll (at most :data:`READ_CAP` bytes); a plain log's
        ready line is timed ``now`` (default: just after the read)."""
        try:
            if self.path.stat().st_size <= self.offset:
                return None
            with self.path.open("rb") as fh:
                fh.seek(self.offset)
                data = fh.read(READ_CAP)
        except OSError:
            return None
        self.offset += len(data)
        return self.feed(data, time.time() if now is None else now)


# --- one cold start, and the summary --------------------------------------------------------------------


@dataclass
class ColdStart:
    pid: int
    what: str  # describe(): served name and venv or container
    nodeid: str  # the test running when it was found
    started: float  # epoch seconds: the process's start
    ready: float | None = None  # epoch seconds: its ready line
    ended: float | None = None  # epoch seconds: when it was seen gone (None: still running at the end)
    container: str = ""  # the Docker container id, if it ran in one

    @property
    def ready_s(self) -> float | None:
        return None if self.ready is None else max(0.0, self.ready - self.started)

    @property
    def file(self) -> str:
        return self.nodeid.split("::", 1)[0] or "(no test running)"


def summary_lines(starts: Iterable[ColdStart], top: int = 8) -> list[str]:
    """The end-of-session summary: counts, total and largest start-to-ready time, the files that spent most."""
    starts = list(starts)
    ready = [s for s in starts if s.ready_s is not None]
    total = sum(s.ready_s or 0.0 for s in ready)
    lines = [f"{len(starts)} vLLM cold start(s), {len(ready)} reached ready; start to ready: {total:.1f} s in total"]
    if ready:
        big = max(ready, key=lambda s: s.ready_s or 0.0)
        lines[0] += f", {big.ready_s:.1f} s the largest ({big.what}, {big.nodeid or big.file})"
    never = [s for s in starts if s.ready_s is None]
    for s in never[:top]:
        lived = f"stopped after {s.ended - s.started:.1f} s" if s.ended is not None else "still running at the end"
        lines.append(f"never ready: {s.what}, {s.nodeid or s.file} ({lived})")
    if len(never) > top:
        lines.append(f"never ready: {len(never) - top} more")
    by_file: dict[str, list[ColdStart]] = {}
    for s in starts:
        by_file.setdefault(s.file, []).append(s)
    ranked = sorted(by_file.items(), key=lambda kv: -sum(s.ready_s or 0.0 for s in kv[1]))
    if ranked:
        lines.append(f"by file (the {min(top, len(ranked))} that spent most of {len(ranked)}): "
                     "starts, ready, start-to-ready s total / largest")
        width = max(len(f) for f, _ in ranked[:top])
        for f, group in ranked[:top]:
            times = [s.ready_s for s in group if s.ready_s is not None]
            lines.append(f"  {f:<{width}}  {len(group):>2} {len(times):>2}  {sum(times):7.1f} / "
                         f"{max(times, default=0.0):5.1f}")
    return lines


# --- the scanner ----------------------------------------------------------------------------------------


def _boot_epoch() -> float:
    """The wall-clock time of boot: /proc/<pid>/stat's starttime counts from it (CLOCK_BOOTTIME)."""
    return time.time() - time.clock_gettime(time.CLOCK_BOOTTIME)


@dataclass
class _Tracked:
    start: ColdStart
    starttime: int  # /proc/<pid>/stat's, to tell a reused pid
    watch: ReadyWatch | None


@dataclass
class Scanner:
    """Finds this session's vLLM API servers in ``proc`` (see the module's doc). ``owner``: the pytest
    process (its descendants are the session's); ``roots``: the session's directories (a container mounting
    one is the session's)."""

    owner: int = field(default_factory=os.getpid)
    roots: Sequence[Path] = ()
    proc: Path = Path("/proc")
    docker_root: Path = Path("/var/lib/docker")
    modules: Sequence[str] = API_SERVER_MODULES
    nodeid: str = ""  # the test running now: set by the caller
    starts: list[ColdStart] = field(default_factory=list)
    _seen: set[int] = field(default_factory=set)
    _tracked: dict[int, _Tracked] = field(default_factory=dict)
    _containers: dict[str, _Container | None] = field(default_factory=dict)  # by id; None: not the session's
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _ticks: float = 0.0
    _own_container: str | None = None  # when pytest itself runs in a container: its processes are not "in one"

    def start(self) -> Scanner:
        self._ticks = float(os.sysconf("SC_CLK_TCK"))
        with contextlib.suppress(OSError):
            self._own_container = container_id((self.proc / str(self.owner) / "cgroup").read_text())
        self._seen = set(self._pids())  # what runs already is not this session's start
        self._thread = threading.Thread(target=self._run, name="vllm-coldstarts", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> list[ColdStart]:
        """Stop the thread after one last scan; every start found."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with contextlib.suppress(Exception):
            self.scan()
        return self.starts

    def _run(self) -> None:
        while not self._stop.wait(SCAN_INTERVAL_S):
            with contextlib.suppress(Exception):
                self.scan()

    def _pids(self) -> list[int]:
        return [int(e.name) for e in os.scandir(self.proc) if e.name.isdigit()]

    def scan(self) -> None:
        pids = set(self._pids())
        for pid in pids - self._seen:
            self._look_at(pid)
        self._seen = pids
        for pid, t in list(self._tracked.items()):
            alive = pid in pids and self._starttime(pid) == t.starttime
            if t.watch is not None and t.start.ready is None:
                t.start.ready = t.watch.poll()
            if not alive:
                t.start.ended = time.time()
                del self._tracked[pid]

    def _starttime(self, pid: int) -> int | None:
        try:
            return parse_stat((self.proc / str(pid) / "stat").read_text())[1]
        except (OSError, ValueError, IndexError):
            return None

    def _argv(self, pid: int) -> list[str]:
        try:
            raw = (self.proc / str(pid) / "cmdline").read_bytes()
        except OSError:
            return []
        return raw.decode(errors="replace").split("\0")[:-1] if raw else []

    def _look_at(self, pid: int) -> None:
        argv = self._argv(pid)
        if not is_api_server(argv, self.modules):
            return
        try:
            ppid, starttime = parse_stat((self.proc / str(pid) / "stat").read_text())
            cgroup = (self.proc / str(pid) / "cgroup").read_text()
        except (OSError, ValueError, IndexError):
            return
        if is_api_server(self._argv(ppid), self.modules):
            return  # a forked child of a server already counted
        cid = container_id(cgroup) or ""
        if cid == self._own_container:
            cid = ""
        watch: ReadyWatch | None
        container = self._container(cid) if cid else None
        if cid:
            if container is None:
                return
            log = container.dir / f"{cid}-json.log"
            watch = ReadyWatch(log, _size(log), docker=True)
        else:
            if not self._descends_from_owner(ppid):
                return
            try:
                out = Path(os.readlink(self.proc / str(pid) / "fd" / "1"))
            except OSError:
                out = None
            watch = ReadyWatch(out, _size(out), docker=False) if out is not None and out.is_file() else None
        started = _boot_epoch() + starttime / self._ticks
        cold = ColdStart(pid=pid, what=describe(argv, container.name if container else ""), nodeid=self.nodeid,
                         started=started, container=cid)
        self.starts.append(cold)
        self._tracked[pid] = _Tracked(cold, starttime, watch)

    def _descends_from_owner(self, pid: int) -> bool:
        for _ in range(64):
            if pid == self.owner:
                return True
            if pid <= 1:
                return False
            try:
                pid = parse_stat((self.proc / str(pid) / "stat").read_text())[0]
            except (OSError, ValueError, IndexError):
                return False
        return False

    def _dockerds(self) -> list[tuple[int, Path]]:
        """Every running ``dockerd`` and its data root (``--data-root``; default ``docker_root``): a test may run
        an engine of its own (``support.remote_engine``)."""
        out = []
        for pid in self._pids():
            argv = self._argv(pid)
            if argv and os.path.basename(argv[0]) == "dockerd":
                out.append((pid, Path(option(argv, "--data-root") or self.docker_root)))
        return out

    def _container(self, cid: str) -> _Container | None:
        """Container ``cid``, if it is the session's: it mounts a directory under one of ``roots``, or its
        engine is the session's (its data root under one of ``roots``, or its ``dockerd`` a descendant)."""
        if cid in self._containers:
            return self._containers[cid]
        def engines() -> Iterator[tuple[int | None, Path]]:  # the default root first: the others cost a scan
            yield None, self.docker_root
            yield from ((pid, root) for pid, root in self._dockerds() if root != self.docker_root)

        found = None
        for engine, root in engines():
            folder = root / "containers" / cid
            try:
                config: dict[str, Any] = json.loads((folder / "config.v2.json").read_text())
            except (OSError, ValueError):
                continue
            sources = [Path(m.get("Source") or "") for m in (config.get("MountPoints") or {}).values()]
            ours = any(p.is_relative_to(r) for p in [*sources, folder] if str(p) != "." for r in self.roots)
            if ours or (engine is not None and self._descends_from_owner(engine)):
                found = _Container(folder, str(config.get("Name") or cid[:12]).lstrip("/"))
            break
        self._containers[cid] = found
        return found


@dataclass(frozen=True)
class _Container:
    dir: Path  # <data root>/containers/<id>: config.v2.json, <id>-json.log
    name: str


def _size(path: Path | None) -> int:
    try:
        return path.stat().st_size if path is not None else 0
    except OSError:
        return 0


# --- the pytest plugin (tests/conftest.py registers it) -----------------------------------------------------


class ColdStartsPlugin:
    """Scans in every pytest process that runs tests; an xdist worker hands its starts to the controller in
    ``workeroutput`` (``pytest_testnodedown``); the controller, or the one process of ``-n 0``, prints the
    summary at the end of the run."""

    KEY = "roost_coldstarts"

    def __init__(self, roots: Sequence[Path]) -> None:
        self.roots = list(roots)
        self.scanner: Scanner | None = None
        self.starts: list[ColdStart] = []  # found here, or handed over by the workers

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        if session.config.pluginmanager.hasplugin("dsession"):
            return  # the xdist controller runs no test: its workers scan
        with contextlib.suppress(Exception):
            self.scanner = Scanner(roots=self.roots).start()

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        if self.scanner is not None:
            self.scanner.nodeid = nodeid

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.scanner is None:
            return
        self.starts += self.scanner.stop()
        self.scanner = None
        workeroutput = getattr(session.config, "workeroutput", None)
        if workeroutput is not None:
            workeroutput[self.KEY] = [asdict(s) for s in self.starts]

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        with contextlib.suppress(Exception):
            self.starts += [ColdStart(**s) for s in getattr(node, "workeroutput", {}).get(self.KEY, [])]

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        if hasattr(config, "workerinput"):
            return
        terminalreporter.write_sep("=", "vLLM cold starts")
        for line in summary_lines(sorted(self.starts, key=lambda s: s.started)):
            terminalreporter.write_line(line)
