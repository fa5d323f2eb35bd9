"""Stage 4, ``build``: the serving image (vLLM base + xgrammar patch), or nothing for a process host."""

from __future__ import annotations

from flows.stages.timing import stage
from roost.records import RunRecord
from roost.serve.base import Backend, Prepared
from tasks.build import build_task


def build_stage(record: RunRecord, backend: Backend) -> Prepared:
    """What the backend needs before a server can start: the serving image (vLLM base + xgrammar
    patch, cached by its Dockerfile's hash), or nothing for a process host."""
    with stage(record, "build") as st:
        prepared = build_task(backend)
        record.meta.image, record.meta.image_digest = prepared.image, prepared.image_digest
        record.meta.xgrammar_version = prepared.xgrammar_version
        record.meta.xgrammar_base_version = prepared.xgrammar_base
        record.meta.vllm_version = prepared.vllm_version or record.meta.vllm_version  # the server's, once it answers
        st.cached, st.note = prepared.cached, prepared.note
        if prepared.skipped:
            st.status = "skipped"
    return prepared
