"""Where each table's files live: ``<root>/<table>/model=<slug>/host=<slug>/<run_id>...``."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from roost.records import RunMeta
from roost.settings import results_dir

TABLES = ("runs", "points", "requests", "notifications", "evals", "eval_answers")


def slug(text: str) -> str:
    """A directory-safe form of a repo id or host name: ``org/name`` -> ``org--name``."""
    out = re.sub(r"[^A-Za-z0-9._-]", "_", text.strip().replace("/", "--"))
    if not out or out.startswith("."):
        out = "_" + out
    return out


def store_root(root: Path | None) -> Path:
    """``root``, else the configured results directory (``roost.settings.results_dir``)."""
    return Path(root) if root is not None else results_dir()


def partition(root: Path | None, table: str, repo_id: str, host: str) -> Path:
    """``<root>/<table>/model=<slug>/host=<slug>``."""
    return store_root(root) / table / f"model={slug(repo_id)}" / f"host={slug(host)}"


def report_dir(meta: RunMeta, root: Path | None = None) -> Path:
    """Where the report of a run is written."""
    return partition(root, "reports", meta.repo_id, meta.host) / meta.run_id


def record_path(meta: RunMeta, root: Path | None = None) -> Path:
    return partition(root, "records", meta.repo_id, meta.host) / f"{meta.run_id}.json"


def comparable_key_id(meta: RunMeta) -> str:
    """A short stable id of ``meta.comparable_key()`` (runs with the same id are compared)."""
    blob = json.dumps(list(meta.comparable_key())).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


