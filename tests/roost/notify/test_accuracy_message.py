# ruff: noqa: RUF001  (the messages print an en dash in intervals)
"""Slack messages of runs with accuracy evaluations (pure): a significant loss on the same questions is
a ``regression`` message naming the categories that moved; noise is a routine ``run`` message; every
message stays within Block Kit's limits (``support.slack_receiver.block_kit_errors``, as Slack holds them)."""

from __future__ import annotations

import json
from collections.abc import Collection

from support.samples import earlier_runs, spark_run
from support.slack_receiver import block_kit_errors

from roost.eval.datasets import DatasetInfo
from roost.eval.scoring import paired, summarize
from roost.eval.suites import Sampling
from roost.notify import SlackMessage, accuracy_line, build_message, message_kind
from roost.records import EvalRecord, RunRecord
from roost.regress import compare

BASELINE_RUN = "20260301T020000Z-00000001"
BASE = {f"q{i}": ("law" if i % 2 == 0 else "math", i not in {1, 3, 5, 7, 9}) for i in range(40)}  # 35 of 40
LAW_LOST = set(range(0, 24, 2))  # 12 law questions right before, wrong now: McNemar p = 2 / 2**12


def evaluation(lost: Collection[int], gained: Collection[int] = (), *, task: str = "mmlu-pro",
               base: dict[str, tuple[str, bool]] | None = None, error: str = "") -> EvalRecord:
    base = base if base is not None else BASE
    now = {q: (cat, (ok and int(q[1:]) not in lost) or int(q[1:]) in gained) for q, (cat, ok) in base.items()}
    return EvalRecord(task=task, status="failed" if error else "completed", error=error,
                      dataset=DatasetInfo(source="/data/mmlu-pro.parquet", revision="sha256:01"),
                      sampling=Sampling(temperature=0.0, thinking=False, concurrency=8), sample_digest="5eed",
                      summary=summarize({"verdict": "correct" if ok else "wrong", "category": c} for c, ok in now.values()),
                      baseline_run_id=BASELINE_RUN, comparison=paired(base, now))


def with_evals(rec: RunRecord, *evals: EvalRecord) -> RunRecord:
    return rec.model_copy(update={"evals": list(evals)})


def payload(msg: SlackMessage) -> dict[str, object]:
    return {"channel": "C0ROOSTALERTS", "text": msg.text, "blocks": msg.blocks}


def accuracy_block(msg: SlackMessage) -> str:
    (block,) = [b for b in msg.blocks if b["type"] == "section" and b.get("text", {}).get("text", "").startswith(
        "*Accuracy*")]
    return str(block["text"]["text"])


def test_an_accuracy_only_regression_is_a_regression_message_naming_the_categories() -> None:
    current = with_evals(spark_run(day=9), evaluation(LAW_LOST))
    speed = compare(current, earlier_runs(4))
    assert speed.status == "ok"
    assert message_kind(current, speed) == "regression" and message_kind(current, None) == "regression"
    msg = build_message(current, speed, mentions=["U0ONCALL"], run_url="http://127.0.0.1:4200/runs/flow-run/x")
    assert block_kit_errors(payload(msg)) == []
    assert msg.text == ("<@U0ONCALL> roost regression: ornith-9b on spark: MMLU-Pro: 57.5% (95% CI 42.2–71.5%) on 40; "
                        f"-30.0 points vs run {BASELINE_RUN} (lost 12, gained 0; McNemar p = 0.00049, significant); "
                        "moved: law lost 12, gained 0")
    assert msg.blocks[0] == {"type": "header", "text": {"type": "plain_text", "text": "roost regression: ornith-9b on spark",
                                                        "emoji": True}}
    text = accuracy_block(msg)
    assert "MMLU-Pro: 57.5%" in text and "lost 12, gained 0" in text and "moved: law lost 12, gained 0" in text
    assert "math" not in text  # only the categories that moved
    assert "Regressed:" not in json.dumps(msg.blocks)  # no speed metric regressed


