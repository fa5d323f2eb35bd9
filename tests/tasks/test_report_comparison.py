"""The report stage of a production landing compares it with the model it replaced on the host (or the
profile's ``compare_with``), from stored records: the report's section, its charts and the artifact Markdown."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.comparison import NEW, OLD, new_and_old, store_run

from roost.profiles import PROFILES
from roost.store import append_eval_answers
from tasks.report import build_report, comparison_markdown


def test_a_production_landing_carries_the_comparison_with_the_model_it_replaced(tmp_path: Path) -> None:
    new, old, na, oa = new_and_old()
    store_run(tmp_path, old, oa)
    for task, rows in na.items():  # the evaluate stage stored the new run's answers; the report stage stores the run
        append_eval_answers(new.meta, task, "sample-1", rows, tmp_path)
    outcome = build_report(new, tmp_path, production=True)
    assert outcome.errors == []
    assert outcome.models is not None and outcome.models.b.repo_id == OLD and outcome.models.a.repo_id == NEW
    assert outcome.files is not None
    md = outcome.files.markdown.read_text()
    section = md[md.index(f"## Comparison with {OLD}"):]
    assert "| 20 | 490.3 (475.6–500.1) | 370 (358.9–377.4) | 1.33x |" in section  # noqa: RUF001
    for name in ("compare_throughput", "compare_reasoning", "compare_knowledge"):
        assert outcome.files.charts[name].read_bytes()[:4] == b"\x89PNG" and f"charts/{name}.png" in section
    assert f"## Comparison with {OLD}" in outcome.artifact_markdown
    # the comparison's own artifact shows its three charts inline without a results URL
    art = comparison_markdown(outcome.models, outcome.files, outcome.urls)
    assert art.startswith("# Ornith-1.5-35B-A3B-NVFP4 vs Qwen3.8-35B-A3B on spark\n")
    assert len(re.findall(r"!\[[^\]]*\]\(data:image/png;base64,", art)) == 3


def test_a_landing_that_is_not_production_is_not_compared_unless_its_profile_says_so(tmp_path: Path) -> None:
    new, old, _, oa = new_and_old()
    store_run(tmp_path, old, oa)
    assert build_report(new, tmp_path).models is None
    other = new.model_copy(update={"meta": new.meta.model_copy(update={"run_id": "20260305T030000Z-0000000f"})})
    outcome = build_report(other, tmp_path, compare_with="qwen38")
    assert outcome.errors == [] and outcome.models is not None and outcome.models.b.run_id == old.meta.run_id
    assert PROFILES["ornith-1.5-35b-a3b-nvfp4"].production and PROFILES["ornith-1.5-35b-a3b-nvfp4"].compare_with == ""


def test_the_comparison_is_its_own_artifact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tasks.report

    new, old, _, oa = new_and_old()
    store_run(tmp_path, old, oa)
    outcome = build_report(new, tmp_path, production=True)
    made: dict[str, str] = {}
    monkeypatch.setattr(tasks.report, "create_markdown_artifact",
                        lambda markdown, key, description: made.setdefault(key, markdown))
    monkeypatch.setattr(tasks.report, "create_table_artifact", lambda **_: None)
    keys = tasks.report.publish_artifacts(new, outcome)
    assert keys["comparison"] == "roost-comparison-ornith-1-5-35b-a3b-nvfp4-spark"
    assert made[keys["comparison"]].count("](data:image/png;base64,") == 3
    assert "comparison" not in tasks.report.publish_artifacts(new, build_report(new, tmp_path / "other"))
