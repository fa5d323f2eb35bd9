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

The audit and plan documents read back typed (:class:`AuditSnapshot`, :class:`PlanSnapshot`) and are
written back exactly as they were stored, so that change needed no new schema version; nor did
``RunMeta.prefect_ui_url`` (an older record reads it as ``""``: no server known to hold its flow run).
"""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidatorFunctionWrapHandler,
    computed_field,
    model_serializer,
    model_validator,
)

# re-exported: declared apart, so that an audit loads no run record (roost audit's start-up)
from roost.checkpoint.findings import Finding as Finding
from roost.checkpoint.findings import Severity as Severity
from roost.eval_record import EvalRecord as EvalRecord
from roost.eval_record import OtherModelScore as OtherModelScore
from roost.failures import classify

SCHEMA_VERSION = 2


def utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


RUN_ID_TIME = "%Y%m%dT%H%M%SZ"
"""How a run id begins: its UTC start, to the second (the store sorts and partitions by it)."""


def new_run_id() -> str:
    """A sortable, unique run id: UTC timestamp + 8 random hex digits."""
    return utcnow().strftime(RUN_ID_TIME) + "-" + uuid.uuid4().hex[:8]


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
    prefect_ui_url: str = Field(
        default="", description="The Prefect UI of the server that holds the flow run (PREFECT_UI_URL, no trailing "
        "slash): reports link the run only from that UI. '' when none lasts (roost run's temporary server) or "
        "the record is older than the field. Runs are linked only when the workers record the same UI address "
        "as the report is made with: another address of the same server (an alias, an IP) is not recognised, "
        "so the run gets no link, never a broken one.")

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
        default=None, description="The pool vLLM took, as it logged it (its KV_POOL_GPU / KV_POOL_CPU line, "
        "roost.vllm.wordings).")
    logged_kv_cache_tokens: int | None = None
    logged_max_concurrency: float | None = None
    logged_block_size: int | None = None
    logged_weights_gib: float | None = Field(
        default=None, description="Weights in memory as vLLM's model runner measured them (the GiB of its "
        "MODEL_LOADED line, roost.vllm.wordings).")
    logged_model_load_s: float | None = Field(
        default=None, description="Model init + weight load as vLLM's model runner timed it (the seconds of its "
        "MODEL_LOADED line).")
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
    (``metrics_delta``, named by ``roost.vllm.server_metrics.step_delta``). Their definitions are in
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

    def value(self, metric: str, statistic: str | None = None) -> float | None:
        """One number of the point by its catalogue name: a statistic of a distribution (the median
        when none is named), or a server gauge of ``metrics_delta`` (``peak_running``...)."""
        if metric in DISTRIBUTIONS:
            stat: float | None = getattr(getattr(self, metric), statistic or "median")
            return stat
        return self.metrics_delta.get(metric)


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


class Usage(BaseModel):
    """Requests and tokens, as a benchmark counted them or as the gateway metered them."""

    requests: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


class GatewayPass(BaseModel):
    """The benchmark again through the metering gateway that fronts a kept server (``flows/stages/gateway_door.py``):
    what clients get, gateway hop included, with a key of roost's own (kind ``app``) issued for the run."""

    url: str = Field(description="The gateway as the benchmark reached it (no credentials).")
    key_name: str = Field(default="", description="The run's benchmark key (revoked at the run's end; never the key).")
    status: Literal["measured", "failed", "skipped"] = "measured"
    note: str = Field(default="", description="Why it was skipped or failed; what else to know.")
    points: list[BenchPoint] = Field(default_factory=list, description="The sweep through the gateway (the record's "
                                     "``points`` are the same sweep sent to vLLM directly).")
    counted: Usage | None = Field(default=None, description="What the benchmark sent and received, by its own count.")
    metered: Usage | None = Field(default=None, description="What the gateway's usage database holds for the key.")


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


