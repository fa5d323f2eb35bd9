"""The records a run produces, shared by every stage, the results store and the reports.

Each stage module owns the detail of its own output; this module holds the shapes that cross
stage boundaries so that the store, the report and the regression check read one schema.
``SCHEMA_VERSION`` is written into every stored record; a record written by an older release is
read through :func:`upgrade_record` (nothing a user measured stops being readable).

Schema history:

1. (roost 0.1) benchmark statistics as flat fields: ``ttft_s_median``, ``ttft_s_p90``,
   ``output_tok_s`` (the median over repeats), ``output_tok_s_min``...; start attempts as dicts.
2. statistics nested per metric: ``ttft_s: {count, mean, median, min, max, p10, p90, p99}``;
   start attempts typed (:class:`StartAttempt`). The Parquet tables keep the flat column names
   (``roost.store`` flattens), so a table read with pandas has the same columns as before.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, computed_field, model_validator

from roost.eval.datasets import DatasetInfo
from roost.eval.scoring import CategoryScore, EvalSummary, PairedComparison
from roost.eval.tasks import Sampling

SCHEMA_VERSION = 2

Severity = Literal["info", "warning", "error"]


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


RUN_ID_TIME = "%Y%m%dT%H%M%SZ"
"""How a run id begins: its UTC start, to the second (the store sorts and partitions by it)."""


def new_run_id() -> str:
    """A sortable, unique run id: UTC timestamp + 8 random hex digits."""
    return utcnow().strftime(RUN_ID_TIME) + "-" + uuid.uuid4().hex[:8]


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
    xgrammar_version: str = Field(default="", description="The xgrammar the serving image pins (docker); '' otherwise.")
    xgrammar_base_version: str = Field(
        default="", description="The xgrammar the serving image's base already had (docker): equal to xgrammar_version, "
                                "the image needed no patch; '' for none, unknown (an older record) or the process backend.")
    vllm_args: list[str] = Field(default_factory=list)
    prefect_flow_run_id: str = ""

    def comparable_key(self) -> tuple[str, ...]:
        """Runs with the same key are compared for regressions: model commit, image, vLLM version
        (the process backend has no image to tell two vLLM installs apart), args, host."""
        return (self.repo_id, self.commit, self.image_digest, self.vllm_version, " ".join(self.vllm_args), self.host)


class StartAttempt(BaseModel):
    """One attempt at starting vLLM (a cold load): how it ended and, if it failed, why."""

    model_config = ConfigDict(extra="ignore")

    attempt: int = 1
    ok: bool = False
    seconds: float | None = None
    port: int | None = None
    vllm_args: list[str] = Field(default_factory=list)
    failure_class: str = ""
    retryable: bool | None = None
    remediation: str = ""
    evidence: str = ""
    action: str = Field(default="", description="What roost did next: retry, retry on a new port, raise the pool, clear the compile cache, stop.")


class ServeObservation(BaseModel):
    """What the serving stage saw vLLM do, beside what the plan predicted."""

    predicted_kv_cache_tokens: int | None = None
    predicted_max_concurrency: float | None = None
    predicted_kv_pool_bytes: int | None = Field(
        default=None, description="The KV pool the plan expected vLLM to take: pinned (exact) or predicted from "
        "--gpu-memory-utilization (roost.plan.pool).")
    predicted_kv_pool_range: tuple[int, int] | None = Field(
        default=None, description="(low, high) bytes of a predicted pool; None when pinned (exact).")
    logged_kv_pool_gib: float | None = Field(
        default=None, description="The pool vLLM took, as it logged it ('Available KV cache memory' / 'Explicitly set').")
    logged_kv_cache_tokens: int | None = None
    logged_max_concurrency: float | None = None
    logged_block_size: int | None = None
    logged_weights_gib: float | None = Field(
        default=None, description="Weights in memory as vLLM's model runner measured them (\"Model loading took X GiB\").")
    logged_model_load_s: float | None = Field(
        default=None, description="Model init + weight load as vLLM's model runner timed it (\"... and Y seconds\").")
    attention_backends: list[str] = Field(
        default_factory=list, description="Attention backends vLLM picked, as its enum names (FLASH_ATTN...), in log order.")
    moe_backends: list[str] = Field(
        default_factory=list, description="MoE kernels vLLM picked, e.g. 'FlashInfer CUTLASS (Unquantized MoE)'.")
    explained_log_lines: list[dict[str, str]] = Field(
        default_factory=list, description="Informational lines vLLM logged, each {key, line, meaning} "
        "(roost.serve.vllm_log.EXPLAINED).")
    start_to_healthy_s: float | None = None
    load_s: float | None = Field(default=None, description="Start -> weights loaded.")
    compile_s: float | None = Field(default=None, description="Weights loaded -> engine ready (profile, compile, warm-up).")
    ready_s: float | None = Field(default=None, description="Engine ready -> /health 200 seen by roost.")
    health_detect_delay_s: float | None = Field(default=None, description="/health first 200 -> roost noticed.")
    attempts: list[StartAttempt] = Field(default_factory=list, description="One entry per start attempt.")
    restart_policy: str = Field(default="", description="The server's restart policy (containers; '' before it was kept).")
    host_check: list[str] = Field(
        default_factory=list, description="What the host check before the cold load found and did: memory available "
        "against the plan, servers stopped (restart policy moved), occupants stopped with --replace.")


class Distribution(BaseModel):
    """Summary statistics of one metric's sample (``count`` 0 and every statistic None when empty).

    Percentiles interpolate linearly between closest ranks (``roost.bench.metrics.percentile``).
    """

    count: int | None = Field(default=0, description="Sample size; None in records from before it was kept.")
    mean: float | None = None
    median: float | None = None
    min: float | None = None
    max: float | None = None
    p10: float | None = None
    p90: float | None = None
    p99: float | None = None


STATISTICS: tuple[str, ...] = ("count", "mean", "median", "min", "max", "p10", "p90", "p99")
"""The fields of a :class:`Distribution`, in the order the flat Parquet columns use."""


class BenchPoint(BaseModel):
    """One benchmark point (a prompt length or a concurrency level), aggregated over its requests.

    Per-request metrics (``ttft_s``, ``tpot_s``, ``itl_s``, ``e2el_s``, ``decode_tok_s``,
    ``prefill_tok_s``) pool the completed requests of every repeat (the decode timings only the
    measurable ones: ``unmeasurable``); per-step metrics (``output_tok_s``, ``request_rate``) have
    one value per repeat; ``peak_running`` and ``peak_waiting`` are the server's gauges
    (``metrics_delta``, named by ``roost.vllm.prometheus.step_delta``). Their definitions are in
    ``roost/catalogue.py``.
    """

    kind: Literal["prompt_length", "concurrency"]
    prompt_tokens: int
    output_tokens: int
    concurrency: int
    requests: int
    errors: int = 0
    skipped: bool = False
    skip_reason: str = ""
    prompt_tokens_target: int | None = Field(default=None, description="Asked-for prompt length (usage may differ if inexact).")
    repeats: int | None = None
    thinking: bool | None = Field(default=None, description="chat_template_kwargs.enable_thinking of the requests.")
    usage_missing: int = Field(default=0, description="Requests whose token count came from chunks, not usage.")
    unmeasurable: int = Field(default=0, description="Completed requests whose decode timing was unmeasurable "
                              "(roost/bench/validity.py): left out of tpot_s, itl_s and decode_tok_s.")
    unmeasurable_reasons: str = Field(default="", description="Why, counted: '1 above the roofline ceiling, "
                                      "1 delivered in a burst' ('' when none).")
    ttft_s: Distribution = Field(default_factory=Distribution)
    tpot_s: Distribution = Field(default_factory=Distribution)
    itl_s: Distribution = Field(default_factory=Distribution)
    e2el_s: Distribution = Field(default_factory=Distribution)
    decode_tok_s: Distribution = Field(default_factory=Distribution)
    prefill_tok_s: Distribution = Field(default_factory=Distribution, description="prompt tokens / TTFT per request.")
    output_tok_s: Distribution = Field(default_factory=Distribution, description="Aggregate tok/s, one value per repeat.")
    request_rate: Distribution = Field(default_factory=Distribution, description="Requests/s, one value per repeat.")
    metrics_delta: dict[str, float] = Field(default_factory=dict, description="/metrics counters after - before.")

    @model_validator(mode="before")
    @classmethod
    def _read_flat(cls, data: Any) -> Any:
        """Read a schema-1 point (flat ``<metric>_<statistic>`` fields) into the nested shape."""
        if isinstance(data, dict) and any(k in data for k in _FLAT_V1):
            return upgrade_point(data)
        return data

    @property
    def peak_running(self) -> float | None:
        """The most requests the server ran at once during the point (``metrics_delta``), if scraped."""
        return self.metrics_delta.get("num_requests_running_max")

    @property
    def peak_waiting(self) -> float | None:
        """The most requests queued at once during the point (``metrics_delta``), if scraped."""
        return self.metrics_delta.get("num_requests_waiting_max")

    @property
    def queue_time_s(self) -> float | None:
        """Mean time the point's requests waited for a running slot (``metrics_delta``), if scraped."""
        return self.metrics_delta.get("request_queue_time_s_mean")

    def queued(self, threshold_s: float) -> bool:
        """Did requests wait for a running slot: the waiting gauge seen above 0, or a mean queue time of
        at least ``threshold_s`` (``roost.catalogue.QUEUED_S``)?"""
        return (self.peak_waiting or 0) > 0 or (self.queue_time_s or 0.0) >= threshold_s

    @property
    def measured(self) -> bool:
        """Not skipped, and at least one request completed."""
        return not self.skipped and self.requests > self.errors


