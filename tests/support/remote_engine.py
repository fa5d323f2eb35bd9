"""A Docker engine on "another machine": a second ``dockerd`` in a network namespace of its own, reached from
here only over a veth pair at a private address, as roost reaches a Spark's engine through a host's
``docker_url`` (``tcp://ADDRESS:23750``).

- The namespace gets the engine's end of the veth (``10.231.N.2/30``; this machine keeps ``10.231.N.1/30``),
  the first free /30 of 10.231.0.0/16 (chosen under a lock: two sessions on one machine never take the same).
  The engine's loopback is its own: a port published on its 127.0.0.1 is not reachable from here.
- ``dockerd`` joins only the network namespace (``nsenter --net``). ``ip netns exec`` would also give it a
  mount namespace with a fresh /sys, without the cgroup v1 hierarchies it needs ("Devices cgroup isn't
  mounted"); sharing this machine's mounts is what lets it bind-mount a checkpoint roost downloaded here (a
  real remote host has the checkpoint on its own disk). Its data root, exec root, socket and pidfile are on a
  tmpfs of its own: loading the ~4 GB base image is not slowed by this machine's disk, and removing the
  ~100,000 files it unpacks is an unmount (an ``rm -rf`` of that tree took 2.7 min here). ``--tls=false``:
  plain TCP without TLS, said explicitly (else dockerd waits 15 s to warn about it). Its bridge, iptables
  rules and published ports live in the namespace.
- Images reach it as they reach a remote engine: ``docker save`` here, ``docker -H tcp://... load`` there.

:class:`Prefetch` sets one up in a thread of its own, so that the image load (70-110 s) overlaps other tests.

:func:`remote_engine` tears everything down whatever happened (containers, dockerd, processes under its root,
mounts, the tmpfs, the veth, the namespace) and then fails if anything is left. One a pytest process killed
before its teardown left behind (its pid is gone) is torn down by the next one.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.wait import wait_started

ENGINE_PORT = 23750
SUBNETS = ipaddress.ip_network("10.231.0.0/16")
LOCK = Path("/tmp/roost-remote-engine.lock")
ROOTS = Path("/var/tmp")
PREFIX = "roost-engine-"
TMPFS_SIZE = "8g"  # an upper bound: a tmpfs holds what is written (the base image, the serving image's labels)
START_TIMEOUT_S = 90
STOP_GRACE_S = 30


@dataclass
class RemoteEngine:
    """A running second engine: ``url`` is what a host's ``docker_url`` names."""

    netns: str
    veth: str  # this machine's end of the pair
    host_addr: str  # this machine's address on the pair
    addr: str  # the engine's address (in the namespace)
    root: Path  # the tmpfs: data/, exec/, docker.sock, dockerd.pid
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    seconds: dict[str, float] = field(default_factory=dict)  # "engine" (netns + dockerd), "image load"

    @property
    def url(self) -> str:
        return f"tcp://{self.addr}:{ENGINE_PORT}"

    def client(self, timeout: int = 60) -> Any:
        """A Docker SDK client for the engine, over TCP through the veth."""
        import docker

        return docker.DockerClient(base_url=self.url, version="auto", timeout=timeout)

    def answers(self) -> bool:
        try:
            client = self.client(timeout=5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:  # DockerException, or requests' errors while it starts
            return False


def _names(pid: int) -> tuple[str, str, Path]:
    """The namespace, this machine's veth end and the root of the engine of pytest process ``pid``."""
    return f"{PREFIX}{pid}", f"roost{pid}h", ROOTS / f"{PREFIX}{pid}"


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def _addresses_here() -> set[str]:
    """Every IPv4 address of this machine's interfaces."""
    out = _ip("-o", "-4", "addr", "show").stdout
    return set(re.findall(r"\binet (\d+\.\d+\.\d+\.\d+)/", out))


def _free_pair() -> tuple[str, str]:
    """(this machine's, the engine's) address of the first /30 of 10.231.0.0/16 with neither in use here."""
    used = _addresses_here()
    for net in SUBNETS.subnets(new_prefix=30):
        near, far = (str(a) for a in net.hosts())
        if near not in used and far not in used:
            return near, far
    raise RuntimeError(f"no free /30 left in {SUBNETS}")


def _mounts_under(root: Path) -> list[str]:
    """Mount points at or under ``root``, deepest first."""
    points = []
    with open("/proc/self/mounts") as f:
        for line in f:
            point = line.split()[1].replace("\\040", " ")
            if point == str(root) or point.startswith(f"{root}/"):
                points.append(point)
    return sorted(points, key=len, reverse=True)


def _processes_under(root: Path) -> list[int]:
    """Processes whose command line names ``root`` (dockerd, its containerd, shims, docker-proxy)."""
    found = []
    needle = str(root).encode()
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            with contextlib.suppress(OSError):
                if needle in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
    return found


def _netns_exists(name: str) -> bool:
    return name in _ip("netns", "list").stdout.split()


def _link_exists(name: str) -> bool:
    return _ip("link", "show", name, check=False).returncode == 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stop_engine(engine: RemoteEngine) -> list[str]:
    """Remove the engine's containers, stop dockerd (SIGTERM, SIGKILL after a grace), then SIGKILL whatever
    still runs under its root. What it had to force, one line each."""
    notes = []
    if engine.answers():
        client = engine.client()
        try:
            for c in client.containers.list(all=True):
                with contextlib.suppress(Exception):
                    c.remove(force=True)
        finally:
            client.close()
    pid = engine.proc.pid if engine.proc is not None else None
    if pid is None:
        with contextlib.suppress(OSError, ValueError):
            pid = int((engine.root / "dockerd.pid").read_text())
    if pid is not None and _pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and _pid_alive(pid):
            if engine.proc is not None and engine.proc.poll() is not None:
                break
            time.sleep(0.2)
        if _pid_alive(pid) and (engine.proc is None or engine.proc.poll() is None):
            notes.append(f"dockerd {pid} did not stop within {STOP_GRACE_S} s of SIGTERM: killed")
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    if engine.proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            engine.proc.wait(timeout=10)
    for left in _processes_under(engine.root):
        notes.append(f"process {left} still ran under {engine.root}: killed")
        with contextlib.suppress(ProcessLookupError):
            os.kill(left, signal.SIGKILL)
    return notes


def _dismantle(engine: RemoteEngine) -> list[str]:
    """Tear down the engine and its network, each step whatever the others did; what is left after, one line
    each (empty: nothing)."""
    problems: list[str] = []
    try:
        problems += _stop_engine(engine)
    except Exception as exc:  # the next steps still run
        problems.append(f"stopping the engine failed: {exc!r}")
    for point in _mounts_under(engine.root):
        done = subprocess.run(["umount", point], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:  # still busy: detach it, and say so
            problems.append(f"{point} was busy ({done.stderr.strip()}): unmounted lazily")
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=60)
    with contextlib.suppress(FileNotFoundError):
        if not _mounts_under(engine.root):
            engine.root.rmdir()  # empty once its tmpfs is gone: nothing was ever written beside it
    if _link_exists(engine.veth):
        _ip("link", "del", engine.veth, check=False)  # its peer, in the namespace, goes with it
    if _netns_exists(engine.netns):
        _ip("netns", "del", engine.netns, check=False)
    leftovers = [
        *(f"process {p} under {engine.root}" for p in _processes_under(engine.root)),
        *(f"mount {m}" for m in _mounts_under(engine.root)),
        *([f"directory {engine.root}"] if engine.root.exists() else []),
        *([f"veth {engine.veth}"] if _link_exists(engine.veth) else []),
        *([f"network namespace {engine.netns}"] if _netns_exists(engine.netns) else []),
    ]
    return [*problems, *(f"left behind: {what}" for what in leftovers)]


def reap_stale() -> list[str]:
    """Tear down the engines of pytest processes that are gone (killed before their teardown ran)."""
    notes = []
    for root in ROOTS.glob(f"{PREFIX}*"):
        pid = root.name.removeprefix(PREFIX)
        if pid.isdigit() and not _pid_alive(int(pid)):
            netns, veth, _ = _names(int(pid))
            stale = RemoteEngine(netns=netns, veth=veth, host_addr="", addr="", root=root, log=Path(os.devnull))
            notes += [f"stale engine {root}: {what}" for what in _dismantle(stale)] or [f"stale engine {root}: removed"]
    return notes


def _setup_network(engine: RemoteEngine) -> None:
    _ip("netns", "add", engine.netns)
    peer = engine.veth[:-1] + "n"
    _ip("link", "add", engine.veth, "type", "veth", "peer", "name", peer)
    _ip("link", "set", peer, "netns", engine.netns)
    _ip("addr", "add", f"{engine.host_addr}/30", "dev", engine.veth)
    _ip("link", "set", engine.veth, "up")
    for args in (("addr", "add", f"{engine.addr}/30", "dev", peer), ("link", "set", peer, "up"),
                 ("link", "set", "lo", "up")):
        _ip("netns", "exec", engine.netns, "ip", *args)


def load_images(engine: RemoteEngine, images: Sequence[str]) -> float:
    """``docker save IMAGES | docker -H <engine> load``: the seconds it took."""
    t0 = time.monotonic()
    save = subprocess.Popen(["docker", "save", *images], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    load = subprocess.run(["docker", "-H", engine.url, "load"], stdin=save.stdout, capture_output=True, text=True,
                          timeout=1800)
    assert save.stdout is not None
    save.stdout.close()
    save_err = save.stderr.read().decode(errors="replace") if save.stderr is not None else ""
    saved = save.wait(timeout=60)
    if saved != 0 or load.returncode != 0:
        raise RuntimeError(f"docker save | docker -H {engine.url} load failed ({saved}, {load.returncode}): "
                           f"{save_err[-2000:]} {load.stderr[-2000:]}")
    return time.monotonic() - t0


@contextlib.contextmanager
def remote_engine(log: Path, images: Sequence[str] = ()) -> Iterator[RemoteEngine]:
    """A second engine in a namespace of its own (see the module doc), with ``images`` loaded into it; torn down
    at the end, which then fails (AssertionError) naming anything left behind."""
    for note in reap_stale():
        print(f"remote engine: {note}")
    netns, veth, root = _names(os.getpid())
    t0 = time.monotonic()
    with LOCK.open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        near, far = _free_pair()
        engine = RemoteEngine(netns=netns, veth=veth, host_addr=near, addr=far, root=root, log=log)
        try:
            _setup_network(engine)
        except BaseException:
            _dismantle(engine)
            raise
    body_failed = True
    try:
        root.mkdir(mode=0o700)
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", f"{PREFIX}{os.getpid()}",
                        str(root)], check=True, capture_output=True, timeout=60)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            engine.proc = subprocess.Popen(
                ["nsenter", f"--net=/run/netns/{netns}", "dockerd", "--tls=false",
                 "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
                 "--pidfile", str(root / "dockerd.pid"), "-H", f"unix://{root}/docker.sock", "-H", engine.url],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        wait_started(f"dockerd at {engine.url}", engine.proc, engine.answers, log=log, timeout_s=START_TIMEOUT_S)
        engine.seconds["engine"] = time.monotonic() - t0
        if images:
            engine.seconds["image load"] = load_images(engine, images)
        yield engine
        body_failed = False
    finally:
        left = _dismantle(engine)
        if left and not body_failed:
            raise AssertionError("the remote engine's teardown: " + "; ".join(left))
        for line in left:  # the body's own failure is the one to report: these are said beside it
            print(f"remote engine teardown: {line}")


class Prefetch:
    """:func:`remote_engine` entered in a thread of its own from the start: :meth:`engine` waits for it (and
    raises what setting it up raised), :meth:`close` tears it down (raising what the teardown found; once)."""

    def __init__(self, log: Path, images: Sequence[str] = ()) -> None:
        self._stack = contextlib.ExitStack()
        self._engine: RemoteEngine | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._enter, args=(log, list(images)), name="remote-engine",
                                        daemon=True)
        self._thread.start()

    def _enter(self, log: Path, images: list[str]) -> None:
        try:
            self._engine = self._stack.enter_context(remote_engine(log, images))
        except BaseException as error:  # handed to the caller of engine()
            self._error = error

    def engine(self, timeout_s: float = START_TIMEOUT_S + 600) -> RemoteEngine:
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise AssertionError(f"the remote engine was not set up within {timeout_s:.0f} s")
        if self._error is not None:
            raise self._error
        assert self._engine is not None
        return self._engine

    def close(self) -> None:
        self._thread.join()
        stack, self._stack = self._stack, contextlib.ExitStack()
        stack.close()
