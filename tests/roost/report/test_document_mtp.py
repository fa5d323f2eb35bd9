"""The report's MTP A/B section and the vision probe line, rendered to Markdown."""

from __future__ import annotations

from pathlib import Path

from support.samples import spark_run

from roost.records import MtpAB, PointSpeedup, SpecAcceptance, VisionProbe
from roost.report.document import build_document
from roost.report.markdown import render_markdown


def _ab(acceptance: SpecAcceptance | None) -> MtpAB:
    return MtpAB(
        speculative_config='{"method":"mtp","num_speculative_tokens":2}',
        baseline_start_to_healthy_s=95.0,
        points=[
            PointSpeedup(kind="prompt_length", prompt_tokens=2048, concurrency=1, metric="decode_tok_s",
                         with_spec=70.5, without_spec=50.0, acceptance_rate=0.78),
            PointSpeedup(kind="concurrency", prompt_tokens=2042, concurrency=16, metric="output_tok_s",
                         with_spec=440.0, without_spec=400.0),
            PointSpeedup(kind="concurrency", prompt_tokens=2042, concurrency=24, metric="output_tok_s",
                         with_spec=None, without_spec=480.0),
        ],
        acceptance=acceptance,
    )


def _markdown(tmp_path: Path, **update: object) -> str:
    record = spark_run(day=1).model_copy(update=update)
    return render_markdown(build_document(record, [], None, {}), tmp_path)


def test_mtp_section_has_the_speedups_and_the_acceptance(tmp_path: Path) -> None:
    acc = SpecAcceptance(source="metrics", drafts=300, draft_tokens=600, accepted_tokens=468, rate=0.78,
                         mean_acceptance_length=2.56, per_position=[0.86, 0.70])
    md = _markdown(tmp_path, mtp_ab=_ab(acc))
    section = md[md.index("## MTP A/B"):]
    section = section[:section.index("\n## ", 5)]
    assert '`--speculative-config {"method":"mtp","num_speculative_tokens":2}`' in section
    assert "cold start 95.0 s" in section
    assert "| 2,048 | 70.5 | 50 | 1.41x | 78.0% |" in section
    assert "| 16 | 440 | 400 | 1.10x | — |" in section
    assert "| 24 | — | 480 | — | — |" in section
    assert "78.0% of 600 draft tokens (300 drafts, mean acceptance length 2.56), from /metrics" in section
    assert "Per draft position: 1: 86.0%, 2: 70.0%." in section
    assert "| MTP speed-up @ 2,048-token prompt | 1.41x |" in md  # the summary's headline row


def test_mtp_section_says_when_there_is_no_acceptance(tmp_path: Path) -> None:
    md = _markdown(tmp_path, mtp_ab=_ab(None))
    assert "No draft acceptance: the server's /metrics had no vllm:spec_decode_* counters" in md


def test_no_ab_no_section_and_the_vision_line(tmp_path: Path) -> None:
    md = _markdown(tmp_path, vision_probe=VisionProbe(ok=False, latency_s=0.12, status_code=400, image_bytes=1234,
                                                      error="HTTP 400: not a multimodal model"))
    assert "## MTP A/B" not in md
    assert ("failed**: one chat request with a 1,234-byte PNG (image_url) in 0.12 s — HTTP 400: not a multimodal "
            "model") in md
    ok = _markdown(tmp_path, vision_probe=VisionProbe(ok=True, latency_s=0.5, status_code=200, image_bytes=1234))
    assert "passed: one chat request with a 1,234-byte PNG (image_url) in 0.5 s" in ok


def test_history_shows_the_speedup_and_acceptance_when_a_run_has_them(tmp_path: Path) -> None:
    acc = SpecAcceptance(source="log", drafts=10, draft_tokens=10, accepted_tokens=6, rate=0.6,
                         mean_acceptance_length=1.6, per_position=[0.6])
    earlier = spark_run(day=1)  # before the A/B existed: blanks in its row
    record = spark_run(day=2).model_copy(update={"mtp_ab": _ab(acc)})
    md = render_markdown(build_document(record, [earlier], None, {}), tmp_path)
    history = md[md.index("## History"):]
    assert "| MTP speed-up | Draft acceptance |" in history
    assert "| 1.41x | 60.0% |" in history and "| — | — |" in history
    plain = render_markdown(build_document(spark_run(day=2), [earlier], None, {}), tmp_path)
    assert "MTP speed-up" not in plain[plain.index("## History"):]
