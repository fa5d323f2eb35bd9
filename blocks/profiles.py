"""``ModelProfileBlock`` (block type "Model Profile"): what to land, the same fields as
``roost.profiles.ModelProfile``.

Block document names allow only lowercase letters, digits and dashes, so a profile's document is
named ``profile_document_name(profile.name)``: ``ornith-1.5-35b-a3b-nvfp4`` is stored as
``ornith-1-5-35b-a3b-nvfp4``. The profile keeps its own name in the ``name`` field.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import Field

from roost.hub.patterns import DEFAULT_ALLOW_PATTERNS, DEFAULT_IGNORE_PATTERNS
from roost.profiles import PROFILES, ModelProfile


def profile_document_name(profile_name: str) -> str:
    """The block document name for a profile: lowercase, every other character a dash."""
    doc = re.sub(r"[^a-z0-9-]", "-", profile_name.strip().lower())
    return re.sub(r"-{2,}", "-", doc).strip("-")


class ModelProfileBlock(Block):
    """A model to land: Hub repo and revision, served name, download patterns, vLLM overrides, benchmark settings."""

    _block_type_name: ClassVar[str | None] = "Model Profile"
    _block_type_slug: ClassVar[str | None] = "model-profile"
    _description: ClassVar[str | None] = (
        "A model roost lands: the Hub repo and revision, the served model name, which files to download, "
        "vLLM argument overrides and the benchmark settings."
    )

    name: str = Field(description="Profile name (what `land` takes as `profile`).")
    repo_id: str = Field(description="Hugging Face repo id, e.g. deep-reinforce/Ornith-1.0-9B.")
    revision: str = Field(default="main", description="Branch, tag or commit.")
    served_model_name: str = Field(description="The model name clients send (vLLM --served-model-name).")
    host: str = Field(default="spark", description="Host profile to serve on.")
    allow_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOW_PATTERNS), description="Files to download.")
    ignore_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORE_PATTERNS), description="Files never downloaded.")
    max_model_len: int | None = Field(default=None, description="None: the model's native window.")
    kv_cache_memory_bytes: int | None = Field(default=None,
                                              description="None: the plan's smallest pool for target_concurrency.")
    target_concurrency: float = Field(default=1.5, description="Full-length requests the KV pool must hold.")
    max_num_seqs: int | None = Field(default=None, description="vLLM --max-num-seqs: the cap on running requests "
                                     "(None: vLLM's default); also a benchmark concurrency level.")
    max_num_batched_tokens: int | None = Field(default=None, description="vLLM --max-num-batched-tokens (None: vLLM's default).")
    gpu_memory_utilization: float | None = Field(
        default=None, gt=0, le=1, description="vLLM --gpu-memory-utilization: vLLM sizes the KV pool from this share "
        "of the device's memory (leave kv_cache_memory_bytes empty); the plan predicts the pool.")
    reasoning_parser: str | None = Field(default=None, description="vLLM --reasoning-parser, e.g. qwen3: the "
                                         "thinking in message.reasoning, the answer in message.content.")
    tool_call_parser: str | None = Field(default=None, description="vLLM --enable-auto-tool-choice "
                                         "--tool-call-parser, e.g. qwen3_coder: tool calls parsed into tool_calls.")
    enable_prefix_caching: bool | None = Field(default=None, description="vLLM --[no-]enable-prefix-caching "
                                               "(empty: vLLM's default).")
    enable_chunked_prefill: bool | None = Field(default=None, description="vLLM --[no-]enable-chunked-prefill "
                                                "(empty: vLLM's default).")
    production: bool = Field(default=False, description="The host's production model: a landing keeps serving "
                             "(restart policy unless-stopped) unless keep_serving is false (a one-off).")
    tool_auto_probe: bool = Field(default=False, description="Also probe tool_choice 'auto' after the health-wait "
                                  "(a real model chooses to call the tool).")
    port: int | None = Field(default=None, ge=1, le=65535, description="Fixed port the server is published on "
                             "(a gateway or Prometheus expects it; never moved); None: a free one.")
    vllm_overrides: list[str] = Field(default_factory=list, description="Extra vLLM args appended last (they win).")
    server_env: dict[str, str] = Field(default_factory=dict, description="Environment variables the server gets "
                                       "(vLLM settings without a flag; never a secret).")
    bench: dict[str, Any] = Field(default_factory=dict, description="Benchmark settings (prompt lengths, concurrency...).")
    health_timeout_s: float | None = Field(default=None, description="None: the host's timeout.")
    mtp_ab: bool = Field(default=False, description="Benchmark again without --speculative-config (same image "
                         "and commit): the MTP speed-up per point and the draft acceptance.")
    demo: bool = Field(default=False, description="Generated on the spot and published to a local Hub mirror.")
    hf_token_secret: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the Hub token (gated or private repos); "
        "None: the worker's HF_TOKEN, or anonymous.")
    regress: dict[str, Any] = Field(
        default_factory=dict,
        description="Regression check: window (runs in the baseline, default 5), rel_floor (smallest move that "
        "counts, default 0.05), mad_k (noise band in MADs, default 3), key_fields (what makes runs comparable).",
    )

    evals: list[dict[str, Any]] = Field(
        default_factory=list,
        description="Accuracy evaluations after the benchmark, e.g. [{\"task\": \"mmlu-pro\", \"per_category\": 50}] "
        "(task: gsm8k, math500 or mmlu-pro; dataset, limit, per_category, seed, temperature, top_p, top_k, "
        "max_tokens, thinking, concurrency).")
    eval_compare_with: list[str] = Field(
        default_factory=list, description="Hub repo ids of other models the report compares accuracy with.")

    def to_profile(self) -> ModelProfile:
        """The plain ``ModelProfile`` the flows and ``roost/`` logic use."""
        return ModelProfile.model_validate({k: getattr(self, k) for k in ModelProfile.model_fields})

    @classmethod
    def from_profile(cls, profile: ModelProfile) -> ModelProfileBlock:
        return cls(**profile.model_dump())


def builtin_profile_documents() -> dict[str, ModelProfileBlock]:
    """The documents ``roost setup`` saves: the Ornith 1.0 35B, Ornith 1.0 9B and Ornith 1.5 35B-A3B NVFP4
    recipes and the local demo."""
    return {profile_document_name(name): ModelProfileBlock.from_profile(p) for name, p in PROFILES.items()}
