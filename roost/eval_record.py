"""What an accuracy evaluation leaves in the run record (:class:`EvalRecord`): where its questions came
from, how they were asked, its scores, the paired comparison with a baseline and the other models' scores.

:mod:`roost.eval` computes these (``datasets.py`` the dataset, ``suites.py`` the sampling,
``scoring.py`` the summary and the McNemar comparison) and :mod:`roost.records` stores them, so
they live below both: the run record reads no evaluation code, and ``roost.eval`` never needs the
record. The definitions of the scores are in ``roost/eval/scoring.py`` and ``roost/catalogue.py``.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class DatasetInfo(BaseModel):
    """Where the questions came from (the JSON's ``dataset``; stored with the run)."""

    source: str = Field(description="A local path, or the Hub dataset repo id.")
    revision: str = Field(description="The Hub commit sha, or sha256:<first 16 hex> of the local files.")
    files: list[str] = Field(default_factory=list, description="The files read, relative to the source.")
    rows: int = 0


class Sampling(BaseModel):
    """How the questions are asked: the sampling parameters and the requests in flight."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    temperature: float = Field(default=0.6, ge=0, le=100, allow_inf_nan=False)
    top_p: float = Field(default=0.95, gt=0, le=1, allow_inf_nan=False)
    top_k: int = Field(default=20, ge=-1, le=1 << 31)
    max_tokens: int = Field(default=16384, ge=1, le=1 << 31)
    thinking: bool = True
    concurrency: int = Field(default=16, ge=1, le=1024)

    def answer_fields(self) -> dict[str, Any]:
        """The fields that decide the answers (not how many are asked at once): what a resumed log and a
        paired baseline must share."""
        return self.model_dump(exclude={"concurrency"})


class CategoryScore(BaseModel):
    n: int
    correct: int
    accuracy: float | None


class EvalSummary(BaseModel):
    """The run-level scores (the JSON of ``roost eval`` and the store's run-level row)."""

    n: int
    correct: int
    wrong: int
    unparsed: int
    truncated: int
    accuracy: float | None
    ci_low: float | None
    ci_high: float | None
    mean_output_tokens: float | None
    per_category: dict[str, CategoryScore] = Field(default_factory=dict)


class CategoryMove(BaseModel):
    category: str
    pairs: int
    baseline_correct: int
    current_correct: int
    lost: int = Field(description="Right in the baseline, wrong now.")
    gained: int = Field(description="Wrong in the baseline, right now.")
    p_value: float


class PairedComparison(BaseModel):
    """This run against a baseline on the questions both answered (McNemar, exact)."""

    pairs: int
    baseline_correct: int
    current_correct: int
    lost: int
    gained: int
    p_value: float
    significant: bool
    direction: str = Field(description="'worse', 'better' or 'same' (not significant).")
    categories: list[CategoryMove] = Field(default_factory=list, description="Categories whose pairs moved, worst first.")

    @property
    def delta_points(self) -> float:
        """Accuracy change in points over the paired questions."""
        return 100 * (self.current_correct - self.baseline_correct) / self.pairs if self.pairs else 0.0

    def describe(self) -> str:
        """``-6.0 points on 50 paired questions (lost 4, gained 1; McNemar p = 0.38, not significant)``."""
        sig = "significant" if self.significant else "not significant"
        return (f"{self.delta_points:+.1f} points on {self.pairs} paired questions (lost {self.lost}, gained "
                f"{self.gained}; McNemar p = {self.p_value:.3g}, {sig})")


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
