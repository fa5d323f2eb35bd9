"""Where each object lives, as a key relative to the store's root::

    <table>/model=<slug>/host=<slug>/<run_id>...parquet     one object per run (and per task / attempt)
    records/model=<slug>/host=<slug>/<run_id>.json          the full RunRecord
    runs/_catalog/<YYYYMM>/<newest run id>-<n>-<digest>.parquet   the runs table compacted (roost.store.catalog)
    runs/_late/model=<slug>/host=<host>/<run_id>.parquet     a copy of a run that committed late (same)

Reports are files on the worker that rendered them: ``<results dir>/reports/model=<slug>/host=<slug>/<run_id>/``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from roost.records import RunMeta
from roost.settings import results_dir

TABLES = ("runs", "points", "requests", "notifications", "evals", "eval_answers")

CATALOG_PREFIX = "runs/_catalog/"
LATE_PREFIX = "runs/_late/"


def slug(text: str) -> str:
    """A directory-safe form of a repo id or host name: ``org/name`` -> ``org--name``."""
    out = re.sub(r"[^A-Za-z0-9._-]", "_", text.strip().replace("/", "--"))
    if not out or out.startswith("."):
        out = "_" + out
    return out


def partition_key(table: str, repo_id: str, host: str) -> str:
    """``<table>/model=<slug>/host=<slug>/`` (slugs of a repo id or slug, and of a host)."""
    return f"{table}/model={slug(repo_id)}/host={slug(host)}/"


def record_key(repo_id: str, host: str, run_id: str) -> str:
    return f"{partition_key('records', repo_id, host)}{run_id}.json"


def store_root(root: Path | None) -> Path:
    """``root``, else the configured local results directory (``roost.settings.results_dir``)."""
    return Path(root) if root is not None else results_dir()


def report_dir(meta: RunMeta, root: Path | None = None) -> Path:
    """Where the report of a run is written (always a local directory: the worker's)."""
    return store_root(root) / partition_key("reports", meta.repo_id, meta.host) / meta.run_id


def comparable_key_id(meta: RunMeta) -> str:
    """A short stable id of ``meta.comparable_key()`` (runs with the same id are compared)."""
    blob = json.dumps(list(meta.comparable_key())).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
