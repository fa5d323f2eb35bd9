"""The run's scores (roost/eval/scoring.py): the Wilson interval, McNemar's exact test, the summary
and the paired comparison of two runs."""

from __future__ import annotations

import math
from typing import Any

import pytest

from roost.eval.scoring import Z_95, mcnemar_exact, paired, summarize, wilson


def wilson_by_quadratic(k: int, n: int, z: float = Z_95) -> tuple[float, float]:
    """The Wilson bounds as the roots of (p_hat - p)^2 = z^2 p (1 - p) / n: another route to the same numbers."""
    p = k / n
    a, b, c = 1 + z * z / n, -(2 * p + z * z / n), p * p
    d = math.sqrt(b * b - 4 * a * c)
    return (-b - d) / (2 * a), (-b + d) / (2 * a)


@pytest.mark.parametrize(("k", "n", "low", "high"), [
    (81, 100, 0.722212, 0.874852),   # the textbook example's 95 % interval (72.2 %, 87.5 %)
    (0, 10, 0.0, 0.277533),          # upper bound z^2 / (n + z^2)
    (10, 10, 0.722467, 1.0),         # lower bound n / (n + z^2)
    (1, 1, 0.206549, 1.0),
    (560, 700, 0.768766, 0.827959),  # the recipe's 700 questions near 80 %: about +-3 points
])
def test_wilson_known_values(k: int, n: int, low: float, high: float) -> None:
    got_low, got_high = wilson(k, n)
    assert got_low is not None and got_high is not None
    assert got_low == pytest.approx(low, abs=1e-6) and got_high == pytest.approx(high, abs=1e-6)
    q_low, q_high = wilson_by_quadratic(k, n)
    assert got_low == pytest.approx(max(0.0, q_low), abs=1e-12)
    assert got_high == pytest.approx(min(1.0, q_high), abs=1e-12)
    assert 0.0 <= got_low <= k / n <= got_high <= 1.0


def test_wilson_closed_forms_at_the_edges() -> None:
    for n in (1, 5, 10, 50, 700):
        low, high = wilson(0, n)
        assert low == 0.0 and high is not None and abs(high - Z_95 ** 2 / (n + Z_95 ** 2)) < 1e-12
        low, high = wilson(n, n)
        assert low is not None and abs(low - n / (n + Z_95 ** 2)) < 1e-12 and high is not None and abs(high - 1) < 1e-12


def test_wilson_empty_and_narrowing() -> None:
    assert wilson(0, 0) == (None, None)
    widths = []
    for n in (10, 100, 1000):
        low, high = wilson(n * 8 // 10, n)
        assert low is not None and high is not None
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]
    assert abs(Z_95 - 1.959964) < 1e-6


def binomial_two_sided(b: int, c: int) -> float:
    """By hand: 2 * P(X <= min(b, c)) for X ~ Binomial(b + c, 1/2), capped at 1."""
    n, k = b + c, min(b, c)
    tail: int = sum(math.comb(n, i) for i in range(k + 1))
    total: int = 2 ** n
    return min(1.0, 2 * tail / total)


@pytest.mark.parametrize(("b", "c", "p"), [
    (0, 0, 1.0),
    (0, 6, 2 / 64),              # 0.03125
    (6, 0, 2 / 64),
    (1, 5, 2 * (1 + 6) / 64),    # 0.21875
    (3, 3, 1.0),                 # 2 * 42 / 64 > 1: capped
    (2, 10, 2 * (1 + 12 + 66) / 4096),  # 0.0385742...
    (0, 5, 2 / 32),              # 0.0625: five flips one way are not enough at 5 %
    (1, 0, 1.0),
    (4, 1, 2 * (1 + 5) / 32),    # 0.375
])
def test_mcnemar_exact_hand_computed(b: int, c: int, p: float) -> None:
    assert mcnemar_exact(b, c) == pytest.approx(p, rel=1e-12)
    assert mcnemar_exact(c, b) == mcnemar_exact(b, c)


def test_mcnemar_exact_large_counts_stay_exact() -> None:
    # 2000 discordant pairs: 2^2000 overflows a float, the integer arithmetic does not
    p = mcnemar_exact(900, 1100)
    assert p == pytest.approx(binomial_two_sided(900, 1100), rel=1e-9) and 0 < p < 1e-5
    assert mcnemar_exact(1000, 1000) == 1.0


def _row(verdict: str, category: str = "", tokens: int | None = 10) -> dict[str, Any]:
    return {"verdict": verdict, "category": category, "output_tokens": tokens}


