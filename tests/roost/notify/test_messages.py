# ruff: noqa: RUF001  (the reports print a real minus sign)
"""Slack message building (pure): when to send, and what the Block Kit payload says."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from support.samples import dist

from roost.notify import build_message, escape, format_mention, message_kind, should_notify
from roost.records import BenchPoint, RunMeta, RunRecord, ServeObservation
from roost.regress import compare


def run(i: int, decode: float = 12.61, agg: float = 150.2) -> RunRecord:
    meta = RunMeta(run_id=f"20260301T02000{i}Z-0000000{i}", started_at=dt.datetime(2026, 3, 1 + i, tzinfo=dt.UTC),
                   roost_version="0.1.0", profile="ornith-9b", repo_id="deepreinforce/Ornith-1.0-9B", revision="main",
                   commit="4f1c2a9e8b7d6c5b4a39281706f5e4d3c2b1a098", served_model_name="ornith-9b", host="spark",
                   backend="docker", vllm_version="0.24.0", image_digest="sha256:9a8b7c6d5e4f3a2b1c0d")
    return RunRecord(
        meta=meta,
        points=[
            BenchPoint(kind="prompt_length", prompt_tokens=2042, output_tokens=256, concurrency=1, requests=3,
                       decode_tok_s=dist(decode), ttft_s=dist(0.46)),
            BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=20, requests=40,
                       output_tok_s=dist(agg)),
        ],
        decode_ceiling_tok_s=17.2,
        serve=ServeObservation(predicted_kv_cache_tokens=390070, logged_kv_cache_tokens=390070, start_to_healthy_s=161.3),
    )


def failed_run() -> RunRecord:
    return run(9).model_copy(update={
        "status": "failed", "failed_stage": "serve", "failure_class": "kv_pool_too_small", "points": [],
        "failure_message": "8.02 GiB KV cache is needed, which is larger than the available KV cache memory (4.0 GiB).",
        "remediation": "Raise --kv-cache-memory-bytes to 12884901888 (12 GiB); do not lower --max-model-len.",
        "serve": ServeObservation(),
    })


def text_of(blocks: list[dict[str, object]]) -> str:
    return json.dumps(blocks, ensure_ascii=False)


def test_kinds_and_when_they_are_sent() -> None:
    hist = [run(i) for i in range(3)]
    regressed = run(5, decode=10.8)
    assert message_kind(regressed, compare(regressed, hist)) == "regression"
    assert message_kind(run(5), compare(run(5), hist)) == "run"
    assert message_kind(failed_run(), None) == "failure"
    assert should_notify("regression", ["regression", "failure"]) and should_notify("failure", ["failure"])
    assert not should_notify("run", ["regression", "failure"])
    assert should_notify("run", ["every_run"]) and should_notify("failure", ["every_run"])
    assert not should_notify("regression", [])


def test_regression_message_lists_before_and_after_and_mentions() -> None:
    hist = [run(i) for i in range(3)]
    current = run(5, decode=10.8, agg=129.2)
    msg = build_message(current, compare(current, hist), run_url="http://127.0.0.1:4200/runs/flow-run/abc",
                        mentions=["U0ABC123", "here"])
    assert msg.text.startswith("<@U0ABC123> <!here> roost regression: ornith-9b on spark: ")
    assert msg.text.endswith("decode tok/s @ 2,042-token prompt 12.6 tok/s → 10.8 tok/s (−14.4%) and 2 more")
    body = text_of(msg.blocks)
    assert msg.blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": "roost regression: ornith-9b on spark", "emoji": True}}
    assert "*Regressed: 3 (vs the median of 3 earlier comparable runs)*" in body
    assert "• decode tok/s @ 2,042-token prompt: 12.6 tok/s → 10.8 tok/s (−14.4%)" in body
    assert "• aggregate output tok/s @ 20 concurrent: 150.2 tok/s → 129.2 tok/s (−14.0%)" in body
    assert "<http://127.0.0.1:4200/runs/flow-run/abc|Prefect flow run>" in body
    assert "*Decode tok/s @ 2,042-token prompt*\\n10.8 tok/s" in body  # headline fields: the rows every output shows
    assert "*Decode % of roofline ceiling*\\n62.8%" in body
    assert "390,070 tokens (plan 390,070)" in body
    assert msg.blocks[-1]["type"] == "context" and "4f1c2a9e8b7d" in body
    assert all(len(json.dumps(b)) < 3000 for b in msg.blocks)


def test_failure_message_names_the_stage_the_class_and_the_remediation() -> None:
    msg = build_message(failed_run(), None, mentions=["U0ABC123"])
    assert msg.text == "<@U0ABC123> roost run failed: ornith-9b on spark at serve (kv_pool_too_small)"
    body = text_of(msg.blocks)
    assert "*Stage:* serve" in body and "*Failure class:* `kv_pool_too_small`" in body
    assert "*Remediation:* Raise --kv-cache-memory-bytes to 12884901888 (12 GiB); do not lower --max-model-len." in body
    assert "Regressed" not in body


def test_routine_message_has_no_mentions_and_says_first_run() -> None:
    current = run(0)
    msg = build_message(current, compare(current, []), mentions=["U0ABC123"])
    assert "<@" not in msg.text and "<@" not in text_of(msg.blocks)
    assert msg.text == "roost run: ornith-9b on spark: decode 12.6 tok/s, peak 150.2 tok/s"
    assert "establishes the baseline" in text_of(msg.blocks)


def _with_levels(n: int) -> tuple[list[RunRecord], RunRecord]:
    """Three earlier runs and a current one with ``n`` extra concurrency levels, each half as fast now."""
    hist = [run(i) for i in range(3)]
    current = run(5, decode=5.0, agg=10.0)
    for p in range(n):
        for r in [*hist, current]:
            r.points.append(BenchPoint(kind="concurrency", prompt_tokens=2042, output_tokens=512, concurrency=30 + p,
                                       requests=4, output_tok_s=dist(100.0 if r is not current else 50.0)))
    return hist, current


def test_every_regression_is_listed() -> None:
    hist, current = _with_levels(12)
    comparison = compare(current, hist)
    assert len(comparison.regressions) == 15
    msg = build_message(current, comparison)
    body = text_of(msg.blocks)
    assert body.count("• ") == 15 and "more" not in body
    assert "*Regressed: 15 (vs the median of 3 earlier comparable runs)*" in body
    assert msg.text.endswith("and 14 more")


def test_hundreds_of_regressions_fit_slacks_limits() -> None:
    hist, current = _with_levels(600)
    comparison = compare(current, hist)
    msg = build_message(current, comparison, run_url="http://127.0.0.1:4200/runs/flow-run/abc", mentions=["here"])
    assert len(msg.blocks) <= 50
    assert all(len(b["text"]["text"]) <= 3000 for b in msg.blocks if b["type"] == "section" and "text" in b)
    body = text_of(msg.blocks)
    assert body.count("• ") == 603  # every one: 600 levels, the first 3 and the peak
    assert msg.blocks[-1]["type"] == "context" and "Prefect flow run" in body
    hist, current = _with_levels(3000)  # more than 50 sections could hold: the rest are counted
    msg = build_message(current, compare(current, hist))
    body = text_of(msg.blocks)
    assert len(msg.blocks) == 50 and msg.blocks[-1]["type"] == "context"
    listed = body.count("• ")
    assert 1000 < listed < 3003 and f"… and {3003 - listed} more" in body


def test_an_insufficient_baseline_is_said_plainly_and_alerts_nobody() -> None:
    hist = [run(i) for i in range(2)]
    current = run(5, decode=6.0)
    comparison = compare(current, hist)
    assert comparison.status == "insufficient" and message_kind(current, comparison) == "run"
    msg = build_message(current, comparison, mentions=["U0ABC123"])
    assert msg.text == "roost run: ornith-9b on spark: decode 6.00 tok/s, peak 150.2 tok/s (insufficient baseline: no verdict)"
    body = text_of(msg.blocks)
    assert ("_Insufficient baseline: 2 earlier comparable runs (`20260301T020000Z-00000000`, "
            "`20260301T020001Z-00000001`); a verdict needs 3. Nothing was judged regressed or improved._") in body
    assert "Regressed" not in body and "<@" not in body


@pytest.mark.parametrize(
    ("who", "tag"),
    [("U0ABC123", "<@U0ABC123>"), ("W0ABC", "<@W0ABC>"), ("here", "<!here>"), ("@channel", "<!channel>"),
     ("S0GROUP1", "<!subteam^S0GROUP1>"), ("<@U1>", "<@U1>"), ("alice", "@alice")],
)
def test_format_mention(who: str, tag: str) -> None:
    assert format_mention(who) == tag


def test_user_text_is_escaped() -> None:
    assert escape("a <b> & c") == "a &lt;b&gt; &amp; c"
    bad = failed_run().model_copy(update={"failure_message": "<!channel> & <http://x|y>"})
    body = text_of(build_message(bad, None).blocks)
    assert "&lt;!channel&gt; &amp; &lt;http://x|y&gt;" in body and "<!channel>" not in body
