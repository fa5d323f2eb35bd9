"""``roost gateway install``: the gateway as a systemd user service on the Spark (the recipe's
``gateway/setup.sh``): a unit ``roost-gateway.service`` running ``roost gateway serve`` at boot,
its settings in an environment file only its user can read (the upstream key lives there or in
roost's Secret block, never in the unit)."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from roost.errors import UserError

UNIT = "roost-gateway.service"


def unit_text(exe: Path, args: list[str], env_file: Path, *, user: str | None = None) -> str:
    """The unit: a user unit (``systemctl --user``), or with ``user`` a system unit run as that user
    (``roost install``'s box)."""
    cmd = " ".join(shlex.quote(a) for a in [str(exe), "gateway", "serve", *args])
    user_line = f"User={user}\n" if user else ""
    target = "multi-user.target" if user else "default.target"
    return f"""[Unit]
Description=roost metering gateway (auth, routing, token metering for vLLM)
After=network-online.target
Wants=network-online.target

[Service]
Type=simple
{user_line}EnvironmentFile=-{env_file}
ExecStart={cmd}
Restart=always
RestartSec=2
# SIGTERM: stop taking requests, commit queued usage rows, exit
KillSignal=SIGTERM
TimeoutStopSec=20
NoNewPrivileges=yes
# open files: a client connection and its backend connection each (--max-connections 4096: ~8,300)
LimitNOFILE=65536

[Install]
WantedBy={target}
"""


def env_text(values: dict[str, str]) -> str:
    return "".join(f"{k}={shlex.quote(v)}\n" for k, v in values.items() if v)


def write_file(path: Path, text: str, mode: int) -> None:
    """``text`` into ``path`` atomically, with ``mode`` from the start (a secret is never readable by others)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
    os.fchmod(fd, mode)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def roost_executable() -> Path:
    exe = Path(sys.executable).parent / "roost"
    return exe if exe.exists() else Path(shutil.which("roost") or exe)


def install(unit_dir: Path, env_file: Path, args: list[str], env: dict[str, str], *, start: bool) -> list[str]:
    """Write the unit and its environment file; with ``start``, enable and start it (``systemctl --user``).
    Returns what was done, one line each."""
    unit_path = unit_dir / UNIT
    write_file(env_file, env_text(env), 0o600)
    write_file(unit_path, unit_text(roost_executable(), args, env_file), 0o644)
    done = [f"wrote {unit_path}", f"wrote {env_file} (mode 600)"]
    if not start:
        done.append(f"not started: systemctl --user daemon-reload && systemctl --user enable --now {UNIT}")
        return done
    systemctl = shutil.which("systemctl")
    if systemctl is None:
        raise UserError("systemctl not found: run `roost gateway install --no-start` and start "
                        "`roost gateway serve` another way")
    for cmd in (["--user", "daemon-reload"], ["--user", "enable", "--now", UNIT]):
        proc = subprocess.run([systemctl, *cmd], capture_output=True, text=True, timeout=60, check=False)
        if proc.returncode != 0:
            why = " ".join((proc.stderr or proc.stdout).split())[:200]
            raise UserError(f"systemctl {' '.join(cmd)} failed: {why} (a user manager needs a login session or "
                            "`loginctl enable-linger $USER`; or use --no-start)")
        done.append(f"systemctl {' '.join(cmd)}")
    return done
