# ruff: noqa: RUF001, RUF002  (typographic characters in user-facing text are deliberate)
"""Every number roost reports, defined once: its name, label, unit, which way is better, and formula.

The report, the Prefect artifacts, the Slack message, the CLI summaries and the regression check
all read these definitions; none of them names or formats a metric on its own. The formulas are
computed in ``roost/bench/metrics.py`` (per request and per step, from what the client recorded)
and ``roost/headline.py`` (per run).

Per request (a streamed chat completion; names follow ``vllm bench serve``)
--------------------------------------------------------------------------
=================  ==========================================================================
``ttft_s``         time to first token: request sent -> first token chunk.
``tpot_s``         time per output token after the first: ``(t_last - t_first) / (completion_tokens - 1)``.
``itl_s``          inter-token latency: every gap between consecutive token chunks (a chunk carrying
                   several tokens, as with speculative decoding, is one gap).
``e2el_s``         end-to-end latency: request sent -> last token chunk.
``decode_tok_s``   per-request (per-user) decode rate, ``1 / tpot_s``: what the recipes publish.
``prefill_tok_s``  prefill rate, ``prompt_tokens / ttft_s``: what the recipes quote for prompt
                   processing (~4,975 tok/s around an 8K prompt, falling to ~2,303 at 250K).
                   TTFT also holds the first decode step and any queueing, so at concurrency
                   it reads lower than the engine's prefill.
=================  ==========================================================================

A completed request whose decode timing is **unmeasurable** (its decode rate exceeds the
roofline ceiling, or its tokens arrived in a burst: ``roost/bench/validity.py`` has the rule and
its thresholds) keeps its row but is left out of ``tpot_s``, ``itl_s`` and ``decode_tok_s``;
each point counts them (``unmeasurable_requests``).

Per point, from the server's ``/metrics`` (scraped before and after, polled during)
-----------------------------------------------------------------------------------
============================  ===============================================================
``num_requests_running_max``  the most requests vLLM ran at once during the point (peak of
                              ``vllm:num_requests_running``); ``--max-num-seqs`` caps it.
``num_requests_waiting_max``  the most requests queued at once (peak of
                              ``vllm:num_requests_waiting``): above 0, users past the cap waited.
============================  ===============================================================

Per step (the requests sent together at one point, one value per repeat)
-----------------------------------------------------------------------
=================  ==========================================================================
``output_tok_s``   aggregate output tok/s: completion tokens of the completed requests / wall time
                   of the step (first send -> last completion).
``request_rate``   completed requests / wall time of the step.
=================  ==========================================================================

Per run
-------
======================== ======================================================================
``decode_tok_s@prompt=N`` the median decode rate of the prompt-length point of N tokens; the
                         headline uses the point nearest ``REFERENCE_PROMPT_TOKENS`` (2,048, the
                         recipes' headline prompt; ties go to the shorter prompt).
``ttft_s@prompt=N``      the median TTFT of that point.
``output_tok_s@concurrency=C`` the median aggregate output rate at C concurrent users.
``peak_output_tok_s``    the highest aggregate output rate over the concurrency sweep.
``knee_concurrency``     **the knee**: the lowest concurrency whose aggregate output rate reaches
                         ``KNEE_FRACTION`` (90 %) of the peak; more users than that buy less than
                         10 % more throughput.
``decode_ceiling_tok_s`` the roofline: host memory bandwidth / weight bytes one decode step reads.
``decode_pct_of_ceiling`` the headline decode rate as a percentage of the ceiling.
``kv_cache_tokens``      vLLM's logged KV cache size in tokens (``roost.vllm.wordings.KV_CACHE_SIZE``).
``max_concurrency``      vLLM's logged concurrency at L tokens per request (``roost.vllm.wordings.MAX_CONCURRENCY``).
``start_to_healthy_s``   server start -> the first completion answered (cold start).
``error_requests``       benchmark requests that failed.
``mtp_speedup@prompt=N``  the MTP A/B: median decode rate with --speculative-config / without, same
                         image and commit, N-token prompt, one user (``@concurrency=C``: aggregate
                         output rates); the headline is the point nearest 2,048 tokens.
``spec_acceptance_rate`` accepted / draft tokens over the speculative run, in %.
``vision_probe_latency_s`` one chat request with an image, after the health-wait (vision towers).
``probe_latency_s``      one capability probe (reasoning split, named tool call, JSON-schema output),
                         after the health-wait: request sent -> whole answer, per probe.
``unmeasurable_requests`` completed requests whose decode timing was unmeasurable (see above).
``gateway_added_ttft_ms``  the kept server's sweep through the metering gateway (a key of roost's own)
                         beside the same sweep direct: median TTFT through it minus direct, per point
                         (``gateway_added_ttft_p99_ms``: the p99s), and ``gateway_throughput_ratio``,
                         aggregate output tok/s through it / direct.
======================== ======================================================================

Accuracy (``roost eval``, the pipeline's evaluations; ``roost/eval/scoring.py``)
-------------------------------------------------------------------------------
========================== ====================================================================
``accuracy``               correct / n over the whole sample; unparsed and truncated answers count
                           as wrong and are counted apart (``unparsed``, ``truncated``).
``accuracy_ci95``          the 95 % Wilson score interval of the accuracy.
``mean_output_tokens``     completion tokens (reasoning included, from ``usage``) / n.
``truncation_rate``        truncated / n, in %, with its 95 % Wilson interval (``unparsed_rate``: the
                           same of the unparsed answers).
``output_tokens``          one answer's completion tokens: mean, median and p90 over the sample.
``accuracy_paired_change`` correct now minus correct in the baseline over the questions both runs
                           answered, in points; a regression only when McNemar's exact test on
                           the discordant pairs gives p < 0.05.
========================== ====================================================================

Percentiles interpolate linearly between closest ranks (``numpy.percentile``'s default, which
``vllm bench serve`` uses); the median is p50. Only completed requests enter the distributions;
failed ones are counted in ``errors``.

Where other tools name or define things differently
----------------------------------------------------
=====================  ===========================  ======================================
roost / vLLM           aiperf                       guidellm
=====================  ===========================  ======================================
``ttft``               ``time_to_first_token``      ``time_to_first_token_ms``
``tpot``               ``inter_token_latency``      ``inter_token_latency_ms`` (guidellm's
                       (aiperf's ITL is this         ``time_per_output_token_ms`` is
                       per-request average)          different: it *includes* the first
                                                     token, ``e2el / completion_tokens``)
``itl`` (per gap)      ``inter_chunk_latency``      not kept (only first/last token times)
``e2el``               ``request_latency``          ``request_latency`` (seconds)
decode tok/s           ``output_token_throughput_   no name; ``1000 / inter_token_latency_ms``
                       per_user``
``output_throughput``  ``output_token_throughput``  ``output_tokens_per_second``
``request_throughput`` ``request_throughput``       ``requests_per_second``
=====================  ===========================  ======================================
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from enum import StrEnum
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, model_validator

from roost.vllm import wordings as W

REFERENCE_PROMPT_TOKENS = 2048
"""The headline prompt length: the recipes quote decode and TTFT at a 2K-token prompt."""

KNEE_FRACTION = 0.9
"""The knee is the lowest concurrency reaching this fraction of the peak aggregate output rate."""


class Direction(StrEnum):
    HIGHER = "higher_is_better"
    LOWER = "lower_is_better"


class Metric(BaseModel):
    """One metric: what it is called, its unit, which way is better, and what it measures."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(description="Stable key: column names, comparison keys, JSON keys.")
    label: str = Field(description="What people read: report rows, Slack, the CLI.")
    unit: str
    direction: Direction | None = Field(description="None: reported, never judged better or worse.")
    definition: str
    abs_floor: float = Field(default=0.0, description="Smallest absolute move that can count as a change.")

    def at_prompt(self, prompt_tokens: int) -> Metric:
        """This metric at one prompt-length point: ``decode_tok_s@prompt=2048``."""
        return self.model_copy(update={
            "name": f"{self.name}@prompt={prompt_tokens}",
            "label": f"{self.label} @ {prompt_tokens:,}-token prompt",
            "definition": f"{self.definition} (median, {prompt_tokens:,}-token prompt, one user)",
        })

    def at_concurrency(self, concurrency: int) -> Metric:
        """This metric at one concurrency level: ``output_tok_s@concurrency=16``."""
        return self.model_copy(update={
            "name": f"{self.name}@concurrency={concurrency}",
            "label": f"{self.label} @ {concurrency} concurrent",
            "definition": f"{self.definition} (median over repeats, {concurrency} concurrent users)",
        })

    @property
    def title(self) -> str:
        """The label with a capital first letter: a table header, the start of a sentence."""
        return self.label[:1].upper() + self.label[1:]

    def format(self, value: float | None) -> str:
        """``value`` in this metric's unit, as every output prints it."""
        return fmt_value(value, self.unit)


