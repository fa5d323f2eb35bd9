"""A commit's ``roost`` package beside the working tree, for benchmarks that time the code before a change."""

from __future__ import annotations

import subprocess
from pathlib import Path


def archived_tree(commit: str, into: Path) -> Path:
    """The ``roost`` package of ``commit`` from this repository's history, extracted under ``into``
    (``git archive``: no checkout, no change to the repository)."""
    here = Path(__file__).resolve().parents[1]
    archive = subprocess.run(["git", "-C", str(here), "archive", "--format=tar", commit, "roost"],
                             capture_output=True, check=False)
    if archive.returncode != 0:
        raise SystemExit(f"git archive {commit}: {archive.stderr.decode(errors='replace').strip()}")
    into.mkdir(parents=True, exist_ok=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into
