"""Audit and plan stages: thin Prefect tasks over ``roost.plan.report`` and ``roost.plan.preflight``.

``audit_task`` reads the checkpoint's headers once and returns the :class:`AuditReport` for the host;
``plan_task`` sizes vLLM's KV cache from that report (no second read). Both are header-only and fast,
but a 14-shard checkpoint on a network disk is not free, so results are persisted (pickled, so they
come back as the models, the report's config included) and cached. The cache key covers everything
the answer depends on:

- the profile's plan inputs the report is named and windowed by (None: the directory's name);
- every ``*.safetensors``, ``config.json``, ``model.safetensors.index.json`` and
  ``hf_quant_config.json`` of the directory by (name, size, mtime_ns, inode): a re-downloaded or
  touched file changes the key;
- the host profile as resolved now (a block edited in the UI changes the key);
- the plan's inputs, the audit it starts from, and the CPU backend's ``VLLM_CPU_KVCACHE_SPACE``;
- the source of ``roost/checkpoint``, ``roost/plan`` and this module, so a fixed audit never serves
  a stale answer.
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

from blocks.resolve import load_host
from roost.catalogue import DECODE_CEILING
from roost.hosts import HostProfile
from roost.plan.inputs import PlanInputs
from roost.plan.preflight import PlanReport, plan_checkpoint
from roost.plan.report import AuditReport, audit_for_host
from tasks._shared import log_findings, server_env

FINGERPRINT_NAMES = ("config.json", "model.safetensors.index.json", "hf_quant_config.json")
REPO_ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("roost/checkpoint", "roost/plan", "tasks/audit.py")
"""What the audit and the plan compute with, relative to the repository root."""


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
def code_version(root: Path = REPO_ROOT) -> str:
    """A hash of the audit/plan source under ``root``: results computed by other code are never reused."""
    h = hashlib.sha256()
    for source in SOURCES:
        path = root / source
        for f in sorted(path.glob("*.py")) if path.is_dir() else [path]:
            h.update(f.relative_to(root).as_posix().encode())
            h.update(f.read_bytes())
    return h.hexdigest()[:16]


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
    inputs: PlanInputs | None = parameters.get("inputs")
    return _key("audit", parameters["model_dir"], load_host(parameters["host_name"]),
                {"expected_headers": parameters.get("expected_headers"),
                 "inputs": inputs.model_dump(mode="json") if inputs is not None else None})


def plan_cache_key(context: TaskRunContext, parameters: dict[str, Any]) -> str:
    host = load_host(parameters["host_name"])
    audit: AuditReport = parameters["audit"]
    inputs: PlanInputs = parameters["inputs"]
    extra = {
        "inputs": inputs.model_dump(mode="json"),
        "audit": hashlib.sha256(audit.model_dump_json(exclude={"audit_seconds"}).encode()).hexdigest(),
        "pool_env": (server_env(host) or {}).get("VLLM_CPU_KVCACHE_SPACE"),
    }
    return _key("plan", parameters["model_dir"], host, extra)


@task(name="audit", cache_key_fn=audit_cache_key, persist_result=True, result_serializer="pickle")
def audit_task(model_dir: str, host_name: str, expected_headers: dict[str, str] | None = None,
               inputs: PlanInputs | None = None) -> AuditReport:
    """``roost audit --json`` for ``model_dir`` on host ``host_name``; error findings are in the result, not raised.

    ``expected_headers`` (shard -> digest, from the preflight): a shard whose header on disk differs is
    a HEADER_CHANGED finding. ``inputs`` (the profile's plan inputs): the report names the model and the
    window as the plan and the server take them (None: the directory's name, the native window)."""
    logger = get_run_logger()
    host = load_host(host_name)
    report = audit_for_host(Path(model_dir), host, inputs=inputs, expected_headers=expected_headers)
    log_findings(report)
    logger.info(
        "audited %s: %d tensors in %d shard(s), %.2f GB/token -> %s ceiling on %s (%.3f s)",
        model_dir, report.tensor_count, report.shard_count, report.decode_bytes_per_token / 1e9,
        DECODE_CEILING.format(report.decode_ceiling_tok_s), host.name, report.audit_seconds,
    )
    return report


@task(name="plan", cache_key_fn=plan_cache_key, persist_result=True, result_serializer="pickle")
def plan_task(model_dir: str, host_name: str, audit: AuditReport, inputs: PlanInputs) -> PlanReport:
    """``roost plan --json`` for the audited ``model_dir`` on ``host_name``, sized as ``inputs`` ask (their
    ``vllm_overrides`` win, so the plan follows them); the CPU backend's environment pool counts."""
    logger = get_run_logger()
    host = load_host(host_name)
    result = plan_checkpoint(audit, host, inputs, env=server_env(host))
    for line in result.predicted_log_lines:
        logger.info("vLLM will log: %s", line)
    if not result.fits_one_request:
        logger.error("the KV pool (%d bytes) cannot hold one %d-token request; vLLM needs %d",
                     result.kv_cache_memory_bytes, result.max_model_len, result.min_kv_cache_bytes)
    if not result.fits_host:
        logger.error("weights + KV pool + headroom exceed %s's budget by %d bytes", host.name, -result.fit.free_bytes)
    return result