class Document(BaseModel):
    """A JSON document a stage produced, kept as it was written, with the fields roost reads back typed.

    The keys and their order are the writer's: a key the model does not declare stays as an extra
    field (an older release's audit had other keys), and a declared field the document did not have
    is left out of the dump, not written as its default, so a stored record dumps byte for byte as it
    was read. Falsy when empty (a run that failed before its audit).
    """

    model_config = ConfigDict(extra="allow")

    _keys: list[str] = PrivateAttr(default_factory=list)

    @model_validator(mode="wrap")
    @classmethod
    def _keep_order(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        doc = handler(data)
        if isinstance(data, Mapping) and isinstance(doc, Document):
            doc._keys = [str(k) for k in data]
        return doc

    @model_serializer(mode="wrap")
    def _as_written(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out: dict[str, Any] = handler(self)
        return {k: out[k] for k in self.keys() if k in out}

    def keys(self) -> list[str]:
        """The document's keys in the writer's order, then any field set since."""
        present = set(self.model_fields_set) | set(self.__pydantic_extra__ or {})
        return [*self._keys, *(k for k in type(self).model_fields if k in present and k not in self._keys)]

    def __getitem__(self, key: str) -> Any:
        """The value at ``key``, typed where the model declares it (the document read as a mapping)."""
        if key not in self.keys():
            raise KeyError(key)
        return getattr(self, key)

    def __or__(self, other: Mapping[str, Any]) -> Self:
        """This document with ``other``'s keys added or replaced, as ``dict | dict`` merges."""
        return self.model_validate({**self.model_dump(), **other})

    def __bool__(self) -> bool:
        return bool(self.keys())


class AuditSnapshot(Document):
    """The audit of the run's checkpoint for its host, as ``roost audit --json`` prints it
    (``roost.plan.report.AuditReport.to_json``); what the report and the audit flow read is typed."""

    findings: list[Finding] = Field(default_factory=list, description="Every finding, errors first or not.")
    weight_bytes_by_class: dict[str, int] | None = Field(
        default=None, description="Weight bytes per tensor class (language, vision, mtp...); None in an older record.")


class FitSnapshot(Document):
    """Weights + KV pool + headroom against the host's budget (``roost.plan.fit.FitCheck``), in bytes."""

    weight_bytes: int | float | None = None
    kv_cache_memory_bytes: int | float | None = None
    headroom_bytes: int | float | None = None
    total_bytes: int | float | None = None
    usable_bytes: int | float | None = None
    free_bytes: int | float | None = None
    fits: bool | None = None


class PlanSnapshot(Document):
    """The plan of the run, as ``roost plan --json`` prints it (``roost.plan.preflight.PlanReport.to_json``);
    what the report reads is typed."""

    gpu_memory_utilization: float | None = Field(
        default=None, description="The share of memory the pool was predicted from; None for a pinned pool.")
    fit: FitSnapshot | None = None


_SNAPSHOTS: dict[str, type[Document]] = {"audit": AuditSnapshot, "plan": PlanSnapshot}


def _as_snapshot(name: str, value: Any) -> Any:
    """``value`` as the field ``name`` holds it: the audit's and the plan's JSON as their snapshots."""
    kind = _SNAPSHOTS.get(name)
    return kind.model_validate(value) if kind is not None and isinstance(value, Mapping) else value


class RunRecord(BaseModel):
    """Everything one pipeline run established. Written to ``results/`` and rendered as the report.

    ``audit`` and ``plan`` are the documents ``roost audit --json`` and ``roost plan --json`` print
    for the checkpoint and host of the run (the CLI's JSON contract: stable keys), kept as snapshots:
    what roost reads back is typed, the rest rides along as written. A stage may assign the document
    itself (``record.plan = plan.to_json()``): it becomes the snapshot.
    """

    schema_version: int = SCHEMA_VERSION
    meta: RunMeta
    status: Literal["completed", "failed"] = "completed"
    failed_stage: str = ""
    failure_class: str = ""
    failure_message: str = ""
    remediation: str = ""
    stages: list[StageTiming] = Field(default_factory=list)
    audit: AuditSnapshot = Field(default_factory=AuditSnapshot, description="The audit's JSON (roost audit --json).")
    plan: PlanSnapshot = Field(default_factory=PlanSnapshot, description="The plan's JSON (roost plan --json).")
    serve: ServeObservation = Field(default_factory=ServeObservation)
    points: list[BenchPoint] = Field(default_factory=list)
    decode_ceiling_tok_s: float | None = None
    mtp_ab: MtpAB | None = Field(default=None, description="With and without --speculative-config (roost.bench.mtp).")
    vision_probe: VisionProbe | None = Field(default=None, description="The image request after the health-wait.")
    probes: list[ProbeResult] = Field(default_factory=list, description="The capability probes after the "
                                      "health-wait (reasoning split, named tool call, structured output).")
    evals: list[EvalRecord] = Field(default_factory=list, description="Accuracy evaluations (roost.eval), in order.")
    gateway: GatewayPass | None = Field(default=None, description="The sweep through the gateway (kept servers).")
    report_path: str = ""
    openwebui: str = Field(default="", description="What the gateway stage did to Open WebUI's default model "
                           "(roost.gateway.openwebui): 'default NAME set (...)', 'default NAME already (...)', "
                           "'failed: ...'; empty: the host names no Open WebUI (or the server was not kept).")

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        return upgrade_record(data) if isinstance(data, dict) else data

    def __setattr__(self, name: str, value: Any) -> None:
        """``record.audit = report.to_json()`` keeps the document as its snapshot (as validation would)."""
        super().__setattr__(name, _as_snapshot(name, value))

    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> Self:
        """A copy (``update`` is not validated, as pydantic's; the audit's and the plan's JSON become
        their snapshots)."""
        fixed = {k: _as_snapshot(k, v) for k, v in update.items()} if update else update
        return super().model_copy(update=fixed, deep=deep)

    @property
    def accuracy_regressions(self) -> list[EvalRecord]:
        """Evaluations significantly worse than the baseline run on the same questions (McNemar)."""
        return [e for e in self.evals if e.comparison is not None and e.comparison.significant
                and e.comparison.direction == "worse"]

    def fail(self, stage: str, exc: BaseException) -> None:
        """The run failed at ``stage`` with ``exc`` (its class and remediation when roost classified it:
        ``roost.failures.classify``), unless an earlier failure is already the run's."""
        if self.status == "failed":
            return
        self.status, self.failed_stage = "failed", stage
        self.failure_message = str(exc) or type(exc).__name__
        self.failure_class, self.remediation = classify(stage, exc)

    def reclassify(self, failure_class: str, remediation: str, message: str) -> None:
        """What stopped the failed run, once known better than its first failure said (the cold load's
        verdict over all its attempts); the stage it failed at stays."""
        self.failure_class, self.remediation, self.failure_message = failure_class, remediation, message

    def clear_failure(self) -> None:
        """A retry succeeded: what an earlier attempt failed with no longer describes the run."""
        self.status, self.failed_stage, self.failure_message = "completed", "", ""
        self.failure_class, self.remediation = "", ""


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


NotifyKind = Literal["regression", "failure", "run"]
"""What a run's notification says: it regressed, it failed, or it ran."""


class NotifyResult(BaseModel):
    """What happened to a run's notification (``roost.notify``). Stored in the results; never holds a secret."""

    status: Literal["sent", "skipped", "failed"]
    kind: NotifyKind | None = None
    transport: Literal["bot", "webhook"] | None = None
    channel: str = ""
    message_ts: str = ""
    file_id: str = ""
    retries: int = Field(default=0, description="Retries slack-sdk made (429 / connection / 5xx).")
    detail: str = Field(default="", description="Why it was skipped or what failed (secrets redacted).")
    attempted_at: dt.datetime = Field(default_factory=utcnow)
