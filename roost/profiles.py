"""Model profiles: which checkpoint to land, where, and how to serve and measure it.

``blocks/profiles.py``'s block is a ``ModelProfile`` Prefect can save, so a deployment form can pick
one; these built-ins are the three published serving recipes (Ornith 1.0 35B and 9B in BF16,
Ornith 1.5 35B-A3B NVFP4) plus the embedded local demo.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator, model_validator

from roost import settings as S
from roost.bench import WINDOW_MAX
from roost.errors import UserError
from roost.hub.patterns import DEFAULT_ALLOW_PATTERNS, DEFAULT_IGNORE_PATTERNS
from roost.plan.inputs import PlanInputs, ServingSettings
from roost.profile_settings import BenchOverrides, EvalSpec, RegressOverrides
from roost.regress import RegressConfig

SECRET_ENV = frozenset({S.VLLM_API_KEY, S.HF_TOKEN, S.HUGGING_FACE_HUB_TOKEN, S.SLACK_BOT_TOKEN, S.AWS_SECRET_ACCESS_KEY})
"""Variables that hold secrets: a profile's ``server_env`` never sets them."""

if TYPE_CHECKING:
    from roost.eval.settings import EvalSettings
    from roost.serve.base import ServeSpec
    from roost.serve.occupancy import RestartPolicy


