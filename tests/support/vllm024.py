"""The vLLM 0.24.0 venv (the recipes' release) as the tests find it: the built-in host ``cpu-vllm-0-24``'s
``vllm_venv``, resolved as the process backend resolves it (``ROOST_VLLM_VENVS``, default ~/.cache/roost,
where scripts/bootstrap builds it). Missing: a UserError naming the host field and bootstrap, which fails
the test (never a skip)."""

from __future__ import annotations

from pathlib import Path


def vllm024_python() -> Path:
    from roost.hosts import CPU_VLLM_024
    from roost.settings import require_vllm_python, vllm_python_for

    return require_vllm_python(vllm_python_for(CPU_VLLM_024.vllm_venv), CPU_VLLM_024.vllm_venv, CPU_VLLM_024.name)
