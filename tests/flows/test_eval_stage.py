"""The accuracy stages inside a flow: ``eval_datasets_stage`` reads and samples the profile's MMLU-Pro
file, ``eval_stage`` asks every question of the FAKE ScriptedServer (tests/support/eval_server.py: a real
vLLM cannot be made to answer a known subset right), stores the answers and pairs them with the newest
earlier run's (McNemar), ``report_stage`` stores the run, writes the report and posts to Slack.

Three runs of one profile into a temporary results store: a baseline (35 of 40 right), a planted
regression (12 law questions now wrong: significant, the run's verdict is ``regressed``, the Slack
message says so and names law), then noise against it (2 flips each way: not significant).

Real parts: the flow and its Prefect tasks against a temporary Prefect server (no PREFECT_API_URL), the
results store, the report, the Slack delivery through slack-sdk to the local receiver (which refuses
what Slack would), the notifier block saved in that server.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from prefect import flow
from pydantic import SecretStr
from support.eval_server import Reply, ScriptedServer, question_of
from support.slack import bot
from support.slack_receiver import SlackReceiver, block_kit_errors

from roost.hosts import CPU
from roost.naming import run_verdict
from roost.profiles import LOCAL, ModelProfile
from roost.records import RunRecord
from roost.regress import RegressionReport

pytestmark = pytest.mark.slow  # ~20 s to start the temporary Prefect server, ~12 s for each three runs

CATEGORIES = ("law", "math")
PER_CATEGORY = 20
LETTERS = "ABCD"


def right_letter(cat: str, i: int) -> str:
    return LETTERS[(CATEGORIES.index(cat) + i) % 4]


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    """40 MMLU-Pro questions in the upstream columns, 20 law and 20 math."""
    rows = [{"question_id": 100 * c + i, "question": f"{cat} question {i}?",
             "options": [f"{cat} {i} option {j}" for j in range(4)], "answer": right_letter(cat, i),
             "answer_index": LETTERS.index(right_letter(cat, i)), "cot_content": "", "category": cat, "src": "test"}
            for c, cat in enumerate(CATEGORIES) for i in range(PER_CATEGORY)]
    path = tmp_path / "mmlu-pro" / "test-00000-of-00001.parquet"
    path.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


class Script:
    """What the FAKE server answers: every question right but those in ``wrong`` ((category, index))."""

    def __init__(self) -> None:
        self.wrong: set[tuple[str, int]] = set()

    def __call__(self, body: dict[str, Any]) -> Reply:
        m = re.search(r"^(\w+) question (\d+)\?$", question_of(body), re.M)
        assert m, question_of(body)
        cat, i = m.group(1), int(m.group(2))
        right = right_letter(cat, i)
        letter = LETTERS[(LETTERS.index(right) + 1) % 4] if (cat, i) in self.wrong else right
        return Reply(content=f"Step by step.\nANSWER: {letter}", completion_tokens=40 + i)


def profile_for(dataset: Path, temperature: float) -> ModelProfile:
    return LOCAL.model_copy(update={
        "name": "eval-stage", "repo_id": "acme/eval-stage", "served_model_name": "eval-stage", "demo": False,
        "evals": [{"task": "mmlu-pro", "dataset": str(dataset), "per_category": PER_CATEGORY,
                   "temperature": temperature, "thinking": False, "concurrency": 8}]})


@pytest.fixture
def slack(slack_receiver: SlackReceiver) -> Iterator[SlackReceiver]:
    """A SlackNotifier block posting every run to the local receiver, saved under the name the notify
    stage loads (in the temporary Prefect server); deleted afterwards."""
    from blocks.slack import SlackNotifier
    from tasks.notify import DEFAULT_BLOCK

    bot(slack_receiver, notify_on=["every_run", "regression", "failure"]).save(DEFAULT_BLOCK, overwrite=True)
    try:
        yield slack_receiver
    finally:
        SlackNotifier.delete(DEFAULT_BLOCK)
        _flush_run_logs()


def _flush_run_logs() -> None:
    """Send the flow runs' buffered log lines while the temporary server still runs (the session stops
    it before Prefect's exit hook would flush them, and that hook then retries for a minute)."""
    from prefect.logging.handlers import APILogHandler

    APILogHandler().flush()


@flow(name="eval-stage-test", persist_result=False)
def evaluate_and_report(prof: ModelProfile, base_url: str) -> tuple[RunRecord, RegressionReport | None]:
    """What ``land`` does around a served model, minus the serving: datasets, evaluation, report."""
    from flows.lifecycle import new_record
    from flows.stages import eval_datasets_stage, eval_stage, report_stage

    record = new_record(prof, CPU)
    record.meta.commit = "c0ffee" * 6 + "c0ff"
    prepared = eval_datasets_stage(record, prof)
    eval_stage(record, base_url, prof, SecretStr(""), prepared)
    comparison = report_stage(record, notify=True, prof=prof, host=CPU)
    return record, comparison


