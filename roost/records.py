"""The records a run produces, shared by every stage, the results store and the reports.

Each stage module owns the detail of its own output; this module holds the shapes that cross
stage boundaries so that the store, the report and the regression check read one schema.
``SCHEMA_VERSION`` is written into every stored row; bump it when a field changes meaning.
"""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Any, Literal

from pydantic import BaseModel, Field

SCHEMA_VERSION = 1

Severity = Literal["info", "warning", "error"]


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def new_run_id() -> str:
    """A sortable, unique run id: UTC timestamp + 8 random hex digits."""
    return utcnow().strftime("%Y%m%dT%H%M%SZ") + "-" + uuid.uuid4().hex[:8]


class Finding(BaseModel):
    """One audit or preflight observation. ``code`` is stable (UPPER_SNAKE); scripts match on it."""

    code: str
    severity: Severity
    message: str = Field(description="One sentence: what was found and what to do.")


class StageTiming(BaseModel):
    """Wall time of one pipeline stage; ``cached`` when its result came from the cache."""

    stage: str
    seconds: float
    cached: bool = False
    status: Literal["completed", "skipped", "failed"] = "completed"
    note: str = ""


class RunMeta(BaseModel):
    """What identifies a run and makes two runs comparable (the regression baseline key)."""

    run_id: str = Field(default_factory=new_run_id)
    started_at: dt.datetime = Field(default_factory=utcnow)
    roost_version: str
    profile: str = Field(description="Model profile name, e.g. 'local' or 'ornith-9b'.")
    repo_id: str
    revision: str = Field(description="What the user asked for: a branch, tag or commit.")
    commit: str = Field(description="The commit sha the revision resolved to.")
    served_model_name: str
    host: str
    backend: Literal["process", "docker"]
    image: str = ""
    image_digest: str = Field(default="", description="Docker image id/digest; empty for the process backend.")
    vllm_version: str = ""
    vllm_args: list[str] = Field(default_factory=list)
    prefect_flow_run_id: str = ""

    def comparable_key(self) -> tuple[str, ...]:
        """Runs with the same key are compared for regressions: model commit, image, vLLM version
        (the process backend has no image to tell two vLLM installs apart), args, host."""
        return (self.repo_id, self.commit, self.image_digest, self.vllm_version, " ".join(self.vllm_args), self.host)


class ServeObservation(BaseModel):
    """What the serving stage saw vLLM do, beside what the plan predicted."""

    predicted_kv_cache_tokens: int | None = None
    predicted_max_concurrency: float | None = None
    logged_kv_cache_tokens: int | None = None
    logged_max_concurrency: float | None = None
    logged_block_size: int | None = None
    start_to_healthy_s: float | None = None
    load_s: float | None = Field(default=None, description="Start -> weights loaded.")
    compile_s: float | None = Field(default=None, description="Weights loaded -> engine ready (profile, compile, warm-up).")
    ready_s: float | None = Field(default=None, description="Engine ready -> /health 200 seen by roost.")
    health_detect_delay_s: float | None = Field(default=None, description="/health first 200 -> roost noticed.")
    attempts: list[dict[str, Any]] = Field(default_factory=list, description="One entry per start attempt.")


class BenchPoint(BaseModel):
    """One benchmark point (a prompt length or a concurrency level), aggregated over its requests.

    Metric definitions live in ``roost/bench/metrics.py``; names follow ``vllm bench serve``.
    """

    kind: Literal["prompt_length", "concurrency"]
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    requests: int
    errors: int = 0
    skipped: bool = False
    skip_reason: str = ""
    ttft_s_median: float | None = None
    ttft_s_min: float | None = None
    ttft_s_max: float | None = None
    ttft_s_p90: float | None = None
    ttft_s_p99: float | None = None
    tpot_s_median: float | None = None
    itl_s_median: float | None = None
    itl_s_p90: float | None = None
    itl_s_p99: float | None = None
    e2el_s_median: float | None = None
    decode_tok_s_median: float | None = None
    decode_tok_s_min: float | None = None
    decode_tok_s_max: float | None = None
    output_tok_s: float | None = Field(default=None, description="Aggregate: total output tokens / wall time of the step.")
    request_rate: float | None = None
    usage_missing: int = Field(default=0, description="Requests whose token count came from chunks, not usage.")
    metrics_delta: dict[str, float] = Field(default_factory=dict, description="/metrics counters after - before.")
    # Optional detail (roost/bench): the point's plan and spread beyond the median.
    prompt_tokens_target: int | None = Field(default=None, description="Asked-for prompt length (usage may differ if inexact).")
    repeats: int | None = None
    thinking: bool | None = Field(default=None, description="chat_template_kwargs.enable_thinking of the requests.")
    tpot_s_p90: float | None = None
    tpot_s_p99: float | None = None
    e2el_s_p90: float | None = None
    e2el_s_p99: float | None = None
    decode_tok_s_p10: float | None = Field(default=None, description="Slowest decile of per-request decode rates.")
    output_tok_s_min: float | None = Field(default=None, description="Aggregate tok/s of the slowest repeat.")
    output_tok_s_max: float | None = Field(default=None, description="Aggregate tok/s of the fastest repeat.")


class RunRecord(BaseModel):
    """Everything one pipeline run established. Written to ``results/`` and rendered as the report."""

    schema_version: int = SCHEMA_VERSION
    meta: RunMeta
    status: Literal["completed", "failed"] = "completed"
    failed_stage: str = ""
    failure_class: str = ""
    failure_message: str = ""
    remediation: str = ""
    stages: list[StageTiming] = Field(default_factory=list)
    audit: dict[str, Any] = Field(default_factory=dict, description="The audit's JSON (roost audit --json).")
    plan: dict[str, Any] = Field(default_factory=dict, description="The plan's JSON (roost plan --json).")
    serve: ServeObservation = Field(default_factory=ServeObservation)
    points: list[BenchPoint] = Field(default_factory=list)
    decode_ceiling_tok_s: float | None = None
    report_path: str = ""
