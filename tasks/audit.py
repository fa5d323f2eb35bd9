"""Audit and plan stages: thin Prefect tasks over ``roost.checkpoint.audit`` and ``roost.plan``.

Both are header-only and fast, but a 14-shard checkpoint on a network disk is not free, so results
are persisted and cached. The cache key covers everything the answer depends on:

- every ``*.safetensors``, ``config.json``, ``model.safetensors.index.json`` and
  ``hf_quant_config.json`` of the directory by (name, size, mtime_ns, inode): a re-downloaded or
  touched file changes the key;
- the host profile as resolved now (a block edited in the UI changes the key);
- the task's other parameters (the model profile's sizing fields for the plan);
- the source of ``roost/checkpoint`` and ``roost/plan``, so a fixed audit never serves a stale answer.
"""

from __future__ import annotations

import hashlib
import json
import os
from functools import cache
from pathlib import Path
from typing import Any

from prefect import task
from prefect.context import TaskRunContext
from prefect.logging import get_run_logger

from roost.hosts import HostProfile

FINGERPRINT_NAMES = ("config.json", "model.safetensors.index.json", "hf_quant_config.json")
_ROOST = Path(__file__).resolve().parents[1] / "roost"


def checkpoint_fingerprint(model_dir: str | Path) -> list[tuple[str, int, int, int]]:
    """(name, size, mtime_ns, inode) of every file the audit reads, sorted by name."""
    out: list[tuple[str, int, int, int]] = []
    try:
        entries = list(os.scandir(model_dir))
    except OSError:
        return out
    for e in entries:
        if e.name.endswith(".safetensors") or e.name in FINGERPRINT_NAMES:
            try:
                st = e.stat()
            except OSError:
                continue
            out.append((e.name, st.st_size, st.st_mtime_ns, st.st_ino))
    return sorted(out)


@cache
def code_version() -> str:
    """A hash of the audit/plan source: results computed by other code are never reused."""
    h = hashlib.sha256()
    for sub in ("checkpoint", "plan"):
        for f in sorted((_ROOST / sub).glob("*.py")):
            h.update(f.name.encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _resolve_host(host_name: str) -> HostProfile:
    from blocks.resolve import load_host

    return load_host(host_name)


def _key(kind: str, model_dir: str, host: HostProfile, extra: Any) -> str:
    payload = json.dumps(
        {
            "kind": kind,
            "dir": str(Path(model_dir).resolve()),
            "files": checkpoint_fingerprint(model_dir),
            "host": host.model_dump(mode="json"),
            "extra": extra,
            "code": code_version(),
        },
        sort_keys=True,
        default=str,
    )
    return f"roost-{kind}-" + hashlib.sha256(payload.encode()).hexdigest()


def audit_cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    return _key("audit", parameters["model_dir"], _resolve_host(parameters["host_name"]), None)


PLAN_PROFILE_FIELDS = ("served_model_name", "max_model_len", "kv_cache_memory_bytes", "target_concurrency", "vllm_overrides")


def _plan_inputs(profile: dict[str, Any] | None) -> dict[str, Any]:
    p = profile or {}
    return {k: p.get(k) for k in PLAN_PROFILE_FIELDS}


def server_env(host: HostProfile) -> dict[str, str] | None:
    """The environment vLLM will see on ``host``: the process backend's CPU defaults under the caller's env."""
    if host.backend != "process":
        return None
    from roost.serve.process import CPU_ENV_DEFAULTS

    return {**CPU_ENV_DEFAULTS, **os.environ}


def plan_cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    host = _resolve_host(parameters["host_name"])
    env = server_env(host) or {}
    extra = {"profile": _plan_inputs(parameters.get("profile")), "pool_env": env.get("VLLM_CPU_KVCACHE_SPACE")}
    return _key("plan", parameters["model_dir"], host, extra)


@task(name="audit", cache_key_fn=audit_cache_key, persist_result=True)
def audit_task(model_dir: str, host_name: str) -> dict[str, Any]:
    """``roost audit --json`` for ``model_dir`` on host ``host_name``; error findings are in the result, not raised."""
    from roost.checkpoint.audit import audit_checkpoint

    logger = get_run_logger()
    host = _resolve_host(host_name)
    report = audit_checkpoint(Path(model_dir), host)
    for f in report.findings:
        log = logger.error if f.severity == "error" else logger.warning if f.severity == "warning" else logger.info
        log("%s: %s", f.code, f.message)
    logger.info(
        "audited %s: %d tensors in %d shard(s), %.2f GB/token -> %.1f tok/s ceiling on %s (%.3f s)",
        model_dir, report.tensor_count, report.shard_count, report.decode_bytes_per_token / 1e9,
        report.decode_ceiling_tok_s, host.name, report.audit_seconds,
    )
    return report.to_json()


@task(name="plan", cache_key_fn=plan_cache_key, persist_result=True)
def plan_task(model_dir: str, host_name: str, profile: dict[str, Any] | None = None) -> dict[str, Any]:
    """``roost plan --json`` for ``model_dir`` on ``host_name``, sized by a model profile's fields.

    Uses the profile's ``served_model_name``, ``max_model_len``, ``kv_cache_memory_bytes`` (None: the
    smallest pool for ``target_concurrency``) and ``vllm_overrides`` (they win, so the plan follows them).
    """
    from roost.plan.preflight import plan_checkpoint

    logger = get_run_logger()
    host = _resolve_host(host_name)
    p = _plan_inputs(profile)
    result = plan_checkpoint(
        Path(model_dir),
        host,
        p["kv_cache_memory_bytes"],
        max_model_len=p["max_model_len"],
        served_model_name=p["served_model_name"],
        target_concurrency=float(p["target_concurrency"] or 1.0),
        vllm_overrides=list(p["vllm_overrides"] or []),
        env=server_env(host),
    )
    for line in result.predicted_log_lines:
        logger.info("vLLM will log: %s", line)
    if not result.fits_one_request:
        logger.error("the KV pool (%d bytes) cannot hold one %d-token request; vLLM needs %d",
                     result.kv_cache_memory_bytes, result.max_model_len, result.min_kv_cache_bytes)
    if not result.fits_host:
        logger.error("weights + KV pool + headroom exceed %s's budget by %d bytes", host.name, -result.fit.free_bytes)
    return result.to_json()
