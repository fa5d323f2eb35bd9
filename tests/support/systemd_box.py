"""A machine with systemd as its init, for ``scripts/install-spark``'s tests: a Docker container of the test
rootfs with Debian's systemd (plus git, which a checkout always has, and PostgreSQL for ``--postgres``),
booted with ``/sbin/init``.

This engine refuses ``--privileged`` (its own process lacks ``CAP_SYS_RESOURCE``: "unable to apply caps"),
so the box gets what systemd needs one by one: ``CAP_SYS_ADMIN``, no seccomp or AppArmor profile, the
cgroup hierarchy read-write, tmpfs ``/run``; and a machine's ``/dev/shm`` (vLLM's CPU engine takes shared
memory a container's default 64 MiB does not hold). It shares the host's network (the tests reach its services on
loopback, and ``roost monitor up``'s containers, started on the host's engine through its socket, scrape
them there) and sees the checkout, the interpreter, the vLLM CPU venv and uv's cache at their host paths
(what a Spark has before ``install-spark``: a clone, Python, packages cached, and the host's CA bundle, which
trusts this machine's package proxy). Its ``ROOST_HOME`` is a host
directory at the same path in both, so the monitoring files the box renders are where the host's engine
bind-mounts them from.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from docker_fixtures import MANAGED, REPO, ROOTFS_IMAGE

BOX_IMAGE = "roost-test/systemd-box:bookworm"
PACKAGES = "systemd systemd-sysv dbus ca-certificates hostname git postgresql procps"
MASKED = "systemd-logind.service getty.target console-getty.service systemd-udevd.service"
PYTHON_ROOT = Path(sys.base_prefix)  # the interpreter the project's venvs are made from
CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
"""The host's CA bundle, which trusts the package proxy this machine reaches the registries through (uv in
the box builds the checkout's package: its build backend may be asked of the index)."""


def build_box_image(client: Any, ctx: Path) -> str:
    (ctx / "Dockerfile").write_text(
        f"FROM {ROOTFS_IMAGE}\n"
        f"RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "
        f"{PACKAGES} && rm -rf /var/lib/apt/lists/* && systemctl mask {MASKED}\n"
        "STOPSIGNAL SIGRTMIN+3\n"
        'CMD ["/sbin/init"]\n'
        f"LABEL {MANAGED}\n")
    client.images.build(path=str(ctx), tag=BOX_IMAGE, rm=True, network_mode="host")
    return BOX_IMAGE


class SystemdBox:
    """The running box: ``sh``/``run`` a command in it, ``restart`` it (a reboot: systemd starts again)."""

    def __init__(self, client: Any, name: str, mounts: list[Path], readonly: list[Path]) -> None:
        self.client, self.name = client, name
        volumes = {"/sys/fs/cgroup": {"bind": "/sys/fs/cgroup", "mode": "rw"},
                   "/var/run/docker.sock": {"bind": "/var/run/docker.sock", "mode": "rw"}}
        volumes |= {str(p): {"bind": str(p), "mode": "rw"} for p in mounts}
        volumes |= {str(p): {"bind": str(p), "mode": "ro"} for p in readonly}
        self.container = client.containers.run(
            BOX_IMAGE, name=name, detach=True, network_mode="host", cap_add=["SYS_ADMIN"],
            security_opt=["seccomp=unconfined", "apparmor=unconfined"], tmpfs={"/run": "", "/run/lock": ""}, shm_size="2g",
            volumes=volumes, labels={"ai.roost.managed": "true"}, hostname="spark-box")
        self.wait_booted()

    def run(self, cmd: list[str], env: Mapping[str, str] | None = None, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
        args = ["docker", "exec", *[a for k, v in (env or {}).items() for a in ("-e", f"{k}={v}")], self.name, *cmd]
        return subprocess.run(args, capture_output=True, text=True, timeout=timeout_s, check=False)

    def sh(self, script: str, timeout_s: float = 120) -> str:
        out = self.run(["bash", "-c", script], timeout_s=timeout_s)
        return out.stdout + out.stderr

    def wait_booted(self, timeout_s: float = 90) -> None:
        deadline = time.monotonic() + timeout_s
        state = ""
        while time.monotonic() < deadline:
            state = self.run(["systemctl", "is-system-running"], timeout_s=30).stdout.strip()
            if state in ("running", "degraded"):
                return
            time.sleep(0.5)
        raise AssertionError(f"systemd in the box did not finish booting ({state or 'no answer'}):\n"
                             + self.sh("systemctl --failed --no-pager; journalctl -b --no-pager | tail -30"))

    def restart(self) -> None:
        self.container.restart(timeout=60)
        self.wait_booted()

    def journal(self, unit: str, lines: int = 40) -> str:
        return self.sh(f"journalctl -u {unit} --no-pager | tail -n {lines}")

    def remove(self) -> None:
        with contextlib.suppress(Exception):
            self.container.remove(force=True)


@contextlib.contextmanager
def systemd_box(client: Any, name: str, work: Path, extra: list[Path]) -> Iterator[SystemdBox]:
    """The box with the checkout, ``work`` and ``extra`` read-write and the interpreter read-only."""
    box = SystemdBox(client, name, [REPO, work, *extra], [PYTHON_ROOT, *([CA_BUNDLE] if CA_BUNDLE.is_file() else [])])
    try:
        yield box
    finally:
        box.remove()
