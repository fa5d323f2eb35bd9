"""Scores of an accuracy run, and the paired test that decides whether two runs differ.

Definitions (also in ``roost/catalogue.py``, which every output reads):

- ``accuracy``: correct / n, over every question of the sample (unparsed and truncated answers are
  wrong answers for accuracy, and counted apart);
- ``ci_low``/``ci_high``: the 95 % Wilson score interval of that proportion (the recipe's "±2.9
  points" on 700 questions is its half-width near 80 %); Wilson rather than the normal
  approximation because small samples and accuracies near 0 or 1 are common here;
- ``mean_output_tokens``: completion tokens (reasoning included, vLLM's ``usage``) over all n;
- a regression: the same questions in the baseline and this run, McNemar's exact test on the
  discordant pairs (right before and wrong now, and the reverse): two-sided binomial p-value of
  the smaller count among b + c at 1/2. Accuracy differences of unpaired runs carry the sampling
  noise of both; pairing removes what the questions share.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from roost.eval.suites import Verdict
from roost.eval_record import CategoryMove, CategoryScore, EvalSummary, PairedComparison

Z_95 = 1.959963984540054
"""The 97.5th percentile of the standard normal: a 95 % two-sided interval."""

ALPHA = 0.05
"""McNemar p-value below which a paired difference is called significant."""


def wilson(correct: int, n: int, z: float = Z_95) -> tuple[float | None, float | None]:
    """The Wilson score interval of ``correct / n`` (None, None for n = 0)."""
    if n <= 0:
        return None, None
    p = correct / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, round(centre - half, 12)), min(1.0, round(centre + half, 12))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for b and c discordant pairs (1.0 when there are none)."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    # P(X <= k) for X ~ Binomial(n, 1/2), doubled; exact integer arithmetic, then one division
    tail = sum(math.comb(n, i) for i in range(k + 1))
    return min(1.0, float(2 * tail / 2**n))


def summarize(rows: Iterable[Mapping[str, Any]]) -> EvalSummary:
    """Scores of per-question rows (``verdict``, ``category``, ``output_tokens``)."""
    rows = list(rows)
    counts: dict[Verdict, int] = {"correct": 0, "wrong": 0, "unparsed": 0, "truncated": 0}
    cats: dict[str, list[int]] = {}
    tokens = 0
    for r in rows:
        counts[r["verdict"]] += 1
        cat = cats.setdefault(r.get("category") or "", [0, 0])
        cat[0] += 1
        cat[1] += r["verdict"] == "correct"
        tokens += int(r.get("output_tokens") or 0)
    n = len(rows)
    low, high = wilson(counts["correct"], n)
    per_category = {name: CategoryScore(n=c[0], correct=c[1], accuracy=c[1] / c[0] if c[0] else None)
                    for name, c in sorted(cats.items()) if name}  # GSM8K has no categories
    return EvalSummary(n=n, correct=counts["correct"], wrong=counts["wrong"], unparsed=counts["unparsed"],
                       truncated=counts["truncated"], accuracy=counts["correct"] / n if n else None,
                       ci_low=low, ci_high=high, mean_output_tokens=tokens / n if n else None,
                       per_category=per_category)


def paired(baseline: Mapping[str, tuple[str, bool]], current: Mapping[str, tuple[str, bool]],
           alpha: float = ALPHA) -> PairedComparison | None:
    """Compare two runs question by question: ``{question id: (category, correct)}`` each.

    None when they share no question (different samples or tasks cannot be paired)."""
    shared = sorted(set(baseline) & set(current))
    if not shared:
        return None
    by_cat: dict[str, list[int]] = {}
    for qid in shared:
        cat, before = baseline[qid]
        after = current[qid][1]
        acc = by_cat.setdefault(cat, [0, 0, 0, 0, 0])
        acc[0] += 1
        acc[1] += before
        acc[2] += after
        acc[3] += before and not after
        acc[4] += after and not before
    lost, gained = sum(a[3] for a in by_cat.values()), sum(a[4] for a in by_cat.values())
    p = mcnemar_exact(lost, gained)
    significant = p < alpha
    moves = [CategoryMove(category=cat, pairs=a[0], baseline_correct=a[1], current_correct=a[2], lost=a[3],
                          gained=a[4], p_value=mcnemar_exact(a[3], a[4]))
             for cat, a in by_cat.items() if a[3] or a[4]]
    moves.sort(key=lambda m: (m.gained - m.lost, m.p_value, m.category))
    return PairedComparison(
        pairs=len(shared), baseline_correct=sum(a[1] for a in by_cat.values()),
        current_correct=sum(a[2] for a in by_cat.values()), lost=lost, gained=gained, p_value=p,
        significant=significant, direction=("worse" if lost > gained else "better") if significant else "same",
        categories=moves)
