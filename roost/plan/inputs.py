"""What a plan is asked for: the sizing fields of a model profile, typed (the plan task's input)."""

from __future__ import annotations

from pydantic import BaseModel, Field

PARSER_NAME = r"^[a-z0-9][a-z0-9_.-]{0,63}$"
"""A vLLM reasoning- or tool-parser name as its registries spell them (``qwen3``, ``qwen3_coder``)."""


class ServingSettings(BaseModel):
    """How a profile's server serves its clients, beyond the KV sizing: the settings the recipes pass
    (``roost.profiles.ModelProfile`` and ``PlanInputs`` carry them; ``roost.plan.args.ServeArgs`` turns
    them into flags). None everywhere: vLLM's own default."""

    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="vLLM --gpu-memory-utilization: size the KV pool from this share of "
        "the device's memory instead of pinning it (kv_cache_memory_bytes must then be None); the plan predicts "
        "the pool it gives (roost.plan.pool) and each landing records vLLM's logged figure beside it.")
    reasoning_parser: str | None = Field(
        default=None, pattern=PARSER_NAME, description="vLLM --reasoning-parser (qwen3 for the Qwen3/Qwen3.5 family): "
        "the thinking goes to message.reasoning, the answer to message.content.")
    tool_call_parser: str | None = Field(
        default=None, pattern=PARSER_NAME, description="vLLM --enable-auto-tool-choice --tool-call-parser (qwen3_coder "
        "for Qwen3.5-family coders): requests with tools and tool_choice 'auto' get parsed tool_calls.")
    enable_prefix_caching: bool | None = Field(
        default=None, description="vLLM --[no-]enable-prefix-caching (None: vLLM's default for the model).")
    enable_chunked_prefill: bool | None = Field(
        default=None, description="vLLM --[no-]enable-chunked-prefill (None: vLLM's default).")


class PlanInputs(ServingSettings):
    """What the plan is asked for: a model profile's sizing fields (``roost.profiles.ModelProfile``
    has fields of these names, so ``PlanInputs.model_validate(profile.model_dump())`` reads one)."""

    served_model_name: str | None = Field(default=None, description="None: the audit's (the directory's name).")
    max_model_len: int | None = Field(default=None, description="None: the model's native window.")
    kv_cache_memory_bytes: int | None = Field(
        default=None, description="None: the smallest pool holding target_concurrency full-length requests "
        "(or, with gpu_memory_utilization, the pool that share gives)."
    )
    target_concurrency: float = Field(default=1.0, description="Full-length requests the default pool must hold.")
    max_num_seqs: int | None = Field(default=None, description="vLLM --max-num-seqs (None: vLLM's default).")
    max_num_batched_tokens: int | None = Field(
        default=None, description="vLLM --max-num-batched-tokens (None: vLLM's default).")
    vllm_overrides: list[str] = Field(
        default_factory=list, description="Extra vLLM args appended after roost's (they win; the plan follows them)."
    )
