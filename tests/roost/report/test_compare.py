"""Two models side by side (``roost.report.compare``, ``compare_store``, ``compare_charts``): the recipe's three
comparisons from records built here, what either model lacks, and which stored runs are compared."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from support.comparison import NEW, OLD, answers, new_and_old, run, store_run

from roost.eval.scoring import wilson
from roost.report import compare_charts
from roost.report.compare import compare_models
from roost.report.compare_store import landing_comparison, previous_production, stored_answers, stored_run
from roost.report.document import build_document
from roost.report.markdown import render_markdown


def test_throughput_per_concurrency_with_the_spread_over_repeats_and_the_levels_only_one_measured() -> None:
    new, old, na, oa = new_and_old()
    cmp = compare_models(new, old, na, oa)
    levels = {lv.concurrency: lv for lv in cmp.throughput.levels}
    assert sorted(levels) == [1, 8, 16, 20, 24]
    at20 = levels[20]
    assert at20.a is not None and at20.b is not None
    assert (at20.a.value, at20.a.low, at20.a.high) == pytest.approx((490.3, 0.97 * 490.3, 1.02 * 490.3))
    assert at20.ratio == pytest.approx(490.3 / 370.0)
    assert levels[8].a is None and levels[8].ratio is None and levels[24].b is None
    assert cmp.throughput.notes == ["only Ornith-1.5-35B-A3B-NVFP4 was measured at 24 concurrent",
                                    "only Qwen3.8-35B-A3B was measured at 8 concurrent"]


def test_reasoning_accuracy_truncation_and_output_tokens_per_answer() -> None:
    new, old, na, oa = new_and_old()
    cmp = compare_models(new, old, na, oa)
    assert [t.task for t in cmp.reasoning] == ["gsm8k", "math500"]
    math = cmp.reasoning[1]
    assert math.title == "MATH-500" and math.same_questions is True and math.notes == []
    assert math.a is not None and math.b is not None
    assert (math.a.n, math.a.accuracy.value, math.a.truncated) == (40, 0.75, 2)
    assert (math.a.accuracy.low, math.a.accuracy.high) == wilson(30, 40)  # the evaluation's own interval
    assert math.b.truncation_rate.value == 0.1 and (math.b.truncation_rate.low, math.b.truncation_rate.high) == wilson(4, 40)
    # answer i has 3000 + 10 i tokens (i = 0..39): mean = median = 3195, p90 (linear) = 3000 + 10 * 35.1
    assert math.a.output_tokens_mean == pytest.approx(3195.0) and math.a.output_tokens_median == pytest.approx(3195.0)
    assert math.a.output_tokens_p90 == pytest.approx(3351.0)


def test_mmlu_pro_per_category_with_the_unparsed_rate() -> None:
    new, old, na, oa = new_and_old()
    k = compare_models(new, old, na, oa).knowledge
    assert k.overall.a is not None and k.overall.a.unparsed == 3 and k.overall.a.unparsed_rate.value == pytest.approx(0.1)
    cats = {r.category: r for r in k.categories}
    assert sorted(cats) == ["law", "math", "physics"]
    law = cats["law"]
    assert law.a is not None and law.b is not None
    # the new model's answers 24..26 are unparsed: one per category; the old one's answer 25 (math)
    assert law.a.unparsed_rate is not None and law.a.unparsed_rate.value == pytest.approx(0.1)
    assert law.b.unparsed_rate is not None and law.b.unparsed_rate.value == 0.0
    assert (law.a.accuracy.value, law.b.accuracy.value) == (0.8, 0.9)
    assert (law.b.accuracy.low, law.b.accuracy.high) == wilson(9, 10)


def test_what_one_model_lacks_is_said_not_crashed_on(tmp_path: Path) -> None:
    new, _, na, _ = new_and_old()
    bare = run(OLD, 2, profile="qwen38", rates={}, evals={"gsm8k": answers("gsm8k", 20, 15)}, digest="other")
    cmp = compare_models(new, bare, na, {})  # the old run: no sweep, no MATH-500, no MMLU-Pro, no stored answers
    assert [lv.b for lv in cmp.throughput.levels] == [None] * 4
    assert "Qwen3.8-35B-A3B has no measured concurrency point in run 20260302T020000Z-00000002" in cmp.throughput.notes
    gsm = cmp.reasoning[0]
    assert gsm.b is not None and gsm.b.output_tokens_median is None and gsm.b.output_tokens_mean is not None
    assert gsm.same_questions is False
    assert any("Qwen3.8-35B-A3B's GSM8K answers are not in the store" in n for n in gsm.notes)
    assert cmp.reasoning[1].b is None and "Qwen3.8-35B-A3B has no completed MATH-500 evaluation" in cmp.reasoning[1].notes[0]
    assert cmp.knowledge.overall.b is None and all(r.b is None for r in cmp.knowledge.categories)
    charts = compare_charts.render(cmp, tmp_path)
    assert sorted(charts) == ["compare_knowledge", "compare_reasoning", "compare_throughput"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in charts.values())
    neither = compare_models(run(NEW, 5, profile="x", rates={}, evals={}), bare)
    assert compare_charts.render(neither, tmp_path / "none") == {"compare_reasoning": tmp_path / "none/compare_reasoning.png"}
    assert neither.knowledge.categories == []


def test_the_section_in_the_report(tmp_path: Path) -> None:
    new, old, na, oa = new_and_old()
    cmp = compare_models(new, old, na, oa)
    charts = compare_charts.render(cmp, tmp_path / "charts")
    md = render_markdown(build_document(new, [], None, charts, models=cmp), tmp_path)
    section = md[md.index(f"## Comparison with {OLD}"):]
    assert "| Concurrent | Ornith-1.5-35B-A3B-NVFP4 | Qwen3.8-35B-A3B | Ratio |" in section
    assert "| 20 | 490.3 (475.6–500.1) | 370 (358.9–377.4) | 1.33x |" in section  # noqa: RUF001
    assert "| MATH-500 | Qwen3.8-35B-A3B | 40 | 70.0% (54.6–81.9) | 4 · 10.0% (4.0–23.1) |" in section  # noqa: RUF001
    assert "| law | 10 / 10 | 80.0% (49.0–94.3) | 10.0% (1.8–40.4) | 90.0% (59.6–98.2) | 0% (0.0–27.8) | -10.0 |" in section  # noqa: RUF001
    assert all(f"charts/{name}.png" in section for name in compare_charts.CHART_NAMES)
    assert "- only Qwen3.8-35B-A3B was measured at 8 concurrent" in section
    assert "## Comparison with" not in render_markdown(build_document(new, [], None, {}), tmp_path)


def test_the_runs_compared_and_the_previous_production_model(tmp_path: Path) -> None:
    new, old, na, oa = new_and_old()
    store_run(tmp_path, old, oa)
    rebench = run(OLD, 3, profile="qwen38", rates={16: 380.0}, evals={})  # newer, but a rebenchmark: no evaluations
    store_run(tmp_path, rebench, {})
    trial = run("team/trial-model", 4, profile="trial", rates={1: 10.0}, evals={}, policy="no")  # not production
    store_run(tmp_path, trial, {})
    later = run("team/later", 9, profile="qwen38", rates={1: 10.0}, evals={})  # after the landing: not replaced
    store_run(tmp_path, later, {})
    picked = stored_run(OLD, "spark", tmp_path)
    assert picked is not None and picked.meta.run_id == old.meta.run_id  # the evaluated landing
    assert stored_run("qwen38", "cpu", tmp_path) is None
    assert previous_production(new, set(), tmp_path) == OLD
    assert previous_production(new, {"trial"}, tmp_path) == "team/trial-model"  # a production profile
    assert set(stored_answers(old, tmp_path)) == {"gsm8k", "math500", "mmlu-pro"}
    assert stored_answers(old, tmp_path)["gsm8k"][0] == {"verdict": "correct", "category": "", "output_tokens": 500}

    store_run(tmp_path, new, na)
    cmp, said = landing_comparison(new, "", True, set(), tmp_path)
    assert cmp is not None and cmp.b.run_id == old.meta.run_id and said == f"compared with {OLD}, run {old.meta.run_id}"
    assert cmp.reasoning[0].a is not None and cmp.reasoning[0].a.output_tokens_p90 is not None  # its stored answers
    assert landing_comparison(new, "", False, set(), tmp_path)[0] is None
    cmp, said = landing_comparison(new, "team/trial-model", False, set(), tmp_path)
    assert cmp is not None and cmp.b.repo_id == "team/trial-model"
    assert landing_comparison(new, "nobody/never-landed", False, set(), tmp_path) == (
        None, "no completed run of nobody/never-landed on spark in the results store: not compared")
    first = run(NEW, 1, profile="ornith", rates={1: 1.0}, evals={})
    first = first.model_copy(update={"meta": first.meta.model_copy(update={"started_at": dt.datetime(2026, 2, 1, tzinfo=dt.UTC)})})
    assert landing_comparison(first, "", True, set(), tmp_path) == (
        None, "no earlier production model of spark in the results store: nothing to compare with")