def post_of(slack: SlackReceiver, record: RunRecord) -> dict[str, Any]:
    """The run's own message (its context line names it; a later run's names it as its baseline)."""
    own = f"run `{record.meta.run_id}`"
    (post,) = [c.json() for c in slack.calls("chat.postMessage")
               if any(own in e.get("text", "") for b in c.json()["blocks"] if b["type"] == "context"
                      for e in b["elements"])]
    assert block_kit_errors(post) == []
    return dict(post)


@pytest.mark.parametrize("temperature", [0.0, 0])
def test_a_planted_accuracy_regression_is_caught_reported_and_sent(
    temperature: float, dataset: Path, slack: SlackReceiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from roost.store import load_eval_answers, load_evals

    profile = profile_for(dataset, temperature)
    results = tmp_path / "results"
    monkeypatch.setenv("ROOST_RESULTS_DIR", str(results))
    script = Script()
    with ScriptedServer(script, model=profile.served_model_name) as server:
        # run 1: the baseline, 35 of 40 right (5 math questions wrong)
        script.wrong = {("math", i) for i in range(5)}
        first, first_cmp = evaluate_and_report(profile, server.url)
        asked_first = len(server.requests)
        # run 2: 12 law questions right in run 1 are wrong now
        script.wrong |= {("law", i) for i in range(12)}
        second, second_cmp = evaluate_and_report(profile, server.url)
        # run 3: the law questions fixed, plus noise: 2 flips each way against run 1 (run 2 regressed, so the
        # baseline stays run 1)
        script.wrong = ({("math", i) for i in range(5)} - {("math", 0), ("math", 1)}) | {("law", 12), ("law", 13)}
        third, third_cmp = evaluate_and_report(profile, server.url)
    assert asked_first == 40 and len(server.requests) == 120  # every question asked once per run, none resumed
    body = server.requests[0]
    assert body["temperature"] == 0 and body["chat_template_kwargs"] == {"enable_thinking": False}

    # run 1: scored, stored, nothing to pair with
    (ev1,) = first.evals
    assert first.status == "completed" and ev1.status == "completed"
    assert (ev1.summary.n, ev1.summary.correct) == (40, 35) and ev1.comparison is None and ev1.baseline_run_id == ""
    assert {s.stage for s in first.stages} >= {"eval-datasets", "evaluate", "report"}
    assert run_verdict(first, first_cmp).kind == "baseline"

    # run 2: the planted regression
    (ev2,) = second.evals
    c = ev2.comparison
    assert second.meta.started_at > first.meta.started_at and ev2.baseline_run_id == first.meta.run_id
    assert c is not None and c.significant and c.direction == "worse" and (c.lost, c.gained, c.pairs) == (12, 0, 40)
    assert [m.category for m in c.categories] == ["law"] and c.categories[0].lost == 12
    assert ev2.baseline is not None and ev2.baseline.accuracy == pytest.approx(35 / 40)
    assert ev2.summary.per_category["law"].correct == 8
    assert second.accuracy_regressions == [ev2]
    verdict = run_verdict(second, second_cmp)
    assert verdict.kind == "regressed" and "mmlu-pro accuracy -30.0 points" in verdict.message, verdict

    # run 3: noise against run 1 (the last run that did not regress)
    (ev3,) = third.evals
    c3 = ev3.comparison
    assert ev3.baseline_run_id == first.meta.run_id
    assert c3 is not None and not c3.significant and c3.direction == "same" and (c3.lost, c3.gained) == (2, 2)
    assert third.accuracy_regressions == [] and run_verdict(third, third_cmp).kind != "regressed"

    # the store: one evals row per run, every answer per question
    evals = load_evals(results)
    assert list(evals["run_id"]) == [first.meta.run_id, second.meta.run_id, third.meta.run_id]
    assert list(evals["correct"]) == [35, 23, 35] and list(evals["paired_significant"].fillna(False)) == [False, True, False]
    answers = load_eval_answers(second.meta.run_id, "mmlu-pro", results)
    assert len(answers) == 40 and answers["question_id"].is_unique
    assert sorted(answers[answers["verdict"] == "wrong"]["category"]) == ["law"] * 12 + ["math"] * 5

    # the report
    md = Path(second.report_path).read_text()
    assert Path(second.report_path).is_relative_to(results)
    section = md[md.index("## Accuracy"):]
    assert "| law | 20 | 12 | 0 |" in section and "accuracy_mmlu-pro.png" in section
    assert (Path(second.report_path).parent / "charts" / "accuracy_mmlu-pro.png").is_file()

    # Slack: the regression message names the accuracy loss and law; the others are routine
    assert slack.rejected == []
    post = post_of(slack, second)
    assert post["text"].startswith("<@U0ONCALL> roost regression: eval-stage on cpu: MMLU-Pro: 57.5%"), post["text"]
    assert "lost 12, gained 0" in post["text"] and "moved: law lost 12, gained 0" in post["text"]
    accuracy = [b["text"]["text"] for b in post["blocks"] if b.get("text", {}).get("text", "").startswith("*Accuracy*")]
    assert len(accuracy) == 1 and "law lost 12" in accuracy[0] and "significant" in accuracy[0]
    for routine in (first, third):
        assert post_of(slack, routine)["text"].startswith("roost run: eval-stage on cpu")
