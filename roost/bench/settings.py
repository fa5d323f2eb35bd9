"""What a benchmark run measures (:class:`BenchSettings`) and what comes out of it (:class:`BenchResult`).

The run itself is ``roost/bench/sweep.py``; the recipes' sweeps are the defaults here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from roost.bench import (
    WINDOW_MAX as WINDOW_MAX,  # re-exported: 0 in prompt_lengths = the largest the window admits
)
from roost.bench import metrics as M
from roost.bench.validity import stream_ceiling_tok_s, unmeasurable
from roost.catalogue import Knee
from roost.errors import StageFailed, UserError
from roost.plan.args import parse_overrides
from roost.records import BenchPoint
from roost.vllm.stream import RequestRecord

if TYPE_CHECKING:
    from roost.vllm.client import RequestBudget

RECIPE_PROMPT_LENGTHS = [512, 2048, 8192, 32768, 131072, 250000, WINDOW_MAX]
"""The single-stream sweep of the Ornith 1.0 recipes (0.5K to 250K-token prompts, then the window)."""
RECIPE_CONCURRENCY = [1, 16, 20, 24]
"""The concurrency levels the Ornith 1.5 recipe sweeps (around its --max-num-seqs 20)."""

Progress = Callable[[str, float], None]


MAX_TOKENS = 1 << 31
"""The largest token count a setting may name (a window, a prompt, an output): beyond any model's."""
MAX_STREAMS = 1 << 16
"""The most concurrent streams a setting may ask for."""
MAX_STEPS = 10_000
"""The most repeats, warm-up requests or requests per user a setting may ask for."""


class BenchSettings(BaseModel):
    """What to measure and how patiently. Defaults reproduce the recipes' sweeps."""

    model_config = ConfigDict(extra="forbid")

    prompt_lengths: list[int] = Field(
        default_factory=lambda: list(RECIPE_PROMPT_LENGTHS),
        description="Single-stream sweep, in prompt tokens (chat template included); 0 = the largest the window admits. Empty: no sweep.",
    )
    output_tokens: int = Field(default=256, ge=2, le=MAX_TOKENS, description="max_tokens of every measured request (ignore_eos).")
    concurrency: list[int] = Field(
        default_factory=lambda: list(RECIPE_CONCURRENCY), description="Concurrency sweep levels. Empty: no sweep."
    )
    max_num_seqs: int | None = Field(default=None, ge=1, le=MAX_STREAMS, description="The server's --max-num-seqs; added as a level.")
    concurrency_prompt_tokens: int = Field(default=512, ge=1, le=MAX_TOKENS, description="Prompt length in the concurrency sweep.")
    requests_per_user: int = Field(default=1, ge=1, le=MAX_STEPS, description="Back-to-back requests per user in a concurrency step.")
    repeats: int = Field(default=3, ge=1, le=MAX_STEPS, description="Steps per point (median, min, max over them).")
    warmup: int = Field(default=2, ge=0, le=MAX_STEPS, description="Unmeasured requests sent first.")
    warmup_prompt_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS, description="Default: the smallest measured prompt.")
    thinking: bool = Field(default=False, description="chat_template_kwargs.enable_thinking.")
    temperature: float = Field(default=0.0, ge=0.0, le=100.0, allow_inf_nan=False)
    ignore_eos: bool = True
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Merged into every request body.")
    max_model_len: int | None = Field(default=None, ge=1, le=MAX_TOKENS, description="The served window; default: ask the server.")
    window_margin: int = Field(default=0, ge=0, description="Tokens kept free below the window for WINDOW_MAX.")
    ttft_timeout_base_s: float = Field(default=60.0, gt=0)
    min_prefill_tok_s: float = Field(default=100.0, gt=0, description="Slowest prefill tolerated before a time-out.")
    min_decode_tok_s: float = Field(default=1.0, gt=0, description="Slowest per-request decode tolerated.")
    decode_ceiling_tok_s: float | None = Field(
        default=None, gt=0,
        description="Fastest one stream can decode (roost.bench.validity.stream_ceiling_tok_s: the roofline, times "
        "the tokens a speculative step emits); a request measured faster is unmeasurable. None: not judged.")
    stall_timeout_s: float = Field(default=120.0, gt=0, description="Longest silence mid-stream.")
    connect_timeout_s: float = Field(default=10.0, gt=0)
    metrics_poll_s: float = Field(default=2.0, ge=0, description="Gauge polling period during a step; 0 = off.")
    seed: int = 0

    @model_validator(mode="before")
    @classmethod
    def _drop_knee_tolerance(cls, data: Any) -> Any:
        """``knee_tolerance`` (roost 0.1) is gone: the knee has one definition (``roost.catalogue``).
        Saved profiles that still carry it keep loading."""
        if isinstance(data, dict) and "knee_tolerance" in data:
            data = {k: v for k, v in data.items() if k != "knee_tolerance"}
        return data

    @field_validator("prompt_lengths")
    @classmethod
    def _lengths(cls, v: list[int]) -> list[int]:
        if any(x < 0 for x in v):
            raise ValueError("prompt lengths must be positive token counts (0 = the largest the window admits)")
        return v

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: list[int]) -> list[int]:
        if any(x < 1 for x in v):
            raise ValueError("concurrency levels must be >= 1")
        return v

    def levels(self) -> list[int]:
        """Concurrency levels, ascending, ``max_num_seqs`` included."""
        out = set(self.concurrency)
        if self.max_num_seqs and self.concurrency:
            out.add(self.max_num_seqs)
        return sorted(out)

    def points_done(self, fraction: float) -> tuple[int, int]:
        """(points measured, points in all) when ``fraction`` of the sweep's steps are done: one point
        per prompt length and per concurrency level, each ``repeats`` steps."""
        total = len(self.prompt_lengths) + len(self.levels())
        return min(total, int(fraction * total + 1e-9)), total

    def chat_template_kwargs(self) -> dict[str, Any]:
        return {"enable_thinking": self.thinking}

    def budget(self, prompt_tokens: int, concurrency: int) -> RequestBudget:
        """Per-request time budget, scaled to the prompt and to the users sharing the server."""
        # the HTTP client's module: imported here, not for a profile's settings (CLI start-up)
        from roost.vllm.client import RequestBudget

        first = self.ttft_timeout_base_s + concurrency * prompt_tokens / self.min_prefill_tok_s
        per_user = self.requests_per_user if concurrency > 1 else 1
        return RequestBudget(first_token_s=first * per_user, total_s=(first + self.output_tokens / self.min_decode_tok_s) * per_user)


