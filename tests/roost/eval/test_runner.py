"""run_eval against the FAKE ScriptedServer (tests/support/eval_server.py): exact scores from a
known script, what each request carries, resuming from a log, and the paired test on two runs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.eval_server import Reply, ScriptedServer, question_of

from roost.errors import UserError
from roost.eval.datasets import load_dataset
from roost.eval.log import read_answers
from roost.eval.runner import EvalResult, EvalServerGone, EvalSettings, request_seed, run_eval
from roost.eval.scoring import paired, wilson
from roost.eval.suites import get_task

MMLU = get_task("mmlu-pro")
CATEGORIES = ("law", "math", "physics")
PER_CAT = 12
N = PER_CAT * len(CATEGORIES)
REFERENCE = "ABCD"


def mmlu_rows() -> list[dict[str, Any]]:
    rows = []
    for c, cat in enumerate(CATEGORIES):
        for i in range(PER_CAT):
            k = (c + i) % 4
            rows.append({"question_id": 100 * c + i, "question": f"{cat} question {i}?",
                         "options": [f"{cat} {i} option {j}" for j in range(4)], "answer": REFERENCE[k],
                         "answer_index": k, "cot_content": "", "category": cat, "src": "test"})
    return rows


@pytest.fixture(scope="module")
def dataset_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("mmlu") / "test-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(mmlu_rows()), path)
    return path


def which(body: dict[str, Any]) -> tuple[str, int, str]:
    """(category, index, right letter) of the question a request asks."""
    m = re.search(r"^(\w+) question (\d+)\?$", question_of(body), re.M)
    assert m, question_of(body)
    cat, i = m.group(1), int(m.group(2))
    return cat, i, REFERENCE[(CATEGORIES.index(cat) + i) % 4]


def wrong_letter(right: str) -> str:
    return "ABCD"[("ABCD".index(right) + 1) % 4]


# What the script answers: per category, index -> kind. Everything else is right.
PLAN: dict[str, dict[int, str]] = {
    "law": {0: "wrong", 1: "wrong", 2: "unparsed", 3: "truncated", 4: "truncated_right"},
    "math": {0: "wrong", 5: "unparsed", 6: "unparsed", 7: "empty", 8: "think_only"},
    "physics": {},
}
# law: 7 right, 2 wrong, 1 unparsed, 2 truncated; math: 7 right, 1 wrong, 4 unparsed; physics: 12 right


def tokens_of(cat: str, i: int) -> int:
    return 10 * (CATEGORIES.index(cat) + 1) + i


def reply_for(kind: str, right: str, tokens: int) -> Reply:
    if kind == "right":
        return Reply(content=f"Option {right} fits.\nANSWER: {right}", reasoning=f"A? B? D? Then ANSWER: {wrong_letter(right)}",
                     completion_tokens=tokens)
    if kind == "wrong":
        return Reply(content=f"ANSWER: {wrong_letter(right)}", completion_tokens=tokens)
    if kind == "unparsed":
        return Reply(content="I cannot decide between the options.", completion_tokens=tokens)
    if kind == "truncated":
        return Reply(content=f"Comparing A and {wrong_letter(right)}, I lean to", finish_reason="length",
                     completion_tokens=tokens)
    if kind == "truncated_right":  # the right letter, but the model had not finished
        return Reply(content=f"ANSWER: {right}\nBut wait, let me re-check", finish_reason="length", completion_tokens=tokens)
    if kind == "empty":
        return Reply(content=None, completion_tokens=tokens)
    if kind == "think_only":  # the right answer only inside an unclosed <think>
        return Reply(content=f"<think>surely ANSWER: {right}", completion_tokens=tokens)
    raise AssertionError(kind)


def scripted(plan: dict[str, dict[int, str]]) -> Callable[[dict[str, Any]], Reply]:
    def script(body: dict[str, Any]) -> Reply:
        cat, i, right = which(body)
        return reply_for(plan.get(cat, {}).get(i, "right"), right, tokens_of(cat, i))
    return script


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(scripted(PLAN), model="scripted", max_model_len=32768) as s:
        yield s


def settings(dataset: Path, **over: Any) -> EvalSettings:
    over.setdefault("per_category", PER_CAT)
    return EvalSettings.for_task("mmlu-pro", dataset=str(dataset), **over)


def scores(r: EvalResult) -> dict[str, Any]:
    return r.summary.model_dump()


# --- exact scores ---------------------------------------------------------------------------------------

def test_exact_scores_from_a_known_script(server: ScriptedServer, dataset_path: Path) -> None:
    result = run_eval(server.url, "scripted", settings(dataset_path))
    s = result.summary
    assert (s.n, s.correct, s.wrong, s.unparsed, s.truncated) == (N, 26, 3, 5, 2)
    assert s.accuracy == pytest.approx(26 / N)
    assert (s.ci_low, s.ci_high) == wilson(26, N)
    assert {c: (v.n, v.correct) for c, v in s.per_category.items()} == {"law": (12, 7), "math": (12, 7),
                                                                         "physics": (12, 12)}
    assert s.per_category["law"].accuracy == pytest.approx(7 / 12)
    want_tokens = sum(tokens_of(c, i) for c in CATEGORIES for i in range(PER_CAT)) / N
    assert s.mean_output_tokens == pytest.approx(want_tokens)
    assert (result.status, result.resumed, result.task, result.model) == ("completed", 0, "mmlu-pro", "scripted")
    assert result.dataset.files == [dataset_path.name] and result.dataset.rows == N
    assert len(server.requests) == N  # each question asked once

    by_id = {a.id: a for a in result.answers}
    assert [a.id for a in result.answers] == [str(r["question_id"]) for r in mmlu_rows()]  # dataset order
    truncated_right = by_id["4"]
    assert (truncated_right.verdict, truncated_right.extracted, truncated_right.finish_reason) == ("truncated", "A", "length")
    assert (by_id["0"].verdict, by_id["0"].extracted, by_id["0"].reference) == ("wrong", "B", "A")
    assert by_id["107"].verdict == "unparsed" and by_id["107"].answer == ""
    think_only = by_id["108"]  # math 8: the right letter inside an unclosed <think> is not an answer
    assert (think_only.verdict, think_only.answer) == ("unparsed", "")
    assert think_only.reasoning == "surely ANSWER: B"
    right = by_id["200"]  # reasoning kept apart: its wrong letter is never read
    assert (right.verdict, right.extracted, right.output_tokens, right.prompt_tokens) == ("correct", "C", 30, 50)
    assert right.answer == "Option C fits.\nANSWER: C" and right.reasoning == "A? B? D? Then ANSWER: D"


def test_each_request_carries_the_sampling(server: ScriptedServer, dataset_path: Path) -> None:
    s = settings(dataset_path, seed=11, temperature=0.0, top_p=0.5, top_k=5, max_tokens=1234, thinking=False,
                 concurrency=3, limit=6)
    result = run_eval(server.url, "scripted", s)
    assert len(server.requests) == 6
    questions = {q.id: q for q in load_dataset(MMLU, str(dataset_path)).questions}
    for body in server.requests:
        cat, i, _ = which(body)
        qid = str(100 * CATEGORIES.index(cat) + i)
        assert body == {
            "model": "scripted", "messages": [{"role": "user", "content": MMLU.prompt(questions[qid])}],
            "max_tokens": 1234, "temperature": 0.0, "top_p": 0.5, "top_k": 5, "seed": request_seed(11, qid),
            "chat_template_kwargs": {"enable_thinking": False},
        }
    assert len({b["seed"] for b in server.requests}) == 6  # a seed per question
    assert result.sampling.model_dump() == {"temperature": 0.0, "top_p": 0.5, "top_k": 5, "max_tokens": 1234,
                                            "thinking": False, "concurrency": 3}
    assert (result.seed, result.limit, result.per_category) == (11, 6, PER_CAT)


def test_default_max_tokens_is_capped_to_half_the_window(dataset_path: Path) -> None:
    with ScriptedServer(scripted(PLAN), model="scripted", max_model_len=4096) as small:
        result = run_eval(small.url, "scripted", settings(dataset_path, limit=2))
        assert {b["max_tokens"] for b in small.requests} == {2048}
        assert result.sampling.max_tokens == 2048
        assert [b["chat_template_kwargs"] for b in small.requests] == [{"enable_thinking": True}] * 2
        assert {(b["temperature"], b["top_p"], b["top_k"]) for b in small.requests} == {(0.6, 0.95, 20)}
        with pytest.raises(UserError, match=r"--max-tokens 4096 does not fit the server's 4,096-token window"):
            run_eval(small.url, "scripted", settings(dataset_path, limit=2, max_tokens=4096))


def test_server_faults(dataset_path: Path) -> None:
    with ScriptedServer(lambda body: Reply(status=400, raw={"error": {"message": "max_tokens too large"}})) as s:
        with pytest.raises(UserError, match=r"rejected a question \(HTTP 400\): max_tokens too large"):
            run_eval(s.url, "scripted", settings(dataset_path, limit=2))
        with pytest.raises(UserError, match=r"--model 'other' is not served at .* \(it serves: scripted\)"):
            run_eval(s.url, "other", settings(dataset_path, limit=2))
        url = s.url
    with pytest.raises(EvalServerGone, match="does not answer"):  # closed: nothing listens any more
        run_eval(url, "scripted", settings(dataset_path, limit=2))


# --- resume ----------------------------------------------------------------------------------------------

def test_resume_asks_only_the_missing_questions(dataset_path: Path, tmp_path: Path) -> None:
    s = settings(dataset_path, seed=4)
    full_log = tmp_path / "full.jsonl"
    with ScriptedServer(scripted(PLAN)) as first:
        whole = run_eval(first.url, "scripted", s, log_path=full_log)
    lines = full_log.read_bytes().splitlines(keepends=True)
    assert len(lines) == 1 + N and json.loads(lines[0])["roost_eval_log"] == 1
    half = N // 2
    cut = lines[1 + half]
    partial = tmp_path / "partial.jsonl"
    partial.write_bytes(b"".join(lines[:1 + half]) + cut[: len(cut) // 2])  # killed mid-write
    kept = {json.loads(line)["id"] for line in lines[1:1 + half]}

    with ScriptedServer(scripted(PLAN)) as second:
        resumed = run_eval(second.url, "scripted", s, log_path=partial)
        asked = {str(100 * CATEGORIES.index(which(b)[0]) + which(b)[1]) for b in second.requests}
    assert len(second.requests) == N - half  # the cut answer is asked again, nothing twice
    assert asked == {a.id for a in whole.answers} - kept
    assert resumed.resumed == half
    assert scores(resumed) == scores(whole)
    assert [a.model_dump(exclude={"seconds"}) for a in resumed.answers] == \
        [a.model_dump(exclude={"seconds"}) for a in whole.answers]
    rows = read_answers(partial)
    assert len(rows) == N and len({r["id"] for r in rows}) == N  # the cut line is gone, each answer once
    assert partial.read_bytes().endswith(b"\n")

    with ScriptedServer(scripted(PLAN)) as third:  # a complete log: nothing to ask
        again = run_eval(third.url, "scripted", s, log_path=partial)
        assert third.requests == [] and again.resumed == N and scores(again) == scores(whole)


def test_log_of_other_settings_is_refused(dataset_path: Path, tmp_path: Path, server: ScriptedServer) -> None:
    log = tmp_path / "run.jsonl"
    run_eval(server.url, "scripted", settings(dataset_path, limit=4), log_path=log)
    before = log.read_bytes()
    with (ScriptedServer(scripted(PLAN), model="other-model") as other,
          pytest.raises(UserError, match=r"written by a run with another model \('scripted', this run: 'other-model'\)")):
        run_eval(other.url, "other-model", settings(dataset_path, limit=4), log_path=log)
    with pytest.raises(UserError, match=r"another sampling"):
        run_eval(server.url, "scripted", settings(dataset_path, limit=4, temperature=1.0), log_path=log)
    with pytest.raises(UserError, match=r"another seed"):
        run_eval(server.url, "scripted", settings(dataset_path, limit=4, seed=1), log_path=log)
    with pytest.raises(UserError, match=r"another sample size"):
        run_eval(server.url, "scripted", settings(dataset_path, limit=5), log_path=log)
    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text(json.dumps({"question": "1+1?", "answer": "#### 2"}) + "\n")
    with pytest.raises(UserError, match=r"another task \('mmlu-pro', this run: 'gsm8k'\)"):
        run_eval(server.url, "scripted", EvalSettings.for_task("gsm8k", dataset=str(gsm)), log_path=log)
    not_a_log = tmp_path / "notes.txt"
    not_a_log.write_text("hello\n")
    with pytest.raises(UserError, match=r"not a roost eval log"):
        run_eval(server.url, "scripted", settings(dataset_path, limit=4), log_path=not_a_log)
    assert log.read_bytes() == before and not_a_log.read_text() == "hello\n"  # left as they were
    assert len(server.requests) == 4  # refused before any question was asked


def test_resume_with_another_concurrency(dataset_path: Path, tmp_path: Path, server: ScriptedServer) -> None:
    log = tmp_path / "run.jsonl"
    first = run_eval(server.url, "scripted", settings(dataset_path, limit=4, concurrency=8), log_path=log)
    again = run_eval(server.url, "scripted", settings(dataset_path, limit=4, concurrency=2), log_path=log)
    assert again.resumed == 4 and scores(again) == scores(first)


# --- the paired test on two runs ----------------------------------------------------------------------

def outcomes(r: EvalResult) -> dict[str, tuple[str, bool]]:
    return {a.id: (a.category, a.verdict == "correct") for a in r.answers}


def run_with(plan: dict[str, dict[int, str]], dataset: Path) -> EvalResult:
    with ScriptedServer(scripted(plan)) as s:
        return run_eval(s.url, "scripted", settings(dataset))


def test_mcnemar_on_two_runs(dataset_path: Path) -> None:
    baseline = run_with(PLAN, dataset_path)
    # physics: 9 of its 12 right answers now wrong; one law question now right
    regressed_plan = {"law": {k: v for k, v in PLAN["law"].items() if k != 0}, "math": PLAN["math"],
                      "physics": dict.fromkeys(range(9), "wrong")}
    regressed = run_with(regressed_plan, dataset_path)
    cmp = paired(outcomes(baseline), outcomes(regressed))
    assert cmp is not None
    assert (cmp.pairs, cmp.lost, cmp.gained) == (N, 9, 1)
    assert cmp.significant and cmp.direction == "worse" and cmp.p_value < 0.05
    assert cmp.categories[0].category == "physics" and (cmp.categories[0].lost, cmp.categories[0].gained) == (9, 0)
    assert [m.category for m in cmp.categories] == ["physics", "law"]

    # noise: two questions flip each way
    noisy_plan = {"law": {k: v for k, v in PLAN["law"].items() if k not in (0, 1)},
                  "math": {**PLAN["math"], 10: "wrong"}, "physics": {3: "unparsed"}}
    noisy = run_with(noisy_plan, dataset_path)
    same = paired(outcomes(baseline), outcomes(noisy))
    assert same is not None
    assert (same.lost, same.gained, same.significant, same.direction) == (2, 2, False, "same")
    assert same.p_value == 1.0