H, L = Direction.HIGHER, Direction.LOWER

TTFT = Metric(name="ttft_s", label="TTFT", unit="s", direction=L,
              definition="request sent -> first token chunk")
TPOT = Metric(name="tpot_s", label="TPOT", unit="s", direction=L,
              definition="(t_last - t_first) / (completion_tokens - 1): time per output token after the first")
ITL = Metric(name="itl_s", label="ITL", unit="s", direction=L,
             definition="gap between consecutive token chunks of a request")
E2EL = Metric(name="e2el_s", label="end-to-end latency", unit="s", direction=L,
              definition="request sent -> last token chunk")
DECODE = Metric(name="decode_tok_s", label="decode tok/s", unit="tok/s", direction=H,
                definition="(completion_tokens - 1) / (t_last - t_first) = 1 / TPOT: per-user decode rate")
PREFILL = Metric(name="prefill_tok_s", label="prefill tok/s", unit="tok/s", direction=H,
                 definition="prompt_tokens / TTFT: prompt tokens processed per second up to the first token")
OUTPUT_THROUGHPUT = Metric(name="output_tok_s", label="aggregate output tok/s", unit="tok/s", direction=H,
                           definition="completion tokens of a step's completed requests / wall time of the step")
REQUEST_RATE = Metric(name="request_rate", label="requests/s", unit="req/s", direction=H,
                      definition="completed requests of a step / wall time of the step")
