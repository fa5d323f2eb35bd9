"""Stage 2b, ``eval-datasets``: every evaluation's questions read and sampled before any server starts."""

from __future__ import annotations

from flows.stages.timing import stage
from roost.profiles import ModelProfile
from roost.records import RunRecord
from tasks.evaluate import PreparedEval, eval_datasets_task


def eval_datasets_stage(record: RunRecord, prof: ModelProfile, endpoint: str | None = None) -> list[PreparedEval]:
    """Read every evaluation's dataset and draw its sample from ``endpoint`` (``flows.stages.hub``),
    before any server starts: a dataset that cannot be read stops the run before the model loads."""
    settings = prof.eval_settings()
    if not settings:
        return []
    with stage(record, "eval-datasets") as st:
        prepared: list[PreparedEval] = eval_datasets_task(settings, endpoint, prof.hf_token_secret)
        st.note = ", ".join(f"{p.settings.task}: {len(p.dataset.questions)} questions" for p in prepared)
    return prepared
