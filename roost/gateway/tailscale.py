"""One device key per tailnet node: the nodes of ``tailscale status --json`` (this machine and its
peers) -> key names, and the CSV handed out with the keys."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from roost.errors import UserError

PREFIX = "ts-"


class Node(BaseModel):
    name: str  # the key name
    hostname: str
    dns_name: str = ""
    ip: str = ""
    os: str = ""
    online: bool | None = None


def _slug(text: str) -> str:
    slug = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-.") or "node"
    return slug[:100]


def nodes(status: Any, source: str = "tailscale status --json") -> list[Node]:
    """The nodes of a ``tailscale status --json`` document (``Self`` and every ``Peer``)."""
    if not isinstance(status, dict) or not isinstance(status.get("Peer", {}) or {}, dict):
        raise UserError(f"{source}: not a `tailscale status --json` document (no Self/Peer objects)")
    entries = ([status["Self"]] if isinstance(status.get("Self"), dict) else []) + [
        p for p in (status.get("Peer") or {}).values() if isinstance(p, dict)]
    if not entries:
        raise UserError(f"{source}: no nodes (Self and Peer are empty)")
    out: list[Node] = []
    used: set[str] = set()
    for e in entries:
        host = str(e.get("HostName") or e.get("DNSName") or "node")
        name = PREFIX + _slug(host)
        if name in used:
            name = f"{name}-{_slug(str(e.get('ID') or len(used)))[:12]}"
        used.add(name)
        ips = e.get("TailscaleIPs") or []
        out.append(Node(name=name, hostname=host, dns_name=str(e.get("DNSName") or "").rstrip("."),
                        ip=str(ips[0]) if isinstance(ips, list) and ips else "", os=str(e.get("OS") or ""),
                        online=e.get("Online") if isinstance(e.get("Online"), bool) else None))
    return out


def read_status(status_json: Path | None) -> tuple[Any, str]:
    """The status document from a file, else from ``tailscale status --json`` on this machine."""
    if status_json is not None:
        if not status_json.is_file():
            raise UserError(f"--status-json {status_json}: no such file")
        try:
            return json.loads(status_json.read_text()), str(status_json)
        except (OSError, ValueError) as exc:
            raise UserError(f"--status-json {status_json}: not JSON ({exc})") from None
    exe = shutil.which("tailscale")
    if exe is None:
        raise UserError("tailscale is not installed here; run on the tailnet's server or pass --status-json FILE "
                        "(the output of `tailscale status --json`)")
    try:
        proc = subprocess.run([exe, "status", "--json"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"tailscale status --json failed ({exc})") from None
    if proc.returncode != 0:
        raise UserError(f"tailscale status --json failed: {' '.join(proc.stderr.split())[:200]}")
    try:
        return json.loads(proc.stdout), "tailscale status --json"
    except ValueError:
        raise UserError("tailscale status --json did not print JSON") from None


CSV_FIELDS = ["name", "kind", "key", "hostname", "tailscale_ip", "dns_name", "os"]


def write_csv(path: Path, rows: list[dict[str, str]]) -> None:
    """The keys to hand out, written atomically with mode 0600 (it holds keys)."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writeheader()
    writer.writerows(rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".csv")
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(buf.getvalue())
    os.replace(tmp, path)