PEAK_OUTPUT = Metric(name="peak_output_tok_s", label="peak aggregate output tok/s", unit="tok/s", direction=H,
                     definition="the highest aggregate output rate over the concurrency sweep")
KNEE = Metric(name="knee_concurrency", label=f"knee (≥{KNEE_FRACTION:.0%} of peak)", unit="concurrent",
              direction=None,
              definition=f"the lowest concurrency whose aggregate output rate reaches {KNEE_FRACTION:.0%} of the peak")
DECODE_CEILING = Metric(name="decode_ceiling_tok_s", label="roofline decode ceiling", unit="tok/s", direction=None,
                        definition="host memory bandwidth / weight bytes one decode step reads")
DECODE_PCT_OF_CEILING = Metric(name="decode_pct_of_ceiling", label="decode % of roofline ceiling", unit="%",
                               direction=None, definition="headline decode rate / roofline ceiling x 100")
KV_CACHE_TOKENS = Metric(name="kv_cache_tokens", label="KV cache (vLLM log)", unit="tokens", direction=None,
                         definition=f"vLLM's logged '{W.KV_CACHE_SIZE.line(' N tokens')}'")
MAX_CONCURRENCY = Metric(name="max_concurrency", label="max concurrency (vLLM log)", unit="x", direction=None,
                         definition="vLLM's logged full-length requests the KV cache holds at once")
START_TO_HEALTHY = Metric(name="start_to_healthy_s", label="cold start to /health", unit="s", direction=L,
                          definition="server start -> the first completion answered")
ERROR_REQUESTS = Metric(name="error_requests", label="failed benchmark requests", unit="requests", direction=L,
                        definition="benchmark requests that failed (HTTP error, cut stream, time-out)",
                        abs_floor=0.5)
UNMEASURABLE = Metric(name="unmeasurable_requests", label="unmeasurable decode timings", unit="requests",
                      direction=None,
                      definition="completed requests whose decode rate exceeded the roofline ceiling or whose tokens "
                                 "arrived in a burst: left out of TPOT, ITL and decode tok/s")