DISTRIBUTIONS: tuple[str, ...] = ("ttft_s", "tpot_s", "itl_s", "e2el_s", "decode_tok_s", "prefill_tok_s", "output_tok_s",
                                  "request_rate")
"""The :class:`BenchPoint` fields that are distributions."""

# Schema 1: the flat fields and the (metric, statistic) they held. ``output_tok_s`` and
# ``request_rate`` were the medians over repeats.
_FLAT_V1: dict[str, tuple[str, str]] = {
    **{f"{m}_{s}": (m, s) for m in ("ttft_s",) for s in ("median", "min", "max", "p90", "p99")},
    **{f"{m}_{s}": (m, s) for m in ("tpot_s", "itl_s", "e2el_s") for s in ("median", "p90", "p99")},
    **{f"decode_tok_s_{s}": ("decode_tok_s", s) for s in ("median", "min", "max", "p10")},
    "output_tok_s_min": ("output_tok_s", "min"),
    "output_tok_s_max": ("output_tok_s", "max"),
}
_SCALAR_V1 = {"output_tok_s": "output_tok_s", "request_rate": "request_rate"}


def upgrade_point(data: dict[str, Any]) -> dict[str, Any]:
    """A schema-1 point dict in the schema-2 shape (statistics nested per metric)."""
    out: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for key, value in data.items():
        if key in _FLAT_V1:
            metric, stat = _FLAT_V1[key]
            nested.setdefault(metric, {})[stat] = value
        elif key in _SCALAR_V1 and not isinstance(value, dict):
            nested.setdefault(_SCALAR_V1[key], {})["median"] = value
        else:
            out[key] = value
    for metric, stats in nested.items():
        stats.setdefault("count", None)  # schema 1 kept no sample sizes
        existing = out.get(metric)
        out[metric] = {**stats, **existing} if isinstance(existing, dict) else stats
    return out


