"""tasks/audit.py: the audit and plan tasks, cached on file fingerprints and persisted (real Prefect)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from prefect.states import State
from support import replicas

from roost.plan.inputs import PlanInputs
from roost.plan.preflight import PlanReport
from roost.plan.report import AuditReport
from tasks.audit import REPO_ROOT, SOURCES, audit_task, checkpoint_fingerprint, code_version, plan_task


def test_fingerprint_covers_what_the_audit_reads(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=2), tmp_path / "m")
    (d / "README.md").write_text("not read by the audit")
    fp = checkpoint_fingerprint(d)
    assert [f[0] for f in fp] == ["config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                                  "model.safetensors.index.json"]
    (d / "README.md").write_text("changed")
    assert checkpoint_fingerprint(d) == fp
    st = (d / "model-00002-of-00002.safetensors").stat()
    os.utime(d / "model-00002-of-00002.safetensors", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert checkpoint_fingerprint(d) != fp
    assert checkpoint_fingerprint(tmp_path / "absent") == []


def _copy_sources(root: Path) -> Path:
    for source in SOURCES:
        src = REPO_ROOT / source
        if src.is_dir():
            shutil.copytree(src, root / source, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            (root / source).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, root / source)
    return root


def test_code_version_follows_the_audit_and_plan_source(tmp_path: Path) -> None:
    """The key changes when any audit/plan source changes, and only then (not with the directory it lives in)."""
    same = code_version(_copy_sources(tmp_path / "a"))
    assert len(same) == 16 and code_version(_copy_sources(tmp_path / "b")) == same == code_version()
    for i, edited in enumerate(["roost/checkpoint/checks.py", "roost/plan/kv.py", "tasks/audit.py"]):
        root = _copy_sources(tmp_path / f"edit{i}")
        with open(root / edited, "a") as f:
            f.write("\n# a fix\n")
        assert code_version(root) != same, edited
    root = _copy_sources(tmp_path / "new-module")
    (root / "roost/plan/extra.py").write_text("X = 1\n")
    assert code_version(root) != same


@pytest.mark.slow
def test_tasks_cache_and_invalidate(prefect_api: str, tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "ornith-9b")
    inputs = PlanInputs(served_model_name="ornith9b", kv_cache_memory_bytes=12884901888, target_concurrency=1.5)

    @flow
    def twice(model_dir: str, plan_inputs: PlanInputs) -> list[State[Any]]:
        a1 = audit_task(model_dir, "spark", return_state=True)
        a2 = audit_task(model_dir, "spark", return_state=True)
        audit = a2.result()
        return [
            a1, a2,
            plan_task(model_dir, "spark", audit, plan_inputs, return_state=True),
            plan_task(model_dir, "spark", audit, plan_inputs, return_state=True),
        ]

    a1, a2, p1, p2 = twice(str(d), inputs)
    assert a1.is_completed() and a1.name == "Completed" and a2.name == "Cached"
    assert p1.name == "Completed" and p2.name == "Cached"
    audit = a2.result()  # read back from the persisted result: the model, config included
    assert isinstance(audit, AuditReport) and audit.config.num_hidden_layers == 32
    assert (audit.tensor_count, audit.visual_tensor_count, audit.mtp_tensor_count) == (760, 333, 0)
    assert [f.code for f in audit.findings] == ["MTP_ADVERTISED_NOT_SHIPPED", "VISION_TOWER_PRESENT"]
    assert audit.errors == []
    plan = p2.result()
    assert isinstance(plan, PlanReport)
    assert (plan.kv_cache_tokens, f"{plan.max_concurrency:.2f}", plan.block_size) == (390_070, "1.49", 528)
    assert plan.vllm_args[plan.vllm_args.index("--served-model-name") + 1] == "ornith9b"

    # a touched shard is a different checkpoint as far as the cache knows
    shard = d / "model-00001-of-00004.safetensors"
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    b1, _, q1, _ = twice(str(d), inputs)
    assert b1.name == "Completed" and q1.name == "Completed"

    # a different pool is a different plan
    s1, _, s2, _ = twice(str(d), inputs.model_copy(update={"kv_cache_memory_bytes": 16 * 1024**3}))
    assert s1.name == "Cached" and s2.name == "Completed"
    assert s2.result().kv_cache_memory_bytes == 16 * 1024**3