PEAK_RUNNING = Metric(name="num_requests_running_max", label="peak running", unit="requests", direction=None,
                      definition="the most requests vLLM ran at once during the point (vllm:num_requests_running)")
PEAK_WAITING = Metric(name="num_requests_waiting_max", label="peak waiting", unit="requests", direction=None,
                      definition="the most requests queued at once during the point (vllm:num_requests_waiting)")
QUEUE_TIME = Metric(name="request_queue_time_s_mean", label="mean queue time", unit="s", direction=None,
                    definition="mean time a request of the point waited for a running slot (vLLM's "
                               "vllm:request_queue_time_seconds histogram: sum / count over the point); counted, "
                               "not sampled, so a queue shorter than the gauge poll still shows")

QUEUED_S = 0.01
"""A point *queued* when its requests waited this long on average for a running slot (past
``--max-num-seqs`` or the KV pool), or the waiting gauge was seen above 0; scheduling alone takes
well under a millisecond."""

PER_REQUEST: tuple[Metric, ...] = (TTFT, TPOT, ITL, E2EL, DECODE, PREFILL)
PER_STEP: tuple[Metric, ...] = (OUTPUT_THROUGHPUT, REQUEST_RATE)
PER_POINT_SERVER: tuple[Metric, ...] = (PEAK_RUNNING, PEAK_WAITING, QUEUE_TIME)
CATALOGUE: dict[str, Metric] = {m.name: m for m in (
    *PER_REQUEST, *PER_STEP, *PER_POINT_SERVER, PEAK_OUTPUT, KNEE, DECODE_CEILING, DECODE_PCT_OF_CEILING,
    KV_CACHE_TOKENS, MAX_CONCURRENCY, START_TO_HEALTHY, ERROR_REQUESTS, UNMEASURABLE)}

# The MTP A/B (roost/bench/mtp.py): the same image and commit with and without --speculative-config.
MTP_SPEEDUP = Metric(name="mtp_speedup", label="MTP speed-up", unit="x", direction=H,
                     definition="rate with --speculative-config / rate without, same image and commit: per-user "
                                "decode tok/s at a prompt length (one user), aggregate output tok/s at a concurrency")
SPEC_ACCEPTANCE = Metric(name="spec_acceptance_rate", label="draft acceptance", unit="%", direction=H,
                         definition="accepted / draft tokens x 100 over the speculative run (vllm:spec_decode_* "
                                    "counters, else the engine's SpecDecoding log lines)", abs_floor=1.0)
VISION_PROBE_LATENCY = Metric(name="vision_probe_latency_s", label="vision probe", unit="s", direction=None,
                              definition="one chat request with a 64x64 PNG image_url: sent -> answer")
PROBE_LATENCY = Metric(name="probe_latency_s", label="probe", unit="s", direction=None,
                       definition="one capability probe's chat request (roost.serve.probes: reasoning split, named "
                                  "tool call, JSON-schema output): sent -> whole answer")
CATALOGUE |= {m.name: m for m in (MTP_SPEEDUP, SPEC_ACCEPTANCE, VISION_PROBE_LATENCY, PROBE_LATENCY)}

# The gateway hop (roost/bench/gateway_hop.py): the same sweep sent to vLLM directly and through the gateway.
GATEWAY_ADDED_TTFT = Metric(name="gateway_added_ttft_ms", label="added by the gateway (TTFT p50)", unit="ms",
                            direction=L, definition="median TTFT through the gateway - median TTFT sent to vLLM "
                            "directly, same point (prompt length and concurrency), same run")
GATEWAY_ADDED_TTFT_P99 = Metric(name="gateway_added_ttft_p99_ms", label="added by the gateway (TTFT p99)", unit="ms",
                                direction=L, definition="p99 TTFT through the gateway - p99 TTFT direct, same point")
GATEWAY_THROUGHPUT_RATIO = Metric(name="gateway_throughput_ratio", label="throughput through the gateway", unit="x",
                                  direction=H, definition="median aggregate output tok/s through the gateway / the "
                                  "same direct, same point (1.0: the hop costs no throughput)")
CATALOGUE |= {m.name: m for m in (GATEWAY_ADDED_TTFT, GATEWAY_ADDED_TTFT_P99, GATEWAY_THROUGHPUT_RATIO)}