class ModelProfile(ServingSettings):
    """Everything roost needs to land one model (its serving settings: :class:`ServingSettings`)."""

    name: str = Field(description="Profile name (what `land` takes as `profile`; lowercase, dashes).")
    repo_id: str = Field(description="Hugging Face repo id, e.g. deep-reinforce/Ornith-1.0-9B.")
    revision: str = Field(default="main", description="Branch, tag or commit.")
    served_model_name: str = Field(description="The model name clients send (vLLM --served-model-name).")
    host: str = Field(default="spark", description="Host profile to serve on (roost.hosts).")
    allow_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_ALLOW_PATTERNS),
                                      description="Files to download.")
    ignore_patterns: list[str] = Field(default_factory=lambda: list(DEFAULT_IGNORE_PATTERNS),
                                       description="Files never downloaded.")
    max_model_len: int | None = Field(default=None, description="None: the model's native window.")
    kv_cache_memory_bytes: int | None = Field(default=None, description="None: the plan's smallest pool for target_concurrency.")
    target_concurrency: float = Field(default=1.5, description="Full-length requests the KV pool must hold.")
    max_num_seqs: int | None = Field(default=None, description="vLLM --max-num-seqs: the scheduler's cap on running "
                                     "requests (None: vLLM's default); also a benchmark concurrency level.")
    max_num_batched_tokens: int | None = Field(default=None, description="vLLM --max-num-batched-tokens (None: vLLM's default).")
    port: int | None = Field(default=None, ge=1, le=65535, description="A fixed port the server is published on (a "
                             "gateway or Prometheus expects it there; never moved); None: a free one.")
    vllm_overrides: list[str] = Field(default_factory=list, description="Extra vLLM args appended last (they win).")
    server_env: dict[str, str] = Field(default_factory=dict, description="Environment variables the server gets "
                                       "(vLLM settings that have no flag; never a secret: keys come from Secret blocks).")
    bench: BenchOverrides = Field(
        default_factory=BenchOverrides, description="Benchmark settings (prompt lengths, concurrency...; "
        "roost.bench.settings.BenchSettings): the ones not set are the benchmark's defaults.")
    health_timeout_s: float | None = Field(default=None, description="None: the host profile's timeout.")
    mtp_ab: bool = Field(default=False, description="After the benchmark, restart without --speculative-config "
                         "(same image and commit) and benchmark again: the MTP speed-up per point and the draft "
                         "acceptance.")
    demo: bool = Field(default=False, description="Generated on the spot and published to a local Hub mirror.")
    production: bool = Field(default=False, description="The host's production model (the recipe's run.sh): a "
                             "landing keeps serving (restart policy unless-stopped) unless run as a one-off "
                             "(keep_serving false).")
    tool_auto_probe: bool = Field(default=False, description="After the health-wait, also ask with tool_choice "
                                  "'auto' and expect a parsed tool call (a real model chooses to call; random "
                                  "weights never do).")
    hf_token_secret: str | None = Field(
        default=None, description="Name of a Prefect Secret block holding the Hub token (gated or private repos); "
        "None: the worker's HF_TOKEN, or anonymous.")
    regress: RegressOverrides = Field(
        default_factory=RegressOverrides, description="Regression check settings (roost.regress.RegressConfig: "
        "window, min_runs, rel_floor, mad_k, key_fields): the ones not set are its defaults.")

    evals: list[EvalSpec] = Field(
        default_factory=list, description="Accuracy evaluations run after the benchmark, e.g. "
        "[{\"task\": \"mmlu-pro\", \"per_category\": 50}]: each a task and what it changes of the task's recipe.")
    eval_compare_with: list[str] = Field(
        default_factory=list, description="Other models (Hub repo ids) whose latest stored scores on the same "
        "evaluations the report shows beside this one's.")
    compare_with: str = Field(
        default="", description="The model (Hub repo id, profile or served model name) a landing's report compares "
        "this one with, as the recipe compares a new model with the one it replaced: throughput per concurrency, "
        "GSM8K/MATH-500 with truncation and output length, MMLU-Pro per category (roost.report.compare), from its "
        "newest stored run on the same host. '': a production profile compares with the host's previous "
        "production model; any other profile with none.")

    @field_validator("server_env")
    @classmethod
    def _server_env(cls, value: dict[str, str]) -> dict[str, str]:
        for name in value:
            if not re.fullmatch(r"[A-Z_][A-Z0-9_]{0,127}", name):
                raise ValueError(f"server_env: {name[:60]!r} is not an environment variable name (A-Z, 0-9, _)")
            if name in SECRET_ENV:
                raise ValueError(f"server_env: {name} is a secret; it comes from its Prefect Secret block or the "
                                 "worker's environment, never from a profile")
        return value

    @model_validator(mode="after")
    def _one_pool_rule(self) -> ModelProfile:
        if self.gpu_memory_utilization is not None and self.kv_cache_memory_bytes is not None:
            raise ValueError("set kv_cache_memory_bytes (a pinned pool) or gpu_memory_utilization (vLLM sizes "
                             "the pool), not both")
        return self

    def keeps_serving(self, keep_serving: bool | None) -> bool:
        """Whether a landing leaves the server up: as asked (``False`` is a one-off, the recipe's
        ``RESTART=no``), else when this is the host's production model."""
        return self.production if keep_serving is None else keep_serving

    def eval_settings(self) -> list[EvalSettings]:
        from roost.eval.settings import EvalSettings

        return [EvalSettings.for_task(**spec) for spec in self.evals]

    def regress_config(self) -> RegressConfig:
        return RegressConfig.model_validate(dict(self.regress))  # a plain RegressConfig, whatever the profile holds

    def plan_inputs(self, overrides: list[str] | None = None) -> PlanInputs:
        """What the plan is asked for when this profile lands: its sizing and serving settings, then its
        ``vllm_overrides`` and the run's ``overrides`` (appended last: they win)."""
        return PlanInputs(served_model_name=self.served_model_name, max_model_len=self.max_model_len,
                          kv_cache_memory_bytes=self.kv_cache_memory_bytes, target_concurrency=self.target_concurrency,
                          max_num_seqs=self.max_num_seqs, max_num_batched_tokens=self.max_num_batched_tokens,
                          vllm_overrides=[*self.vllm_overrides, *(overrides or [])],
                          **self.model_dump(include=set(ServingSettings.model_fields)))

    def serve_spec(self, model_dir: Path, vllm_args: list[str], *, port: int | None = None, keep_serving: bool = False,
                   restart_policy: RestartPolicy | None = None) -> ServeSpec:
        """How this profile's server starts: on ``port`` if given (a taken one is moved), else on the
        profile's fixed port (never moved), else a free one; ``unless-stopped`` when it keeps serving
        (production) unless the run asks for another policy (``roost.serve.occupancy``)."""
        from roost.net import free_port
        from roost.serve.base import ServeSpec
        from roost.serve.occupancy import restart_policy_for

        return ServeSpec(model_dir=model_dir, served_model_name=self.served_model_name,
                         port=port or self.port or free_port(), fixed_port=port is None and self.port is not None,
                         vllm_args=list(vllm_args), restart_policy=restart_policy_for(keep_serving, restart_policy),
                         env=dict(self.server_env))


