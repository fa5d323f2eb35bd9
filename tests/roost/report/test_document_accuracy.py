"""The report's Accuracy section: the scores table, each evaluation's settings, the per-category paired
table (McNemar), the other models' scores and the per-category chart, rendered to files by
``roost.report.write.write_report``."""

from __future__ import annotations

from pathlib import Path

from PIL import Image as PilImage

from roost.eval.datasets import DatasetInfo
from roost.eval.scoring import EvalSummary, paired, summarize
from roost.eval.suites import Sampling
from roost.records import EvalRecord, OtherModelScore, RunRecord
from roost.report.document import Image, Table, build_document
from roost.report.write import write_report

BASELINE_RUN = "20260228T020000Z-0000cafe"
BASE = {f"q{i}": ("law" if i % 2 == 0 else "math", i not in {1, 3, 5, 7, 9}) for i in range(40)}  # 35 of 40
NOW = {q: (cat, ok and int(q[1:]) not in set(range(0, 24, 2))) for q, (cat, ok) in BASE.items()}  # 12 law lost


def score(outcomes: dict[str, tuple[str, bool]]) -> EvalSummary:
    return summarize({"verdict": "correct" if ok else "wrong", "category": c, "output_tokens": 300}
                     for c, ok in outcomes.values())


def with_accuracy(record: RunRecord) -> RunRecord:
    base = score(BASE)
    ev = EvalRecord(
        task="mmlu-pro", dataset=DatasetInfo(source="TIGER-Lab/MMLU-Pro", revision="3373e0b32277875b8db2aa555a333b78a08477ea"),
        sampling=Sampling(temperature=0.0, thinking=False, concurrency=8), seed=0, per_category=20, sample_digest="5eed",
        summary=score(NOW), elapsed_s=42.0, resumed=7, baseline_run_id=BASELINE_RUN,
        baseline=OtherModelScore(repo_id=record.meta.repo_id, run_id=BASELINE_RUN, host="spark",
                                 accuracy=base.accuracy, ci_low=base.ci_low, ci_high=base.ci_high,
                                 n=40, per_category=base.per_category),
        comparison=paired(BASE, NOW),
        others=[OtherModelScore(repo_id="Qwen/Qwen3-8B", run_id="20260227T020000Z-0000beef", host="spark",
                                accuracy=0.65, ci_low=0.49, ci_high=0.78, n=40)])
    return record.model_copy(update={"evals": [ev]})


def test_the_report_has_an_accuracy_section_with_tables_and_the_chart(record: RunRecord, tmp_path: Path) -> None:
    rec = with_accuracy(record)
    files = write_report(rec, [], None, tmp_path / "report")
    chart = files.charts["accuracy_mmlu-pro"]
    assert chart == tmp_path / "report" / "charts" / "accuracy_mmlu-pro.png"
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with PilImage.open(chart) as im:
        assert im.width > 400 and im.height > 150
    md = files.markdown.read_text()
    section = md[md.index("## Accuracy"):]
    section = section[:section.index("\n## ", 1)]
    assert "charts/accuracy_mmlu-pro.png" in section  # the chart is in the section
    assert "| Task | Questions | Accuracy |" in section and "Against the baseline (paired)" in section
    assert "| MMLU-Pro | 40 | 57.5% (95% CI 42.2–71.5%) |" in section  # noqa: RUF001
    assert "-30.0 points on 40 paired questions (lost 12, gained 0; McNemar p = 0.000488, significant)" in section
    assert "| Category | Paired | Right before, wrong now | Wrong before, right now | McNemar p |" in section
    assert "| law | 20 | 12 | 0 | 0.000488 |" in section and "| math |" not in section  # only what moved
    assert "| Other model | Run | Accuracy | Questions |" in section
    assert "`Qwen/Qwen3-8B`" in section and "65.0% (95% CI 49.0–78.0%)" in section  # noqa: RUF001
    assert "`TIGER-Lab/MMLU-Pro` @ `3373e0b32277875b`" in section and "20 per category" in section
    assert "thinking off" in section and "8 in flight" in section
    assert "7 answers came from the run's log" in section
    html = files.html.read_text()
    assert "Accuracy" in html and "Qwen/Qwen3-8B" in html


def test_the_document_blocks(record: RunRecord, tmp_path: Path) -> None:
    rec = with_accuracy(record)
    chart = tmp_path / "accuracy_mmlu-pro.png"
    doc = build_document(rec, [], None, {"accuracy_mmlu-pro": chart})
    (sec,) = [s for s in doc.sections if s.title == "Accuracy"]
    tables = [b for b in sec.blocks if isinstance(b, Table)]
    assert [t.headers[0] for t in tables] == ["Task", "Category", "Other model"]
    assert tables[1].rows == [["law", "20", "12", "0", "0.000488"]]
    assert [b.path for b in sec.blocks if isinstance(b, Image)] == [chart]
    titles = [s.title for s in doc.sections]
    assert titles.index("Accuracy") < titles.index("Decode vs the roofline ceiling")


def test_no_accuracy_section_without_evaluations_and_a_first_run_says_so(record: RunRecord, tmp_path: Path) -> None:
    assert "Accuracy" not in [s.title for s in build_document(record, [], None, {}).sections]
    first = with_accuracy(record)
    first.evals[0] = first.evals[0].model_copy(update={"comparison": None, "baseline": None, "baseline_run_id": "",
                                                       "others": []})
    files = write_report(first, [], None, tmp_path / "first")
    md = files.markdown.read_text()
    assert "no earlier run of the same questions" in md and "Right before, wrong now" not in md
    assert files.charts["accuracy_mmlu-pro"].is_file() and "accuracy_mmlu-pro.png" in md