# Accuracy (roost/eval/scoring.py computes them; stored as fractions, printed as percentages)
ACCURACY = Metric(name="accuracy", label="accuracy", unit="%", direction=H,
                  definition="correct / n over every question of the sample (unparsed and truncated count as wrong)")
ACCURACY_CI = Metric(name="accuracy_ci95", label="95% interval", unit="%", direction=None,
                     definition="Wilson score interval of the accuracy, 95 %")
UNPARSED = Metric(name="unparsed", label="unparsed answers", unit="questions", direction=L,
                  definition="answers in which the task's extraction found no answer (finished, not truncated)")
TRUNCATED = Metric(name="truncated", label="truncated answers", unit="questions", direction=L,
                   definition="answers cut by max_tokens (finish_reason == 'length'), whatever they contain")
MEAN_OUTPUT_TOKENS = Metric(name="mean_output_tokens", label="mean output tokens", unit="tokens", direction=None,
                            definition="usage.completion_tokens (reasoning included) summed / n")
ACCURACY_CHANGE = Metric(name="accuracy_paired_change", label="paired accuracy change", unit="points", direction=H,
                         definition="(correct now - correct in the baseline) / paired questions, in points; judged "
                         "by McNemar's exact test on the discordant pairs (p < 0.05)")
CATALOGUE |= {m.name: m for m in (ACCURACY, ACCURACY_CI, UNPARSED, TRUNCATED, MEAN_OUTPUT_TOKENS, ACCURACY_CHANGE)}

# Two models side by side (roost/report/compare.py: the recipe's comparison with the model it replaced)
TRUNCATION_RATE = Metric(name="truncation_rate", label="truncated", unit="%", direction=L,
                         definition="truncated answers / n x 100, with its 95 % Wilson interval")
UNPARSED_RATE = Metric(name="unparsed_rate", label="unparsed", unit="%", direction=L,
                       definition="unparsed answers / n x 100, with its 95 % Wilson interval")
OUTPUT_TOKENS = Metric(name="output_tokens", label="output tokens per answer", unit="tokens", direction=None,
                       definition="usage.completion_tokens of one answer (reasoning included): the long-form length; "
                                  "its mean is mean_output_tokens, its median and p90 come from the stored answers")
CATALOGUE |= {m.name: m for m in (TRUNCATION_RATE, UNPARSED_RATE, OUTPUT_TOKENS)}


def accuracy_for(title: str, task: str) -> Metric:
    """The accuracy metric of one task: ``accuracy@gsm8k``, labelled ``GSM8K accuracy``."""
    return ACCURACY.model_copy(update={"name": f"accuracy@{task}", "label": f"{title} accuracy",
                                       "definition": f"{ACCURACY.definition} ({title})"})


def fmt_accuracy(accuracy: float | None, low: float | None = None, high: float | None = None) -> str:
    """``81.1% (95% CI 78.0-84.0%)`` from fractions; ``—`` without a value."""
    if accuracy is None:
        return "—"
    text = ACCURACY.format(100 * accuracy)
    if low is not None and high is not None:
        text += f" (95% CI {100 * low:.1f}–{100 * high:.1f}%)"
    return text


# --- the knee ---------------------------------------------------------------------------------------


class Knee(BaseModel):
    """Where adding users stops adding throughput (see ``knee_concurrency`` above)."""

    concurrency: int = Field(description="The lowest level reaching KNEE_FRACTION of the peak aggregate tok/s.")
    output_tok_s: float
    peak_concurrency: int
    peak_output_tok_s: float
    tolerance: float = Field(default=1 - KNEE_FRACTION, description="1 - KNEE_FRACTION: how far below the peak counts.")
    saturated: bool = Field(description="A higher level was measured and added little (else: not reached yet).")

    def describe(self) -> str:
        """``4 users at 400 tok/s (peak 410 tok/s at 8)``, as the CLI and the benchmark task say it."""
        unit = OUTPUT_THROUGHPUT.unit
        more = "" if self.saturated else "; throughput may still grow past the highest level measured"
        return (f"{self.concurrency} users at {fmt_value(self.output_tok_s, unit)} "
                f"(peak {fmt_value(self.peak_output_tok_s, unit)} at {self.peak_concurrency}{more})")


