"""Stage 7c, ``vision-probe``: an image request when the server runs a checkpoint's vision tower."""

from __future__ import annotations

from pydantic import SecretStr

from flows.stages.audit import ServePlan
from flows.stages.timing import stage
from roost import catalogue as C
from roost.records import RunRecord, VisionProbe
from roost.serve.vision import VisionProbeFailed, needs_probe
from tasks.vision_probe import vision_probe_task


def vision_stage(record: RunRecord, plan: ServePlan, base_url: str, key: SecretStr, served_model_name: str,
                 timeout_s: float = 300.0) -> None:
    """When the checkpoint ships a vision tower and the server runs without ``--language-model-only``:
    one chat request with a generated PNG must succeed (``roost.serve.vision``), else the landing fails
    with ``vision_probe_failed``. A text-only checkpoint records nothing."""
    if not needs_probe(plan.audit.visual_tensor_count, record.meta.vllm_args):
        return
    with stage(record, "vision-probe") as st:
        result: VisionProbe = vision_probe_task(base_url, served_model_name, key, timeout_s)
        record.vision_probe = result
        st.note = f"{'passed' if result.ok else 'failed'} in {C.VISION_PROBE_LATENCY.format(result.latency_s)}"
        if not result.ok:
            raise VisionProbeFailed(result)
