"""The MTP A/B and the vision probe in the headline rows and the compared metrics: so the report, the
Slack message, the history and the regression check all carry them."""

from __future__ import annotations

import pytest
from support.samples import spark_run

from roost.bench import mtp
from roost.headline import headline, headline_rows, run_metrics
from roost.records import BenchPoint, MtpAB, PointSpeedup, RunRecord, SpecAcceptance, VisionProbe
from roost.regress import compare


def _ab(decode_speedup: float, acceptance: float) -> MtpAB:
    def pt(kind: str, prompt: int, conc: int, with_spec: float, without: float) -> PointSpeedup:
        return PointSpeedup(kind=kind, prompt_tokens=prompt, concurrency=conc,  # type: ignore[arg-type]
                            metric="decode_tok_s" if kind == "prompt_length" else "output_tok_s",
                            with_spec=with_spec, without_spec=without)

    return MtpAB(
        speculative_config='{"method":"mtp","num_speculative_tokens":1}',
        points=[pt("prompt_length", 512, 1, 60.0, 50.0), pt("prompt_length", 2048, 1, 50.0 * decode_speedup, 50.0),
                pt("concurrency", 2042, 16, 440.0, 400.0)],
        acceptance=SpecAcceptance(source="metrics", drafts=100, draft_tokens=100, accepted_tokens=100 * acceptance,
                                  rate=acceptance, mean_acceptance_length=1 + acceptance, per_position=[acceptance]),
    )


def _run(day: int, decode_speedup: float = 1.41, acceptance: float = 0.8) -> RunRecord:
    return spark_run(day=day).model_copy(update={"mtp_ab": _ab(decode_speedup, acceptance)})


def test_rows_show_speedup_at_the_reference_prompt_and_acceptance() -> None:
    rec = _run(1).model_copy(update={"vision_probe": VisionProbe(ok=True, latency_s=0.42, status_code=200)})
    h = headline(rec)
    assert h.mtp_speedup == pytest.approx(1.41) and h.mtp_speedup_prompt_tokens == 2048
    assert h.spec_acceptance_rate == pytest.approx(80.0)
    rows = {r.metric.name: r for r in headline_rows(rec)}
    assert rows["mtp_speedup@prompt=2048"].text == "1.41x"
    assert rows["mtp_speedup@prompt=2048"].compared_as == "mtp_speedup@prompt=2048"
    assert rows["spec_acceptance_rate"].text == "80.0%" and rows["spec_acceptance_rate"].compared_as
    assert rows["vision_probe_latency_s"].text == "passed in 0.42 s"
    assert rows["vision_probe_latency_s"].compared_as is None


def test_a_run_without_them_has_no_such_rows() -> None:
    names = {r.metric.name for r in headline_rows(spark_run(day=1))}
    assert not {n for n in names if n.startswith(("mtp_", "spec_", "vision_"))}


def test_speedups_and_acceptance_are_compared_metrics() -> None:
    names = {m.metric.name: m.value for m in run_metrics(_run(1))}
    assert names["mtp_speedup@prompt=512"] == pytest.approx(1.2)
    assert names["mtp_speedup@prompt=2048"] == pytest.approx(1.41)
    assert names["mtp_speedup@concurrency=16"] == pytest.approx(1.1)
    assert names["spec_acceptance_rate"] == pytest.approx(80.0)


def test_a_drop_in_acceptance_and_speedup_is_a_regression() -> None:
    history = [_run(d, 1.41 + 0.01 * (d % 2), 0.80) for d in range(1, 5)]
    report = compare(_run(5, 1.10, 0.55), history)
    verdicts = {c.metric.name: c.verdict for c in report.comparisons}
    assert verdicts["mtp_speedup@prompt=2048"] == "regressed"
    assert verdicts["spec_acceptance_rate"] == "regressed"
    assert verdicts["mtp_speedup@concurrency=16"] == "unchanged"


def test_the_record_keeps_them_and_old_records_read() -> None:
    rec = _run(1).model_copy(update={"vision_probe": VisionProbe(ok=False, error="HTTP 400: no images")})
    again = RunRecord.model_validate_json(rec.model_dump_json())
    assert again.mtp_ab is not None and mtp.reference(again.mtp_ab) is not None
    assert again.vision_probe is not None and again.vision_probe.error == "HTTP 400: no images"
    old = rec.model_dump(mode="json")
    del old["mtp_ab"], old["vision_probe"]
    back = RunRecord.model_validate(old)
    assert back.mtp_ab is None and back.vision_probe is None


def test_baseline_points_are_bench_points() -> None:
    ab = _ab(1.41, 0.8)
    ab.baseline_points = [BenchPoint(kind="prompt_length", prompt_tokens=2048, output_tokens=64, concurrency=1,
                                     requests=3)]
    assert MtpAB.model_validate(ab.model_dump(mode="json")).baseline_points[0].prompt_tokens == 2048