def test_speed_and_accuracy_regressions_are_both_in_the_message() -> None:
    current = with_evals(spark_run(day=9, scale=0.5), evaluation(LAW_LOST))
    speed = compare(current, earlier_runs(4))
    assert speed.regressions
    msg = build_message(current, speed, mentions=["U0ONCALL"])
    assert block_kit_errors(payload(msg)) == []
    assert msg.text.startswith("<@U0ONCALL> roost regression: ornith-9b on spark: MMLU-Pro: 57.5%")
    assert msg.text.endswith(f" and {len(speed.regressions)} more")  # the speed regressions, counted
    blocks = json.dumps(msg.blocks, ensure_ascii=False)
    assert f"Regressed: {len(speed.regressions)}" in blocks
    assert all(c.metric.label in blocks for c in speed.regressions)
    assert "moved: law lost 12, gained 0" in accuracy_block(msg)


def test_noise_is_a_routine_run_message() -> None:
    noise = with_evals(spark_run(day=9), evaluation({0, 2}, {1, 3}))  # 2 flips each way: p = 1
    speed = compare(noise, earlier_runs(4))
    assert message_kind(noise, speed) == "run"
    msg = build_message(noise, speed, mentions=["U0ONCALL"])
    assert block_kit_errors(payload(msg)) == []
    assert msg.text.startswith("roost run: ornith-9b on spark: decode ") and "U0ONCALL" not in json.dumps(payload(msg))
    text = accuracy_block(msg)
    assert f"+0.0 points vs run {BASELINE_RUN} (lost 2, gained 2; McNemar p = 1)" in text
    assert "significant" not in text and "moved" not in text


def test_accuracy_line_names_a_stopped_evaluation_and_escapes_markup() -> None:
    stopped = evaluation(LAW_LOST, error="the server stopped answering (HTTP 503: <html>, 3 attempts)")
    assert "(stopped: the server stopped answering (HTTP 503: &lt;html&gt;, 3 attempts))" in accuracy_line(stopped)
    assert "<html>" in accuracy_line(stopped, markup=False)
    unpaired = evaluation(()).model_copy(update={"comparison": None})
    assert accuracy_line(unpaired) == "MMLU-Pro: 87.5% (95% CI 73.9–94.5%) on 40"


MMLU_PRO_CATEGORIES = ["biology", "business", "chemistry", "computer science", "economics", "engineering", "health",
                       "history", "law", "math", "other", "philosophy", "physics", "psychology"]


def test_many_evaluations_and_categories_stay_within_block_kit_limits() -> None:
    """The recipe's three tasks on a full sample, every MMLU-Pro category moved, a long error, many speed
    regressions, and then forty evaluations more: the message is still one Slack accepts."""
    n = 50 * len(MMLU_PRO_CATEGORIES)
    base = {f"q{i}": (MMLU_PRO_CATEGORIES[i % len(MMLU_PRO_CATEGORIES)], True) for i in range(n)}
    evals = [evaluation(set(range(0, n, 3)), base=base),
             evaluation(set(range(0, 500, 4)), task="gsm8k",
                        base={f"q{i}": ("", True) for i in range(500)}, error="x" * 5000),
             evaluation(set(range(0, 500, 5)), task="math500",
                        base={f"q{i}": (f"subject {i % 7} & more <tags>", True) for i in range(500)})]
    current = with_evals(spark_run(day=9, scale=0.3), *evals)
    speed = compare(current, earlier_runs(4))
    msg = build_message(current, speed, mentions=["U0ONCALL", "here"], report_location="/results/" + "r" * 4000)
    assert block_kit_errors(payload(msg)) == []
    text = accuracy_block(msg)
    assert "MMLU-Pro" in text and "moved: " in text and "&amp; more &lt;tags&gt;" in text
    assert len(current.accuracy_regressions) == 3 and msg.text.endswith(f" and {len(speed.regressions) + 2} more")

    crowded = with_evals(current, *evals, *(evaluation(LAW_LOST) for _ in range(40)))
    msg = build_message(crowded, speed, mentions=["U0ONCALL"])
    assert len("\n".join(accuracy_line(e) for e in crowded.evals)) > 3000  # more than one section holds
    assert block_kit_errors(payload(msg)) == []
    assert accuracy_block(msg).startswith("*Accuracy*\nMMLU-Pro: ")
