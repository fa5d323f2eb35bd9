# ruff: noqa: RUF001  (the reports print a real minus sign)
"""write_report: the files exist, the PNGs are real images, the Markdown and HTML carry the numbers."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.image import imread
from support.samples import history, spark_record

from roost.records import RunRecord, StartAttempt
from roost.regress import compare
from roost.report import ReportFiles, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_real_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, path
    img = imread(path)
    h, w = img.shape[:2]
    assert w >= 600 and h >= 200, (path, img.shape)
    assert float(np.std(img[..., :3])) > 0.02, f"{path} looks blank"


@pytest.fixture(scope="module")
def completed(tmp_path_factory: pytest.TempPathFactory) -> ReportFiles:
    """The report of a completed run with 5 earlier comparable runs, rendered once for the module."""
    record, earlier = spark_record(), history()
    return write_report(record, earlier, compare(record, earlier), tmp_path_factory.mktemp("report") / "rep")


def test_a_completed_run_gets_every_file(completed: ReportFiles) -> None:
    files = completed
    out = files.directory
    assert files.markdown == out / "report.md" and files.markdown.is_file()
    assert files.html == out / "report.html" and files.html.is_file()
    assert set(files.charts) == {
        "decode_vs_prompt", "ttft_vs_prompt", "throughput_vs_concurrency", "timeline",
        "history_decode_tok_s", "history_ttft_s", "history_peak_output_tok_s", "history_start_to_healthy_s",
    }
    for path in files.charts.values():
        assert path.parent == out / "charts"
        assert_real_png(path)
    assert files.key_chart == files.charts["decode_vs_prompt"]
    assert not list(out.rglob(".*"))  # no temporaries left behind


def test_markdown_carries_the_numbers(completed: ReportFiles) -> None:
    md = completed.markdown.read_text()
    # headline: the 9B recipe's 12.61 tok/s at the 2,042-token prompt, 73% of the 17.2 tok/s ceiling
    assert "| Decode tok/s @ 2,042-token prompt | 12.6 tok/s |" in md
    assert "| Decode % of roofline ceiling | 73.3% |" in md
    assert "| Roofline decode ceiling | 17.2 tok/s |" in md
    assert "| Peak aggregate output tok/s | 150.2 tok/s @ 20 concurrent |" in md
    assert "| Knee (≥90% of peak) | 16 concurrent (141.5 tok/s) |" in md
    # plan vs vLLM's log
    assert "| KV cache tokens | 390,070 | 390,070 | +0.0% |" in md
    assert "| Max concurrency (full-length requests) | 1.49x | 1.49x | +0.0% |" in md
    # decode and TTFT against prompt length, 250K prompt included
    assert "| 250,223 | 256 | 3/3 | 8.86 |" in md and "| 109 |" in md
    assert "- 2,042-token prompt: 12.6 tok/s = **73%** of the ceiling" in md
    # throughput against concurrency
    assert "| 20 | 2,042 | 40/40 | 150.2 |" in md
    # audit findings and cold-load timeline
    assert "| warning | `MTP_ADVERTISED_NOT_SHIPPED` |" in md
    assert "| serve | completed | 4.1 | 161.3 |" in md
    assert "| Start → weights loaded | 108.0 s |" in md
    # baseline comparison against 5 comparable runs
    assert "(5 earlier comparable runs)" in md and "against the median of runs" in md
    # charts linked relative to the report
    for name in ("decode_vs_prompt", "ttft_vs_prompt", "throughput_vs_concurrency", "timeline", "history_decode_tok_s"):
        assert f"(charts/{name}.png)" in md


def test_a_regression_is_marked(tmp_path: Path, earlier: list[RunRecord]) -> None:
    slow = spark_record(run_id="20260301T020000Z-0000cccc", scale=0.86)
    md = write_report(slow, earlier, compare(slow, earlier), tmp_path).markdown.read_text()
    assert re.search(r"\| decode tok/s @ 2,042-token prompt \| 12\.6 tok/s \| 10\.8 tok/s \| −14\.\d% \| [\d.]+ tok/s \| \*\*REGRESSED\*\* \|", md)
    assert "13 metrics regressed" in md


def test_first_run_says_it_establishes_the_baseline(tmp_path: Path, record: RunRecord) -> None:
    md = write_report(record, [], compare(record, []), tmp_path).markdown.read_text()
    assert "First run of this configuration: it establishes the baseline." in md


def test_a_failed_run_without_points_still_gets_a_report(tmp_path: Path, failed: RunRecord, earlier: list[RunRecord]) -> None:
    files = write_report(failed, earlier, compare(failed, earlier), tmp_path)
    md = files.markdown.read_text()
    assert "**The run failed at stage `serve`** (`kv_pool_too_small`)." in md
    assert "8.02 GiB KV cache is needed" in md
    assert "**Remediation:** Raise --kv-cache-memory-bytes to 12884901888 (12 GiB)" in md
    assert "No prompt-length points were measured in this run." in md
    assert "No concurrency points were measured in this run." in md
    assert "| serve | failed | 3.8 | 74.2 | engine exited with code 1 |" in md
    assert "decode_vs_prompt" not in files.charts and "throughput_vs_concurrency" not in files.charts
    assert "timeline" in files.charts and "history_decode_tok_s" in files.charts  # earlier runs still plotted
    for path in files.charts.values():
        assert_real_png(path)
    assert files.key_chart == files.charts["timeline"]


def test_a_bare_failed_record_renders(tmp_path: Path, failed: RunRecord) -> None:
    bare = failed.model_copy(update={"stages": [], "audit": {}, "plan": {}, "decode_ceiling_tok_s": None})
    files = write_report(bare, [], None, tmp_path)
    md = files.markdown.read_text()
    assert "The audit did not run" in md and "No stage timings were recorded." in md
    assert "No baseline comparison was made" in md
    assert files.charts == {} or set(files.charts) <= {"timeline"}
    assert files.html.read_text().startswith("<!DOCTYPE html>")


def test_html_is_self_contained(completed: ReportFiles) -> None:
    files = completed
    page = files.html.read_text()
    images = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(images) == len(files.charts)
    assert {base64.b64decode(i)[:8] for i in images} == {PNG_MAGIC}
    assert not re.search(r'(src|href)="(?!data:)', page)  # nothing fetched from elsewhere
    assert "<script" not in page
    assert "<td class=\"num\">12.6 tok/s</td>" in page
    assert "<code>MTP_ADVERTISED_NOT_SHIPPED</code>" in page


def test_every_start_attempt_is_a_row_with_its_class_and_remedy(tmp_path: Path, record: RunRecord) -> None:
    attempts = [
        StartAttempt(attempt=1, ok=False, seconds=74.2, failure_class="out_of_memory", retryable=True,
                     action="retried after 5 s", remediation="Wait for the previous server to exit, or lower the KV pool."),
        StartAttempt(attempt=2, ok=True, seconds=161.3),
    ]
    retried = record.model_copy(update={"serve": record.serve.model_copy(update={"attempts": attempts})})
    md = write_report(retried, [], None, tmp_path).markdown.read_text()
    assert "The server needed 2 start attempt(s):" in md
    assert ("| 1 | failed | 74.2 s | out_of_memory | retried after 5 s | Wait for the previous server to exit, or lower "
            "the KV pool. |") in md
    assert "| 2 | healthy | 161.3 s |  |  |  |" in md