def make_settings(**values: Any) -> BenchSettings:
    """:class:`BenchSettings` from user input; a bad value is a UserError naming the field."""
    try:
        return BenchSettings(**{k: v for k, v in values.items() if v is not None})
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(x) for x in err["loc"]) or "settings"
        raise UserError(f"benchmark setting {field}: {err['msg']}") from None


class BenchResult(BaseModel):
    """A benchmark run: points, every request, the knee, and what failed."""

    base_url: str
    model: str
    settings: BenchSettings
    status: Literal["completed", "failed"] = "completed"
    errors: list[str] = Field(default_factory=list, description="Run-level failures (a dead server, a rejected key...).")
    notes: list[str] = Field(default_factory=list, description="Clipped lengths, inexact prompts, a missing /tokenize...")
    max_model_len: int | None = None
    points: list[BenchPoint] = Field(default_factory=list)
    requests: list[RequestRecord] = Field(default_factory=list)
    knee: Knee | None = None
    started_at: str = ""
    wall_s: float = 0.0

    @property
    def failed(self) -> bool:
        return self.status == "failed"

    def request_rows(self) -> list[dict[str, Any]]:
        """One flat row per request, with its metrics (times in seconds, relative to its send).

        A row's ``decode_tok_s``, ``tpot_s`` and ``itl_s_max`` are what the client saw even when
        ``unmeasurable_reason`` says they are not a measurement (``roost/bench/validity.py``; "" when
        they are): the point's distributions leave such requests out.
        """
        rows = []
        for r in self.requests:
            row = r.model_dump(exclude={"token_times", "t_sent", "t_first", "t_last", "t_end"})
            row.update(
                t_first_s=None if r.t_first is None else r.t_first - r.t_sent,
                t_last_s=None if r.t_last is None else r.t_last - r.t_sent,
                t_end_s=None if r.t_end is None else r.t_end - r.t_sent,
                ttft_s=M.ttft(r),
                tpot_s=M.tpot(r),
                e2el_s=M.e2el(r),
                decode_tok_s=M.decode_tok_s(r),
                prefill_tok_s=M.prefill_tok_s(r),
                token_chunks=len(r.token_times),
                itl_s_max=max(M.itl(r), default=None),
                unmeasurable_reason=why.reason if (why := unmeasurable(r, self.settings.decode_ceiling_tok_s)) else "",
            )
            rows.append(row)
        return rows


class BenchFailed(StageFailed):
    """The benchmark stopped on a dead server; ``result`` holds every row measured before."""

    def __init__(self, result: BenchResult) -> None:
        super().__init__("benchmark", "; ".join(result.errors) or "failed")
        self.result = result


def for_server(vllm_args: Sequence[str], roofline_tok_s: float | None,
               profile_bench: Mapping[str, Any]) -> dict[str, Any]:
    """The benchmark settings for a server run with ``vllm_args``: its ``--max-num-seqs`` cap as a
    level, the stream ceiling (roofline x (speculative tokens + 1), ``validity.stream_ceiling_tok_s``),
    then the profile's ``bench`` (which wins)."""
    cap = parse_overrides(list(vllm_args)).max_num_seqs
    ceiling = stream_ceiling_tok_s(roofline_tok_s, vllm_args)
    return {**({"max_num_seqs": cap} if cap else {}), **({"decode_ceiling_tok_s": ceiling} if ceiling else {}),
            **profile_bench}
