"""The machine a box is installed on: files written only when they differ, ``systemctl``, commands run as the
service user, the address the tailnet reaches, Debian's PostgreSQL (a database and a role for Prefect).

Every failure is a ``RoostError`` of one line naming what failed and what to do; a secret never reaches a
command line (SQL with a password goes to ``psql`` on its standard input).
"""

from __future__ import annotations

import glob
import grp
import os
import pwd
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import httpx

from roost.errors import RoostError, UserError
from roost.gateway.install import write_file as atomic_mode_write
from roost.install.layout import PG_DATABASE, PG_ROLE, BoxFile
from roost.settings import child_env, environment

Status = Literal["created", "updated", "unchanged", "removed", "absent"]


class InstallError(RoostError):
    """A step of the install failed on this machine (exit 1)."""


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- files ---------------------------------------------------------------------------------------


def write_file(f: BoxFile, owner: str | None = None) -> Status:
    """Write ``f`` atomically with its mode (owned by ``owner``); ``unchanged`` when it already holds the text and
    mode."""
    path = f.path
    if path.is_file() and path.read_text(errors="replace") == f.text and (path.stat().st_mode & 0o777) == f.mode:
        return "unchanged"
    existed = path.exists()
    atomic_mode_write(path, f.text, f.mode)
    if owner is not None:
        chown(path, owner)
    return "updated" if existed else "created"


