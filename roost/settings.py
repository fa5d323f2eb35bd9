"""Where roost keeps things on disk. Every location can be moved with one environment variable."""

from __future__ import annotations

import os
from pathlib import Path

from roost.errors import UserError


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


def vllm_venv_root() -> Path:
    """Where the named vLLM venvs are (``vllm-venv-0.24.0``...): ``ROOST_VLLM_VENVS`` (default
    ``~/.cache/roost``, where ``scripts/bootstrap`` builds them).

    Not ``ROOST_HOME``: the tests give each session its own home, and a venv is 3-6 GB.
    """
    return Path(os.environ.get("ROOST_VLLM_VENVS", Path.home() / ".cache" / "roost")).expanduser()


def check_vllm_venv(value: str, field: str = "vllm_venv") -> str:
    """``value`` (stripped) when it names a venv: empty, a name under :func:`vllm_venv_root`, or an
    absolute path; every ``/``-separated part non-empty and neither ``.`` nor ``..``. UserError otherwise."""
    venv = value.strip()
    if not venv:
        return ""
    parts = venv.removeprefix("/").split("/")
    bad = [p for p in parts if p in ("", ".", "..")]
    if bad:
        raise UserError(f"{field} {value!r}: give a venv name under {vllm_venv_root()} (e.g. vllm-venv-0.24.0) or an "
                        f"absolute path, without empty, '.' or '..' parts")
    return venv


def vllm_python_for(venv: str) -> Path:
    """The interpreter of the vLLM venv a host names (``HostProfile.vllm_venv``): ``<venv>/bin/python`` for an
    absolute path, ``<root>/<venv>/bin/python`` for a name (root: :func:`vllm_venv_root`); empty:
    :func:`vllm_python`. Whether it exists is :func:`require_vllm_python`'s."""
    venv = check_vllm_venv(venv)
    if not venv:
        return vllm_python()
    base = Path(venv) if venv.startswith("/") else vllm_venv_root() / venv
    return base / "bin" / "python"


def require_vllm_python(python: Path, venv: str = "", host: str = "") -> Path:
    """``python`` when it exists; a UserError saying how to get it otherwise (for a host's ``vllm_venv``,
    naming the host and the field)."""
    if python.exists():
        return python
    if venv:
        whose = f"host {host}'s vllm_venv {venv!r}" if host else f"vllm_venv {venv!r}"
        raise UserError(f"vLLM interpreter {python} not found ({whose}): run `bash scripts/bootstrap`, which builds "
                        f"the vLLM venvs under {vllm_venv_root()} (ROOST_VLLM_VENVS), or point the host's vllm_venv "
                        "at a venv that has vLLM")
    raise UserError(f"vLLM interpreter {python} not found: run `bash scripts/bootstrap` or set ROOST_VLLM_PYTHON")