def test_summarize_counts() -> None:
    rows = ([_row("correct", "law", 100)] * 3 + [_row("wrong", "law", 200)] * 1 + [_row("unparsed", "math", 50)] * 2
            + [_row("truncated", "math", 1000)] * 1 + [_row("correct", "math", None)] * 1)
    s = summarize(rows)
    assert (s.n, s.correct, s.wrong, s.unparsed, s.truncated) == (8, 4, 1, 2, 1)
    assert s.accuracy == 0.5
    assert (s.ci_low, s.ci_high) == wilson(4, 8)
    assert s.mean_output_tokens == pytest.approx((300 + 200 + 100 + 1000 + 0) / 8)  # over all n
    assert list(s.per_category) == ["law", "math"]
    assert s.per_category["law"].model_dump() == {"n": 4, "correct": 3, "accuracy": 0.75}
    assert s.per_category["math"].model_dump() == {"n": 4, "correct": 1, "accuracy": 0.25}


def test_summarize_empty_and_uncategorised() -> None:
    empty = summarize([])
    assert (empty.n, empty.accuracy, empty.ci_low, empty.ci_high, empty.mean_output_tokens) == (0, None, None, None, None)
    s = summarize([_row("correct"), _row("wrong")])
    assert (s.n, s.correct, s.per_category) == (2, 1, {})  # GSM8K has no categories


def _runs(spec: dict[str, list[tuple[bool, bool]]]) -> tuple[dict[str, tuple[str, bool]], dict[str, tuple[str, bool]]]:
    """{category: [(before, after), ...]} -> the two runs as paired() takes them."""
    base: dict[str, tuple[str, bool]] = {}
    cur: dict[str, tuple[str, bool]] = {}
    for cat, pairs in spec.items():
        for i, (before, after) in enumerate(pairs):
            base[f"{cat}-{i}"] = (cat, before)
            cur[f"{cat}-{i}"] = (cat, after)
    return base, cur


def test_paired_names_the_category_that_regressed() -> None:
    base, cur = _runs({
        "law": [(True, False)] * 9 + [(True, True)] * 11,
        "math": [(True, True)] * 15 + [(False, True)] * 1 + [(True, False)] * 1 + [(False, False)] * 3,
        "history": [(True, True)] * 20,
    })
    cmp = paired(base, cur)
    assert cmp is not None
    assert (cmp.pairs, cmp.lost, cmp.gained) == (60, 10, 1)
    assert (cmp.baseline_correct, cmp.current_correct) == (56, 47)
    assert cmp.p_value == pytest.approx(binomial_two_sided(10, 1))
    assert cmp.significant and cmp.direction == "worse"
    assert [m.category for m in cmp.categories] == ["law", "math"]  # history did not move; worst first
    law = cmp.categories[0]
    assert (law.pairs, law.baseline_correct, law.current_correct, law.lost, law.gained) == (20, 20, 11, 9, 0)
    assert law.p_value == pytest.approx(2 / 2 ** 9)
    assert cmp.categories[1].p_value == 1.0
    assert cmp.delta_points == pytest.approx(-15.0)
    assert cmp.describe() == ("-15.0 points on 60 paired questions (lost 10, gained 1; McNemar p = 0.0117, "
                              "significant)")


def test_paired_noise_is_not_significant() -> None:
    base, cur = _runs({"a": [(True, False)] * 2 + [(False, True)] * 1 + [(True, True)] * 30,
                       "b": [(True, False)] * 1 + [(False, True)] * 2 + [(False, False)] * 10})
    cmp = paired(base, cur)
    assert cmp is not None
    assert (cmp.lost, cmp.gained, cmp.p_value, cmp.significant, cmp.direction) == (3, 3, 1.0, False, "same")
    assert cmp.describe().endswith("not significant)")
    assert {m.category for m in cmp.categories} == {"a", "b"}
    assert [m.category for m in cmp.categories] == ["a", "b"]  # a lost more than it gained


def test_paired_better_and_edges() -> None:
    base, cur = _runs({"x": [(False, True)] * 8 + [(True, True)] * 4})
    cmp = paired(base, cur)
    assert cmp is not None and cmp.significant and cmp.direction == "better" and cmp.delta_points > 0
    # only the shared questions are paired
    extra_base = dict(base, only_base=("x", True))
    extra_cur = dict(cur, only_cur=("x", False))
    again = paired(extra_base, extra_cur)
    assert again is not None and again.pairs == 12
    # nothing shared: no comparison; nothing moved: not significant
    assert paired({"a": ("", True)}, {"b": ("", True)}) is None
    same = paired(base, base)
    assert same is not None and (same.p_value, same.significant, same.categories) == (1.0, False, [])
    # alpha is the caller's
    b2, c2 = _runs({"x": [(True, False)] * 5})
    at5 = paired(b2, c2)
    at10 = paired(b2, c2, alpha=0.1)
    assert at5 is not None and at10 is not None
    assert (at5.p_value, at5.significant, at10.significant) == (0.0625, False, True)