def env_values(path: Path) -> dict[str, str]:
    """The ``KEY=VALUE`` lines of an environment file this module wrote (shell-quoted values); {} when absent."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() and not key.startswith("#"):
            parts = shlex.split(value) if value.strip() else [""]
            out[key.strip()] = parts[0] if parts else ""
    return out


def chown(path: Path, user: str) -> None:
    pw = pwd.getpwnam(user)
    os.chown(path, pw.pw_uid, pw.pw_gid)


def make_dir(path: Path, owner: str, mode: int = 0o755) -> Status:
    """``path`` owned by ``owner`` with ``mode``; a missing parent is made with the owner of the nearest existing
    one (``~/.cache`` made for ``ROOST_HOME`` stays the user's, ``/var/lib`` root's)."""
    existed = path.is_dir()
    missing = []
    probe = path
    while not probe.exists():
        missing.append(probe)
        probe = probe.parent
    parent_stat = probe.stat()
    for d in reversed(missing[1:]):
        d.mkdir(mode=0o755)
        os.chown(d, parent_stat.st_uid, parent_stat.st_gid)
    path.mkdir(exist_ok=True)
    path.chmod(mode)
    chown(path, owner)
    return "unchanged" if existed else "created"


def fingerprint(paths: Sequence[Path]) -> tuple[tuple[str, bytes, int], ...]:
    """What the files hold now (to tell whether a command changed them)."""
    out = []
    for p in paths:
        try:
            out.append((str(p), p.read_bytes(), p.stat().st_mode))
        except OSError:
            out.append((str(p), b"", 0))
    return tuple(out)


# --- users and commands --------------------------------------------------------------------------


def service_user() -> str:
    """Who the services run as: the user who ran ``sudo``, else the current user."""
    user = environment().sudo_user or pwd.getpwuid(os.getuid()).pw_name
    try:
        pwd.getpwnam(user)
    except KeyError:
        raise UserError(f"SUDO_USER {user!r} is not a user on this machine: run the install with sudo from "
                        "the account that will run roost") from None
    return user


def home_of(user: str) -> Path:
    return Path(pwd.getpwnam(user).pw_dir)


def run(cmd: Sequence[str], *, env: Mapping[str, str] | None = None, user: str | None = None, timeout_s: float = 600,
        stdin: str | None = None, what: str = "") -> subprocess.CompletedProcess[str]:
    """Run ``cmd`` (as ``user`` with their groups when root runs it for another user); an ``InstallError``
    with the command's last output line when it fails."""
    kwargs: dict[str, object] = {}
    if user is not None and os.getuid() == 0 and user != "root":
        pw = pwd.getpwnam(user)
        kwargs = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": os.getgrouplist(user, pw.pw_gid)}
    try:
        proc = subprocess.run(list(cmd), env=dict(env) if env is not None else None, capture_output=True, text=True,
                              timeout=timeout_s, check=False, input=stdin, **kwargs)  # type: ignore[call-overload]
    except FileNotFoundError:
        raise InstallError(f"{what or cmd[0]}: {cmd[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise InstallError(f"{what or Path(cmd[0]).name} did not finish within {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        lines = [ln for ln in (proc.stderr or proc.stdout or "").splitlines() if ln.strip()]
        raise InstallError(f"{what or Path(cmd[0]).name} failed (exit {proc.returncode}): "
                           f"{one_line(lines[-1]) if lines else 'no output'}")
    return proc  # type: ignore[no-any-return]


def address() -> str:
    """The address the tailnet reaches this machine at: ``tailscale ip -4``, else the first address
    ``hostname -I`` lists, else loopback."""
    for cmd in (["tailscale", "ip", "-4"], ["hostname", "-I"]):
        if shutil.which(cmd[0]) is None:
            continue
        try:
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired):
            continue
        words = out.stdout.split() if out.returncode == 0 else []
        if words:
            return words[0]
    return "127.0.0.1"


# --- systemd -------------------------------------------------------------------------------------


def systemd_running() -> bool:
    return Path("/run/systemd/system").is_dir()


def systemctl(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if check:
        return run(["systemctl", *args], what=f"systemctl {' '.join(args)}", timeout_s=120)
    return subprocess.run(["systemctl", *args], capture_output=True, text=True, timeout=120, check=False)


def unit_active(unit: str) -> bool:
    return systemctl("is-active", "--quiet", unit, check=False).returncode == 0


def unit_enabled(unit: str) -> bool:
    return systemctl("is-enabled", "--quiet", unit, check=False).returncode == 0


def start_unit(unit: str, changed: bool) -> Status:
    """Enable ``unit`` and have it running its current files: restarted when they ``changed``."""
    enabled, active = unit_enabled(unit), unit_active(unit)
    if not enabled:
        systemctl("enable", unit)
    if active and changed:
        systemctl("restart", unit)
        return "updated"
    if not active:
        systemctl("start", unit)
        return "created" if not enabled else "updated"
    return "updated" if not enabled else "unchanged"


def stop_unit(unit: str) -> Status:
    """Disable and stop ``unit``; ``absent`` when systemd does not know it."""
    known = systemctl("cat", unit, check=False).returncode == 0
    if not known and not unit_active(unit):
        return "absent"
    systemctl("disable", "--now", unit, check=False)
    systemctl("reset-failed", unit, check=False)
    return "removed"


def wait_http(url: str, timeout_s: float, what: str, *, any_answer: bool = False) -> None:
    """Until ``url`` answers 200 (any HTTP answer below 500 with ``any_answer``); an ``InstallError`` after
    ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while time.monotonic() < deadline:
        try:
            r = httpx.get(url, timeout=5.0)
            if r.status_code == 200 or (any_answer and r.status_code < 500):
                return
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            last = one_line(str(exc) or type(exc).__name__, 120)
        time.sleep(1.0)
    raise InstallError(f"{what} did not answer {url} within {timeout_s:.0f} s ({last}): see journalctl -u {what}")


# --- PostgreSQL ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Postgres:
    """Debian's PostgreSQL on this machine, driven as its ``postgres`` superuser over the local socket."""

    service: str = "postgresql.service"

    @staticmethod
    def installed() -> bool:
        return bool(glob.glob("/usr/lib/postgresql/*/bin/postgres"))

    def install(self) -> None:
        env = {**child_env(), "DEBIAN_FRONTEND": "noninteractive"}
        apt = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "postgresql"]
        try:
            run(apt, env=env, what="apt-get install postgresql", timeout_s=900)
        except InstallError:
            run(["apt-get", "update", "-q"], env=env, what="apt-get update", timeout_s=900)
            run(apt, env=env, what="apt-get install postgresql", timeout_s=900)

    def psql(self, sql: str, db: str = "postgres") -> str:
        """``sql`` on ``psql``'s standard input (never its command line), unaligned tuples out."""
        return run(["psql", "-X", "-tAq", "-v", "ON_ERROR_STOP=1", "-d", db], user="postgres", stdin=sql,
                   what="psql", env={"PATH": child_env().get("PATH", "/usr/bin:/bin")}).stdout.strip()

    @staticmethod
    def running() -> bool:
        return subprocess.run(["pg_isready", "-q"], check=False, capture_output=True).returncode == 0

    def ready(self, timeout_s: float = 60) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.running():
                return
            time.sleep(0.5)
        raise InstallError(f"PostgreSQL did not accept connections within {timeout_s:.0f} s: "
                           f"see journalctl -u {self.service}")

    def ensure(self, password: str, *, new_password: bool) -> Status:
        """The role and database Prefect uses, the role's password ``password``: sent when the role is made or
        the password is ``new_password`` (never again on a run that changes nothing)."""
        if not all(c.isalnum() or c in "-_" for c in password):
            raise UserError("the PostgreSQL password in /etc/roost/prefect-server.env has characters other than "
                            "letters, digits, - and _: remove the file's database line to have a new one made")
        role = self.psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{PG_ROLE}'") == "1"
        if not role or new_password:
            self.psql(f"{'ALTER' if role else 'CREATE'} ROLE {PG_ROLE} LOGIN PASSWORD '{password}'")
        db = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'") == "1"
        if not db:
            self.psql(f"CREATE DATABASE {PG_DATABASE} OWNER {PG_ROLE}")
        return "unchanged" if role and db and not new_password else "created" if not role else "updated"

    def drop(self) -> Status:
        if not self.installed() or shutil.which("psql") is None or not self.running():
            return "absent"
        db = self.psql(f"SELECT 1 FROM pg_database WHERE datname = '{PG_DATABASE}'") == "1"
        role = self.psql(f"SELECT 1 FROM pg_roles WHERE rolname = '{PG_ROLE}'") == "1"
        if db:
            self.psql(f"DROP DATABASE {PG_DATABASE} WITH (FORCE)")
        if role:
            self.psql(f"DROP ROLE {PG_ROLE}")
        return "removed" if db or role else "absent"


def docker_group_members() -> set[str]:
    try:
        return set(grp.getgrnam("docker").gr_mem)
    except KeyError:
        return set()