LOCAL = ModelProfile(
    name="local",
    repo_id="roost-demo/tiny-qwen3",
    served_model_name="tiny",
    host="cpu",
    max_model_len=2048,
    kv_cache_memory_bytes=1024**3,
    max_num_seqs=2,  # below the top benchmark level, so the report shows requests queueing past the cap
    # the production server's client-facing settings, on the demo model (same family): the probes prove them
    reasoning_parser="qwen3",
    tool_call_parser="qwen3_coder",
    enable_prefix_caching=True,
    enable_chunked_prefill=True,
    # random weights write JSON whitespace (and a qwen3_coder call's XML whitespace) until max_tokens, which the
    # grammar allows: compact JSON and plain-JSON named tool calls keep the probes' grammar-constrained answers
    # short on the demo; a real model (the Spark profiles) needs neither
    vllm_overrides=["--dtype", "bfloat16",
                    '--structured-outputs-config={"backend":"xgrammar","disable_any_whitespace":true}'],
    server_env={"VLLM_ENFORCE_STRICT_TOOL_CALLING": "0"},
    bench=BenchOverrides(prompt_lengths=[128, 1024], output_tokens=64, concurrency=[1, 4], repeats=2, warmup=2),
    # a small GSM8K-format set from the demo's own Hub mirror (roost.demo.evalset): greedy, short answers
    evals=[EvalSpec(task="gsm8k", dataset="roost-demo/gsm8k-mini", limit=12, max_tokens=48, temperature=0.0,
                    thinking=False, concurrency=4)],
    demo=True,
)

ORNITH_35B = ModelProfile(
    name="ornith-35b",
    repo_id="deep-reinforce/Ornith-1.0-35B",
    served_model_name="ornith",
    host="spark",
    kv_cache_memory_bytes=8 * 1024**3,  # the recipe's pin: 412,980 tokens, 1.58x
    max_num_seqs=16,
    max_num_batched_tokens=8192,
    reasoning_parser="qwen3",  # Qwen3.5 family: <think> ... </think> then the answer
    tool_call_parser="qwen3_coder",  # an agentic-coding model: its tool calls are Qwen3-Coder XML
    bench=BenchOverrides(prompt_lengths=[512, 2048, 8192, 32768, 131072, 250000, WINDOW_MAX], output_tokens=256,
                         concurrency=[1, 16, 20, 24], repeats=3),
    health_timeout_s=1200,
)

ORNITH_9B = ModelProfile(
    name="ornith-9b",
    repo_id="deep-reinforce/Ornith-1.0-9B",
    served_model_name="ornith9b",
    host="spark",
    kv_cache_memory_bytes=12 * 1024**3,  # the recipe's pin: 390,070 tokens, 1.49x
    reasoning_parser="qwen3",
    tool_call_parser="qwen3_coder",
    bench=BenchOverrides(prompt_lengths=[512, 2048, 8192, 32768, 131072, 250000, WINDOW_MAX], output_tokens=256,
                         concurrency=[1, 16, 20, 24], repeats=3),
    health_timeout_s=900,
)

ORNITH_15_NVFP4 = ModelProfile(
    name="ornith-1.5-35b-a3b-nvfp4",
    repo_id="ornith-ai/Ornith-1.5-35B-A3B-NVFP4",
    served_model_name="ornith-1.5-35b-a3b",
    host="spark",
    # the recipe's server: "one 0.70-utilization vLLM server" (no pinned pool); its scheduler runs "chunked
    # prefill · prefix cache · max-num-seqs = 20"; its client reads message.reasoning, and the coding tools
    # on the tailnet send tools
    gpu_memory_utilization=0.70,
    max_num_seqs=20,
    enable_prefix_caching=True,
    enable_chunked_prefill=True,
    reasoning_parser="qwen3",
    tool_call_parser="qwen3_coder",
    production=True,  # run.sh: --restart unless-stopped, "the active production model on this box"
    port=8004,  # the recipe's: the metering gateway and Prometheus scrape it there
    mtp_ab=True,  # the recipe measured MTP at +41% decode at one user, shrinking under load
    # the recipe's accuracy runs: thinking-mode sampling (0.6 / 0.95 / 20); GSM8K and MATH-500 with 16 in
    # flight, MMLU-Pro on 50 questions per category (700), 8 in flight, 16,384 tokens per answer
    evals=[EvalSpec(task="gsm8k"), EvalSpec(task="math500"), EvalSpec(task="mmlu-pro", per_category=50, concurrency=8)],
    bench=BenchOverrides(prompt_lengths=[512, 2048, 8192, 32768, WINDOW_MAX], output_tokens=512,
                         concurrency=[1, 16, 20, 24], repeats=3),
    health_timeout_s=900,
)

PROFILES: dict[str, ModelProfile] = {p.name: p for p in (LOCAL, ORNITH_35B, ORNITH_9B, ORNITH_15_NVFP4)}


def get_profile(name: str) -> ModelProfile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise UserError(f"unknown model profile {name!r}: choose one of {known}") from None