def find_knee(levels: Sequence[tuple[int, float | None]]) -> Knee | None:
    """The knee of (concurrency, aggregate output tok/s) pairs; None without a usable rate.

    The peak is the highest rate (the lower concurrency on a tie). ``saturated`` says whether a
    level above the knee was measured: when the knee is the highest level, throughput may still grow.
    """
    pts = sorted((c, t) for c, t in levels if t is not None and math.isfinite(t) and t > 0)
    if not pts:
        return None
    peak_c, peak_t = max(pts, key=lambda p: (p[1], -p[0]))
    knee_c, knee_t = next((c, t) for c, t in pts if t >= KNEE_FRACTION * peak_t)
    return Knee(concurrency=knee_c, output_tok_s=knee_t, peak_concurrency=peak_c, peak_output_tok_s=peak_t,
                saturated=knee_c < pts[-1][0])


# --- formatting -------------------------------------------------------------------------------------


def fmt_value(value: float | None, unit: str = "") -> str:
    """A number as every output prints it: ``12.6 tok/s``, ``0.54 s``, ``390,070 tokens``, ``1.49x``."""
    if value is None or not math.isfinite(value):
        return "—"
    if unit in ("tokens", "requests", "concurrent", "") and float(value).is_integer():
        text = f"{int(value):,}"
    elif abs(value) >= 1000:
        text = f"{value:,.0f}"
    elif abs(value) >= 10:
        text = f"{value:.1f}"
    elif abs(value) >= 1:
        text = f"{value:.2f}"
    else:
        text = f"{value:.3g}"
    if unit == "%":
        return f"{text}%"
    if unit == "x":
        return f"{text}x"
    return f"{text} {unit}".strip()


def fmt_change(change_pct: float | None) -> str:
    """A relative change with its sign: ``+4.1%``, ``−12.7%``."""
    if change_pct is None or not math.isfinite(change_pct):
        return "n/a"
    sign = "+" if change_pct >= 0 else "−"
    return f"{sign}{abs(change_pct):.1f}%"


# --- table columns ----------------------------------------------------------------------------------

Statistic = Literal["count", "mean", "median", "min", "max", "p10", "p90", "p99"]
"""The statistics of a distribution (``roost.records.Distribution``), as a column names them."""

GLUED_UNITS = ("%", "x")
"""Units printed against the number (``78.0%``, ``1.41x``): a cell keeps them, a header never names them."""

COUNT_UNITS = ("tokens", "requests", "concurrent", "")
"""Units that count things: a whole number prints without decimals, and a header does not name the unit."""

_SCALES: dict[tuple[str, str], float] = {("s", "ms"): 1000.0}
"""The units a column may print a metric in besides its own: (metric's unit, column's unit) -> factor."""


class Measured(Protocol):
    """What a column reads its value from: a benchmark point (``roost.records.BenchPoint.value``)."""

    def value(self, metric: str, statistic: str | None = None) -> float | None: ...


