"""What a plan is asked for: the sizing fields of a model profile, typed (the plan task's input)."""

from __future__ import annotations

from pydantic import BaseModel, Field


class PlanInputs(BaseModel):
    """What the plan is asked for: a model profile's sizing fields (``roost.profiles.ModelProfile``
    has fields of these names, so ``PlanInputs.model_validate(profile.model_dump())`` reads one)."""

    served_model_name: str | None = Field(default=None, description="None: the audit's (the directory's name).")
    max_model_len: int | None = Field(default=None, description="None: the model's native window.")
    kv_cache_memory_bytes: int | None = Field(
        default=None, description="None: the smallest pool holding target_concurrency full-length requests."
    )
    target_concurrency: float = Field(default=1.0, description="Full-length requests the default pool must hold.")
    max_num_seqs: int | None = Field(default=None, description="vLLM --max-num-seqs (None: vLLM's default).")
    max_num_batched_tokens: int | None = Field(
        default=None, description="vLLM --max-num-batched-tokens (None: vLLM's default).")
    vllm_overrides: list[str] = Field(
        default_factory=list, description="Extra vLLM args appended after roost's (they win; the plan follows them)."
    )
