"""tasks/audit.py: the audit and plan tasks, cached on file fingerprints and persisted (real Prefect)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from roost.checkpoint import replicas
from tasks.audit import checkpoint_fingerprint, code_version


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


def test_code_version_is_stable() -> None:
    assert code_version() == code_version() and len(code_version()) == 16


@pytest.mark.slow
def test_tasks_cache_and_invalidate(prefect_api: str, tmp_path: Path) -> None:
    from prefect import flow
    from prefect.states import State

    from tasks.audit import audit_task, plan_task

    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "ornith-9b")
    profile: dict[str, Any] = {"served_model_name": "ornith9b", "kv_cache_memory_bytes": 12884901888,
                               "max_model_len": None, "target_concurrency": 1.5, "vllm_overrides": []}

    @flow
    def twice(model_dir: str) -> list[State[Any]]:
        return [
            audit_task(model_dir, "spark", return_state=True),
            audit_task(model_dir, "spark", return_state=True),
            plan_task(model_dir, "spark", profile, return_state=True),
            plan_task(model_dir, "spark", profile, return_state=True),
        ]

    a1, a2, p1, p2 = twice(str(d))
    assert a1.is_completed() and a1.name == "Completed" and a2.name == "Cached"
    assert p1.name == "Completed" and p2.name == "Cached"
    audit = a2.result()
    assert (audit["tensor_count"], audit["visual_tensor_count"], audit["mtp_tensor_count"]) == (760, 333, 0)
    assert any(f["code"] == "MTP_ADVERTISED_NOT_SHIPPED" for f in audit["findings"])
    plan = p2.result()
    assert (plan["kv_cache_tokens"], round(plan["max_concurrency"], 2), plan["block_size"]) == (390_070, 1.49, 528)
    assert plan["vllm_args"][plan["vllm_args"].index("--served-model-name") + 1] == "ornith9b"

    # a touched shard is a different checkpoint as far as the cache knows
    shard = d / "model-00001-of-00004.safetensors"
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    b1, _, q1, _ = twice(str(d))
    assert b1.name == "Completed" and q1.name == "Completed"

    # a different profile pool is a different plan
    @flow
    def other_pool(model_dir: str) -> State[Any]:
        return plan_task(model_dir, "spark", profile | {"kv_cache_memory_bytes": 16 * 1024**3}, return_state=True)

    s = other_pool(str(d))
    assert s.name == "Completed" and s.result()["kv_cache_memory_bytes"] == 16 * 1024**3