class PointSpeedup(BaseModel):
    """One benchmark point of the MTP A/B (``roost.bench.mtp``): its rate with and without speculative
    decoding on the same image and commit."""

    kind: Literal["prompt_length", "concurrency"]
    prompt_tokens: int = Field(description="The asked-for prompt length (what pairs the two runs' points).")
    concurrency: int
    metric: Literal["decode_tok_s", "output_tok_s"] = Field(
        description="decode_tok_s (per-user decode) at prompt-length points, output_tok_s (aggregate) at concurrency points.")
    with_spec: float | None = None
    without_spec: float | None = None
    acceptance_rate: float | None = Field(default=None, description="Accepted / draft tokens during the point (0..1).")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def speedup(self) -> float | None:
        """with / without (1.41 is +41%); None unless both runs measured a positive rate."""
        a, b = self.with_spec, self.without_spec
        if a is None or b is None or b <= 0 or not (math.isfinite(a) and math.isfinite(b)):
            return None
        return a / b


class SpecAcceptance(BaseModel):
    """Draft acceptance of a speculative run, overall and per draft position (vLLM's definitions)."""

    source: Literal["metrics", "log"] = Field(description="/metrics counters, or the engine's SpecDecoding log lines.")
    drafts: float
    draft_tokens: float
    accepted_tokens: float
    rate: float | None = Field(default=None, description="Accepted / draft tokens (0..1).")
    mean_acceptance_length: float | None = Field(default=None, description="1 + accepted / drafts (bonus token included).")
    per_position: list[float] = Field(default_factory=list, description="Accepted at draft position i / drafts.")


class MtpAB(BaseModel):
    """The MTP A/B of one run: the speculative config switched off, the points paired, the acceptance."""

    speculative_config: str = Field(description="The --speculative-config value the run served with.")
    baseline_vllm_args: list[str] = Field(default_factory=list, description="The arguments of the run without it.")
    points: list[PointSpeedup] = Field(default_factory=list)
    acceptance: SpecAcceptance | None = None
    baseline_points: list[BenchPoint] = Field(default_factory=list, description="The benchmark without speculative decoding.")
    baseline_start_to_healthy_s: float | None = None


