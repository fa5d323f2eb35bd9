"""Run records across schema versions: what roost 0.1 stored (schema 1: flat statistics) reads as
schema 2 (statistics nested per metric), number for number."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from roost.records import SCHEMA_VERSION, BenchPoint, Distribution, RunRecord, StartAttempt, upgrade_point

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "results-v1"
RECORDS = sorted((FIXTURE / "records").rglob("*.json"))


def test_the_fixture_is_what_roost_0_1_wrote() -> None:
    assert len(RECORDS) == 5
    for path in RECORDS:
        raw = json.loads(path.read_text())
        assert raw["schema_version"] == 1
        for p in raw["points"]:
            assert "ttft_s_median" in p and not isinstance(p.get("ttft_s"), dict)


@pytest.mark.parametrize("path", RECORDS, ids=[p.stem for p in RECORDS])
def test_a_schema_1_record_reads_with_every_statistic_in_place(path: Path) -> None:
    raw = json.loads(path.read_text())
    record = RunRecord.model_validate_json(path.read_bytes())
    assert record.schema_version == SCHEMA_VERSION == 2
    assert len(record.points) == len(raw["points"])
    for old, new in zip(raw["points"], record.points, strict=True):
        assert new.ttft_s.median == old["ttft_s_median"] and new.ttft_s.p90 == old["ttft_s_p90"]
        assert new.ttft_s.min == old["ttft_s_min"] and new.ttft_s.max == old["ttft_s_max"]
        assert new.tpot_s.median == old["tpot_s_median"] and new.itl_s.p99 == old["itl_s_p99"]
        assert (new.decode_tok_s.median, new.decode_tok_s.min, new.decode_tok_s.max, new.decode_tok_s.p10) == (
            old["decode_tok_s_median"], old["decode_tok_s_min"], old["decode_tok_s_max"], old["decode_tok_s_p10"])
        assert new.output_tok_s.median == old["output_tok_s"] and new.request_rate.median == old["request_rate"]
        assert (new.output_tok_s.min, new.output_tok_s.max) == (old["output_tok_s_min"], old["output_tok_s_max"])
        assert new.metrics_delta == old["metrics_delta"]
        if old["ttft_s_median"] is not None:
            assert new.ttft_s.count is None  # schema 1 kept no sample sizes: not invented
    for old_a, new_a in zip(raw["serve"]["attempts"], record.serve.attempts, strict=True):
        healthy = old_a.get("ok", old_a.get("outcome") == "healthy")  # the hand-built samples said "outcome"
        assert isinstance(new_a, StartAttempt) and new_a.attempt == old_a["attempt"] and new_a.ok is healthy
    # and it round-trips as schema 2
    again = RunRecord.model_validate_json(record.model_dump_json())
    assert again == record


def test_upgrade_point_nests_each_statistic_and_leaves_the_rest() -> None:
    old = {"kind": "concurrency", "prompt_tokens": 512, "output_tokens": 64, "concurrency": 4, "requests": 8,
           "errors": 1, "ttft_s_median": 1.4, "ttft_s_p99": 1.6, "output_tok_s": 127.5, "output_tok_s_min": 124.0,
           "request_rate": 2.0, "decode_tok_s_p10": 90.0, "metrics_delta": {"generation_tokens": 512.0}}
    new = upgrade_point(old)
    assert new["ttft_s"] == {"median": 1.4, "p99": 1.6, "count": None}
    assert new["output_tok_s"] == {"median": 127.5, "min": 124.0, "count": None}
    assert new["request_rate"] == {"median": 2.0, "count": None}
    assert new["decode_tok_s"] == {"p10": 90.0, "count": None}
    assert new["errors"] == 1 and new["metrics_delta"] == {"generation_tokens": 512.0}
    point = BenchPoint.model_validate(old)
    assert point.output_tok_s == Distribution(count=None, median=127.5, min=124.0)
    assert point.measured  # 7 of 8 requests completed


def test_a_record_from_a_newer_release_is_refused_naming_the_field() -> None:
    raw = json.loads(RECORDS[0].read_text())
    raw["schema_version"] = SCHEMA_VERSION + 1
    raw["points"] = [{**raw["points"][0], "brand_new_stat": 1}] if raw["points"] else []
    raw["meta"]["backend"] = "kubernetes"
    with pytest.raises(ValueError, match="backend"):
        RunRecord.model_validate(raw)
