"""What an accuracy run evaluates (:class:`EvalSettings`): the task, the dataset and sample, and how
questions are asked.

Apart from the runner (``roost.eval.runner``, which re-exports it): a model profile validates its
``evals`` with it when the profiles are defined, and that must not import the runner's datasets and
HTTP client (``roost plan --profile`` and every other command that reads a profile start faster).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from roost.eval.suites import get_task
from roost.eval_record import Sampling


class EvalSettings(BaseModel):
    """What to evaluate: the task, the dataset and sample, and how questions are asked."""

    task: str
    dataset: str | None = Field(default=None, description="Path or Hub dataset repo; None: the task's upstream repo.")
    limit: int | None = Field(default=None, ge=1, le=1 << 31)
    per_category: int | None = Field(default=None, ge=1, le=1 << 31, description="None: the task's default (MMLU-Pro 50).")
    seed: int = 0
    sampling: Sampling = Field(default_factory=Sampling)
    max_tokens_given: bool = Field(default=True, description="False: the task default, capped to the server's window.")

    @classmethod
    def for_task(cls, task: str, **overrides: Any) -> EvalSettings:
        """The recipe's settings for ``task`` with ``overrides`` (sampling fields included) on top."""
        t = get_task(task)
        sampling_fields = set(Sampling.model_fields)
        given = {k: v for k, v in overrides.items() if v is not None}
        # validated, not model_copy'd: a profile's temperature 0 becomes 0.0, so keys and logs compare equal
        sampling = Sampling.model_validate(
            {**t.sampling.model_dump(), **{k: v for k, v in given.items() if k in sampling_fields}})
        rest = {k: v for k, v in given.items() if k not in sampling_fields}
        rest.setdefault("per_category", t.per_category)
        rest.setdefault("max_tokens_given", "max_tokens" in given)
        return cls(task=t.name, sampling=sampling, **rest)