class Column(BaseModel):
    """One column of a table: a metric and the statistic of it the cells hold, headed and printed as
    every table of roost does (the report's points and history tables, the benchmark's table artifact).

    The header is the metric's title, its unit unless the label names it (``decode tok/s``) or the
    unit counts things or is printed against the number, and the statistic: ``TTFT s (median)``,
    ``ITL ms (median)``, ``Decode tok/s (median)``; without a statistic the unit goes in brackets
    (``Mean queue time (s)``). A per-step metric's median is its value (one per repeat; the headline
    calls it so too), so it is not named: ``Aggregate output tok/s``. Cells print the number alone
    (``12.6``), except in a unit printed against it (``78.0%``).
    """

    model_config = ConfigDict(frozen=True)

    metric: Metric
    statistic: Statistic | None = Field(default=None, description="The statistic of the metric's distribution; "
                                        "None: the metric is one number (a gauge, a run's headline figure).")
    unit: str = Field(default="", description="The unit cells print in when not the metric's: 'ms' for a metric in s.")
    heading: str = Field(default="", description="The header, where the table's context names the column better "
                                                 "than the rule ('Per-request decode tok/s' beside the aggregate).")
    rounded: bool = Field(default=False, description="Whole numbers from 10 up, one decimal below: a share read "
                                                     "at a glance (63%, 7.5%).")

    @model_validator(mode="after")
    def _known_scale(self) -> Column:
        if self.unit and self.unit != self.metric.unit and (self.metric.unit, self.unit) not in _SCALES:
            raise ValueError(f"{self.metric.name} in {self.metric.unit} cannot be printed in {self.unit}")
        return self

    @property
    def shown_unit(self) -> str:
        """The unit the cells are in."""
        return self.unit or self.metric.unit

    @property
    def header(self) -> str:
        """What the table's header row says (see the class's docstring for the rule)."""
        if self.heading:
            return self.heading
        unit = self.shown_unit
        if unit in GLUED_UNITS or unit in COUNT_UNITS or self.metric.label.endswith((f" {unit}", "/s")):
            unit = ""
        named = self.statistic is not None and not (
            self.statistic == "median" and self.metric.name in {m.name for m in PER_STEP})
        if named:
            return " ".join(part for part in (self.metric.title, unit) if part) + f" ({self.statistic})"
        return f"{self.metric.title} ({unit})" if unit else self.metric.title

    def legend(self, more: str = "") -> str:
        """How a chart labels a series of this column: ``decode tok/s (median, min–max)``."""
        inside = ", ".join(part for part in (self.statistic or "", more) if part)
        return f"{self.metric.label} ({inside})" if inside else self.metric.label

    def cell(self, value: float | None) -> str:
        """``value`` (in the metric's unit) as the column prints it."""
        if value is None or not math.isfinite(value):
            return "—"
        unit = self.shown_unit
        value *= _SCALES.get((self.metric.unit, unit), 1.0)
        glued = unit if unit in GLUED_UNITS else ""
        if self.rounded:
            return (f"{value:.0f}" if abs(value) >= 10 else f"{value:.1f}") + glued
        if unit == "ms":  # a latency read in ms: whole from 100 ms, tenths from 1 ms, hundredths below
            return f"{value:,.0f}" if value >= 100 else f"{value:.1f}" if value >= 1 else f"{value:.2f}"
        return fmt_value(value, glued)

    def cell_of(self, point: Measured) -> str:
        """The cell of one point: its value of the column's metric and statistic."""
        return self.cell(point.value(self.metric.name, self.statistic))


# The report's points tables and the benchmark's table artifact (tasks/benchmark.point_table)
DECODE_MEDIAN = Column(metric=DECODE, statistic="median")
DECODE_RANGE = Column(metric=DECODE, heading="Decode min–max")
DECODE_PER_REQUEST = Column(metric=DECODE, statistic="median", heading="Per-request decode tok/s")
PCT_OF_CEILING = Column(metric=DECODE_PCT_OF_CEILING, heading="% of ceiling", rounded=True)
TTFT_MEDIAN = Column(metric=TTFT, statistic="median")
TTFT_P90 = Column(metric=TTFT, statistic="p90")
TTFT_P99 = Column(metric=TTFT, statistic="p99")
TPOT_MEDIAN = Column(metric=TPOT, statistic="median")
ITL_MEDIAN = Column(metric=ITL, statistic="median", unit="ms")
PREFILL_MEDIAN = Column(metric=PREFILL, statistic="median")
OUTPUT_MEDIAN = Column(metric=OUTPUT_THROUGHPUT, statistic="median")
REQUEST_RATE_MEDIAN = Column(metric=REQUEST_RATE, statistic="median")
SERVER_COLUMNS: tuple[Column, ...] = tuple(Column(metric=m) for m in PER_POINT_SERVER)
"""Peak running, peak waiting, mean queue time: the server's view of a point (``metrics_delta``)."""

POINT_COLUMNS: tuple[Column, ...] = (TTFT_MEDIAN, TPOT_MEDIAN, DECODE_MEDIAN, Column(metric=DECODE, statistic="min"),
                                     Column(metric=DECODE, statistic="max"), OUTPUT_MEDIAN, REQUEST_RATE_MEDIAN)
"""The measured columns of the benchmark's table artifact (one row per point of either kind)."""
