"""Stage 7b, ``probes``: the reasoning split, a named tool call, structured output (as the server's
arguments call for); a failed probe fails the landing with its own class."""

from __future__ import annotations

from pydantic import SecretStr

from flows.stages.timing import stage
from roost import catalogue as C
from roost.profiles import ModelProfile
from roost.records import RunRecord
from roost.serve.probes import check as check_probes
from roost.serve.probes import probes_for
from tasks.probes import probes_task


def probe_stage(record: RunRecord, base_url: str, key: SecretStr, prof: ModelProfile, timeout_s: float = 120.0) -> None:
    """The capability probes the server's arguments call for (``roost.serve.probes.probes_for``): the
    reasoning split, a named tool call validated against its schema, JSON-schema structured output (and
    ``tool_choice: auto`` when the profile asks). A failed probe fails the landing with its own class."""
    names = probes_for(record.meta.vllm_args, tool_auto=prof.tool_auto_probe)
    with stage(record, "probes") as st:
        record.probes = probes_task(base_url, prof.served_model_name, key, names, timeout_s)
        st.note = ", ".join(f"{r.name} {'passed' if r.ok else 'FAILED'} in {C.PROBE_LATENCY.format(r.latency_s)}"
                            for r in record.probes)
        check_probes(record.probes)
