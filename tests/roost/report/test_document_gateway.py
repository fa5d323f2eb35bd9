"""The report's "Through the gateway" section: per point direct and through the gateway, the hop
(``roost.bench.gateway_hop``), the metering check, and each reason a kept server was measured
directly only."""

from __future__ import annotations

from pathlib import Path

from support.samples import concurrency_point, prompt_point, spark_run

from roost.bench.gateway_hop import hop_points, summarize
from roost.records import GatewayPass, RunRecord, Usage
from roost.report.document import build_document
from roost.report.markdown import render_markdown


def _section(tmp_path: Path, record: RunRecord) -> str:
    md = render_markdown(build_document(record, [], None, {}), tmp_path)
    section = md[md.index("## Through the gateway"):]
    return section[:section.index("\n## ", 5)]


def _via(record: RunRecord) -> list:  # type: ignore[type-arg]
    """The record's points as the gateway delivered them: 1.2 ms more to the first token, 2% less throughput
    at 16 users (and the 24-user point not measured through it)."""
    out = []
    for p in record.points:
        if p.kind == "concurrency" and p.concurrency == 24:
            continue
        ttft = p.ttft_s.model_copy(update={"median": p.ttft_s.median + 0.0012,
                                           "p99": None if p.ttft_s.p99 is None else p.ttft_s.p99 + 0.004})
        rate = p.output_tok_s.model_copy(update={"median": p.output_tok_s.median * (0.98 if p.concurrency == 16 else 1)})
        out.append(p.model_copy(update={"ttft_s": ttft, "output_tok_s": rate}))
    return out


def test_hop_pairs_points_measured_both_ways() -> None:
    direct = [prompt_point(2048, 50.0, 0.5), concurrency_point(16, 400.0), concurrency_point(24, 480.0)]
    via = [prompt_point(2048, 50.0, 0.5, ttft_scale=1.004), concurrency_point(16, 392.0, ttft_scale=1.01)]
    hops = hop_points(direct, via)
    assert [(h.kind, h.concurrency) for h in hops] == [("prompt_length", 1), ("concurrency", 16)]
    assert round(hops[0].added_ttft_ms or 0, 3) == 2.0  # 0.5 s x 0.004
    assert round(hops[1].throughput_ratio or 0, 3) == 0.98
    s = summarize(hops)
    assert s.points == 2 and round(s.throughput_ratio_min or 0, 3) == 0.98
    assert summarize([]).added_ttft_ms_median is None


def test_section_shows_each_point_both_ways_and_the_metering(tmp_path: Path) -> None:
    record = spark_run(day=1)
    record.points = [prompt_point(2048, 50.0, 0.5), concurrency_point(16, 400.0), concurrency_point(24, 480.0)]
    used = Usage(requests=53, prompt_tokens=108_000, completion_tokens=27_000)
    record.gateway = GatewayPass(url="http://127.0.0.1:8080", key_name="roost-benchmark-spark", points=_via(record),
                                 counted=used, metered=used)
    section = _section(tmp_path, record)
    assert "`http://127.0.0.1:8080`" in section
    assert "| 2,048-token prompt | 500 | 501 | 1.2 |" in section
    assert "| 16 concurrent |" in section and "| 0.98x |" in section
    assert "24 concurrent" not in section  # not measured through the gateway: no pair
    assert "key `roost-benchmark-spark` (kind app" in section and "the gateway metered exactly that" in section
    record.gateway = record.gateway.model_copy(update={"metered": used.model_copy(update={"completion_tokens": 26_990})})
    assert "**the gateway metered 53 requests, 108,000 prompt and 26,990 completion tokens**" in _section(tmp_path, record)


def test_a_kept_server_measured_directly_only_says_why(tmp_path: Path) -> None:
    record = spark_run(day=1)
    record.gateway = GatewayPass(url="", status="skipped", note="no gateway answers at http://127.0.0.1:8080 (ConnectError)")
    assert "Measured directly only: no gateway answers at http://127.0.0.1:8080 (ConnectError)." in _section(tmp_path, record)
    record.gateway = None  # a run that kept no server: no section
    md = render_markdown(build_document(record, [], None, {}), tmp_path)
    assert "Through the gateway" not in md
    old = RunRecord.model_validate_json(spark_run(day=1).model_dump_json(exclude={"gateway"}))  # a record from before
    assert old.gateway is None
