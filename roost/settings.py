"""Where roost keeps things on disk. Every location can be moved with one environment variable."""

from __future__ import annotations

import os
from pathlib import Path


def roost_home() -> Path:
    """State that outlives a run: the vLLM venv, generated demo models, the local Hub mirror, downloads.

    ``ROOST_HOME`` (default ``~/.cache/roost``).
    """
    return Path(os.environ.get("ROOST_HOME", Path.home() / ".cache" / "roost")).expanduser()


def repo_dir_name(repo_id: str) -> str:
    """``org/name`` -> ``org--name``: the directory name of a Hub repository under roost's home."""
    return repo_id.replace("/", "--")


def checkpoint_dir(repo_id: str) -> Path:
    """Where a Hub repository's checkpoint is downloaded: ``$ROOST_HOME/models/<org>--<name>``.

    One directory per repository; a new commit updates it in place (the download manifest records
    which commit it holds). ``land``, ``audit`` and ``roost download`` all use it.
    """
    return roost_home() / "models" / repo_dir_name(repo_id)


def results_dir() -> Path:
    """The append-only results store and the reports: ``ROOST_RESULTS_DIR`` (default ``./results``)."""
    return Path(os.environ.get("ROOST_RESULTS_DIR", "results")).expanduser().resolve()


def vllm_python() -> Path:
    """The Python interpreter of the venv that runs vLLM for the ``process`` backend.

    ``ROOST_VLLM_PYTHON`` (default ``$ROOST_HOME/vllm-venv/bin/python``); ``scripts/bootstrap`` creates it.
    """
    env = os.environ.get("ROOST_VLLM_PYTHON")
    return Path(env) if env else roost_home() / "vllm-venv" / "bin" / "python"
