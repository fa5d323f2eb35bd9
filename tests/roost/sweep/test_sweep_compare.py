"""A sweep's comparison: a row per variant, the best one named only when its margin over the runner-up
exceeds the noise band (the regression check's rule), the rendered table and what is missing."""

from __future__ import annotations

import json

import pandas as pd
from support.samples import concurrency_point, spark_run

from roost import catalogue as C
from roost.records import RunRecord
from roost.sweep.compare import compare
from roost.sweep.earlier import host_images, measured_earlier
from roost.sweep.grid import parse_grid, variants
from roost.sweep.report import render, table_rows
from roost.sweep.state import VariantState


def with_peak(run_id: str, peak: float, spread: float = 0.01) -> RunRecord:
    rec = spark_run(day=1, run_id=run_id)
    pts = [p for p in rec.points if p.kind != "concurrency"]
    for c, a in [(1, 12.6), (16, peak * 0.9), (20, peak), (24, peak * 0.95)]:
        p = concurrency_point(c, a)
        p.output_tok_s = p.output_tok_s.model_copy(update={"count": 3, "min": a * (1 - spread), "max": a * (1 + spread)})
        pts.append(p)
    return rec.model_copy(update={"points": pts})


def states(*runs: str) -> list[VariantState]:
    vs = variants(parse_grid([f"max-num-seqs={','.join(str(16 + 4 * i) for i in range(len(runs)))}"]))
    return [VariantState(variant=v, status="done", run_id=r, host="spark") for v, r in zip(vs, runs, strict=True)]


def test_the_best_variant_is_named_with_its_margin_beyond_the_noise_band() -> None:
    recs = {"r16": with_peak("r16", 400.0), "r20": with_peak("r20", 490.3), "r24": with_peak("r24", 405.7)}
    cmp = compare(states("r16", "r20", "r24"), recs)
    assert cmp.best is not None and cmp.best.variant == "max-num-seqs=20" and cmp.best.clear
    assert cmp.best.runner_up == "max-num-seqs=24"
    assert cmp.best.margin is not None and abs(cmp.best.margin - 84.6) < 0.01
    assert cmp.best.noise_band is not None and cmp.best.noise_band >= 0.05 * 405.7
    assert cmp.concurrencies == [1, 16, 20, 24]
    assert cmp.summary.startswith("best: max-num-seqs=20 at 490.3 tok/s, 84.6 tok/s better than max-num-seqs=24")
    md = render(cmp, title="sweep")
    assert "**(best)**" in md
    assert "| tok/s @ 1 | tok/s @ 16 | tok/s @ 20 | tok/s @ 24 | run |" in md
    rows = table_rows(cmp)
    assert rows[1]["variant"].startswith("`max-num-seqs=20`") and rows[1]["tok/s @ 20"] == C.OUTPUT_THROUGHPUT.format(490.3)


def test_within_the_noise_band_no_winner_is_named() -> None:
    recs = {"a": with_peak("a", 480.0, spread=0.2), "b": with_peak("b", 490.0, spread=0.2)}
    cmp = compare(states("a", "b"), recs)
    assert cmp.best is not None and not cmp.best.clear
    assert cmp.summary.startswith("no clear best: max-num-seqs=20 (490.0 tok/s) and max-num-seqs=16 (480.0 tok/s)")
    assert "**(best)**" not in render(cmp, title="sweep")


def test_missing_failed_and_refused_variants_are_named_with_why() -> None:
    vs = states("a", "b", "c")
    vs[1].status, vs[1].reason, vs[1].run_id = "missing", "the landing crashed (worker died)", ""
    vs[2].status, vs[2].reason, vs[2].run_id = "refused", "a 1-byte KV pool cannot hold one request", ""
    cmp = compare(vs, {"a": with_peak("a", 300.0)}, objective="decode")
    assert cmp.missing == ["max-num-seqs=20: the landing crashed (worker died)"]
    md = render(cmp, title="sweep")
    assert "`max-num-seqs=20`: MISSING on spark: the landing crashed (worker died)" in md
    assert "`max-num-seqs=24`: refused by the plan: a 1-byte KV pool" in md
    assert "Run the sweep again to measure the missing variants" in md
    assert cmp.summary.startswith("only max-num-seqs=16 measured decode tok/s")


def test_a_variant_measured_before_on_the_hosts_current_image_is_found() -> None:
    args = ["--max-num-seqs", "20"]
    base = {"status": "completed", "profile": "p", "repo_id": "m", "commit": "c1", "vllm_args": json.dumps(args),
            "image_digest": "sha:a", "vllm_version": "0.24"}
    rows = pd.DataFrame([
        {**base, "run_id": "r1", "started_at": pd.Timestamp("2026-11-01", tz="UTC"), "host_name": "spark"},
        {**base, "run_id": "r2", "started_at": pd.Timestamp("2026-11-02", tz="UTC"), "host_name": "spark-2"},
        {**base, "run_id": "r3", "started_at": pd.Timestamp("2026-11-03", tz="UTC"), "host_name": "spark",
         "profile": "p-longer-bench"},  # the same flags measured with other benchmark settings: not this profile's
        {**base, "run_id": "r4", "started_at": pd.Timestamp("2026-11-04", tz="UTC"), "repo_id": "other", "commit": "x",
         "vllm_args": "[]", "host_name": "spark-2", "image_digest": "sha:b", "vllm_version": "0.25"},
    ])
    images = host_images(rows, ["spark", "spark-2"])
    assert images == {"spark": ("sha:a", "0.24"), "spark-2": ("sha:b", "0.25")}  # spark-2 was rebuilt since r2
    found = measured_earlier(rows, "p", "m", "c1", args, ["spark", "spark-2"], images)
    assert [r["run_id"] for r in found] == ["r1"]
    assert [r["run_id"] for r in measured_earlier(rows, "p-longer-bench", "m", "c1", args, ["spark"], images)] == ["r3"]
    assert measured_earlier(rows, "p", "m", "c1", args, ["spark-2"], images) == []
    assert measured_earlier(rows, "p", "m", "c2", args, ["spark"], images) == []
    assert measured_earlier(rows, "p", "m", "c1", ["--max-num-seqs", "16"], ["spark"], images) == []