class VisionProbe(BaseModel):
    """One chat request with an image (``roost.serve.vision``), sent after the health-wait to a server
    whose checkpoint ships a vision tower."""

    ok: bool
    latency_s: float | None = None
    status_code: int | None = None
    image_bytes: int = Field(default=0, description="Size of the PNG sent (as a data URL).")
    completion_tokens: int | None = None
    error: str = ""


class ProbeResult(BaseModel):
    """One capability probe (``roost.serve.probes``: reasoning, tool, tool-auto, structured), sent after the
    health-wait: a chat request whose answer must show the server does what the recipe's clients ask."""

    name: str
    ok: bool
    latency_s: float | None = None
    status_code: int | None = None
    failure_class: str = Field(default="", description="'' when ok; e.g. reasoning_probe_failed.")
    error: str = Field(default="", description="Why it failed: scrubbed of the API key, at most 500 characters.")
    detail: str = Field(default="", description="What came back, briefly: the tool and its argument keys, the "
                                                "reasoning's length, the structured answer's keys.")


class OtherModelScore(BaseModel):
    """Another stored model's latest score on the same evaluation (the recipe's "Ornith vs Qwen3.8")."""

    repo_id: str
    run_id: str
    host: str
    accuracy: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int = 0
    per_category: dict[str, CategoryScore] = Field(default_factory=dict)


class EvalRecord(BaseModel):
    """One accuracy evaluation of a run (``roost.eval``): settings, scores, and the paired comparison
    with the baseline. The per-question answers are in the store's ``eval_answers`` table."""

    task: str
    status: Literal["completed", "failed"] = "completed"
    error: str = ""
    dataset: DatasetInfo
    sampling: Sampling
    seed: int = 0
    limit: int | None = None
    per_category: int | None = None
    sample_digest: str = Field(default="", description="Digest of the sample's question ids: runs pair on it.")
    summary: EvalSummary
    elapsed_s: float = 0.0
    resumed: int = 0
    baseline_run_id: str = Field(default="", description="The earlier run the answers were paired with ('' none).")
    baseline: OtherModelScore | None = Field(default=None, description="That run's own scores on the same sample.")
    comparison: PairedComparison | None = None
    others: list[OtherModelScore] = Field(default_factory=list)

    def key(self) -> tuple[str, str, str, str, str]:
        """What must match for two evaluations to be paired: task, dataset, sample, sampling."""
        return (self.task, self.dataset.source, self.dataset.revision, self.sample_digest,
                json.dumps(self.sampling.answer_fields(), sort_keys=True))


class RunRecord(BaseModel):
    """Everything one pipeline run established. Written to ``results/`` and rendered as the report.

    ``audit`` and ``plan`` are the documents ``roost audit --json`` and ``roost plan --json`` print
    for the checkpoint and host of the run (the CLI's JSON contract: stable keys).
    """

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
    mtp_ab: MtpAB | None = Field(default=None, description="With and without --speculative-config (roost.bench.mtp).")
    vision_probe: VisionProbe | None = Field(default=None, description="The image request after the health-wait.")
    probes: list[ProbeResult] = Field(default_factory=list, description="The capability probes after the "
                                      "health-wait (reasoning split, named tool call, structured output).")
    evals: list[EvalRecord] = Field(default_factory=list, description="Accuracy evaluations (roost.eval), in order.")
    report_path: str = ""

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return upgrade_record(data) if isinstance(data, dict) else data

    @property
    def accuracy_regressions(self) -> list[EvalRecord]:
        """Evaluations significantly worse than the baseline run on the same questions (McNemar)."""
        return [e for e in self.evals if e.comparison is not None and e.comparison.significant
                and e.comparison.direction == "worse"]


def upgrade_record(data: dict[str, Any]) -> dict[str, Any]:
    """A stored record (any schema version this release knows) in the current shape.

    Schema 1 -> 2: points' flat statistics nest (see :func:`upgrade_point`); start attempts become
    :class:`StartAttempt` (an attempt's old ``outcome: healthy`` means ``ok``).
    """
    version = data.get("schema_version", 1)
    if not isinstance(version, int) or version > SCHEMA_VERSION:
        return data  # a newer release's record: validation says which field it does not know
    if version >= SCHEMA_VERSION:
        return data
    out = dict(data)
    out["points"] = [upgrade_point(p) if isinstance(p, dict) else p for p in data.get("points") or []]
    serve = data.get("serve")
    if isinstance(serve, dict):
        attempts = []
        for i, a in enumerate(serve.get("attempts") or []):
            if isinstance(a, dict):
                a = {**a, "attempt": a.get("attempt", i + 1),
                     "ok": bool(a.get("ok", a.get("outcome") == "healthy"))}
            attempts.append(a)
        out["serve"] = {**serve, "attempts": attempts}
    out["schema_version"] = SCHEMA_VERSION
    return out
