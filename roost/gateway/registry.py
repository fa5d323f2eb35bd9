"""The servers landings keep serving, registered for the gateway on the same host.

A landing that keeps its server (``land(keep_serving=True)``) writes one small JSON file here naming
its base URL and served model; a landing that retires it, or a run that stops it, removes the file.
The gateway re-reads this directory at every poll, so a model swap needs no gateway change. Files are
written atomically (temporary file, then rename) and never hold a key.

The directory is ``ROOST_GATEWAY_BACKENDS_DIR`` or ``<roost home>/gateway/backends``: the worker and
the gateway must agree on it (``roost gateway install`` writes it into the unit).
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import BaseModel, Field, ValidationError

from roost.settings import environment, roost_home
from roost.vllm.client import normalize_base_url


class Registration(BaseModel):
    base_url: str
    served_model_name: str = ""
    host: str = ""
    run_id: str = ""
    registered_at: float = 0.0
    decode_tok_s: float | None = Field(default=None, description="The landing's decode rate at its highest measured "
                                       "concurrency (roost.monitor's decode-speed floor).")
    decode_concurrency: int = 0
    direct_until: float = Field(default=0.0, description="Until when (epoch seconds) a roost benchmark measures this "
                                "server directly: the gateway exports it so the bypass alert stays quiet.")


def registry_dir() -> Path:
    return Path(environment().roost_gateway_backends_dir or roost_home() / "gateway" / "backends")


def _file_for(base_url: str) -> Path:
    parts = urlsplit(normalize_base_url(base_url))
    return registry_dir() / f"{parts.hostname}-{parts.port or 80}.json"


def register(base_url: str, served_model_name: str = "", host: str = "", run_id: str = "",
             decode_tok_s: float | None = None, decode_concurrency: int = 0) -> Path:
    """Record ``base_url`` as a backend for the gateway (replaces an earlier server on that port)."""
    path = _file_for(base_url)
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = Registration(base_url=normalize_base_url(base_url), served_model_name=served_model_name, host=host,
                         run_id=run_id, registered_at=time.time(), decode_tok_s=decode_tok_s,
                         decode_concurrency=decode_concurrency)
    _write(path, entry)
    return path


def _write(path: Path, entry: Registration) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        f.write(entry.model_dump_json())
    os.replace(tmp, path)


def _read(path: Path) -> Registration | None:
    try:
        return Registration.model_validate(json.loads(path.read_text()[:65536]))
    except (OSError, ValueError, ValidationError):
        return None


@contextlib.contextmanager
def direct_traffic(base_url: str, expected_s: float = 6 * 3600) -> Iterator[bool]:
    """While the block runs, mark ``base_url``'s registration as measured directly by roost (at most
    ``expected_s``, so a crashed run cannot silence the bypass alert for good). Yields False, doing
    nothing, when ``base_url`` is not registered."""
    path = _file_for(base_url)
    entry = _read(path) if path.is_file() else None
    if entry is None:
        yield False
        return
    _write(path, entry.model_copy(update={"direct_until": time.time() + expected_s}))
    try:
        yield True
    finally:
        now = _read(path)  # a landing may have replaced it meanwhile: leave that one alone
        if now is not None and now.registered_at == entry.registered_at:
            _write(path, now.model_copy(update={"direct_until": 0.0}))


def deregister(base_url: str) -> bool:
    """Forget ``base_url``; False when it was not registered."""
    path = _file_for(base_url)
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def registered() -> list[Registration]:
    """Every registered backend (files that cannot be read are skipped)."""
    root = registry_dir()
    out: list[Registration] = []
    if not root.is_dir():
        return out
    for path in sorted(root.glob("*.json")):
        if path.name.startswith(".") or not path.is_file():
            continue
        entry = _read(path)
        if entry is not None:
            out.append(entry)
    return out


def forget_host(host: str, keep: str | None = None) -> list[str]:
    """Deregister every server registered for roost host ``host`` (one server per host: a new landing
    retired them), except ``keep``; returns their base URLs."""
    kept = normalize_base_url(keep) if keep else None
    gone = []
    for r in registered():
        if r.host == host and r.base_url != kept and deregister(r.base_url):
            gone.append(r.base_url)
    return gone
