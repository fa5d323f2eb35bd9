"""Every task against the real vLLM CPU server (the session's tiny random-weight model).

Accuracy near chance is expected from random weights; what is asserted is the mechanics: every
question of the sample answered and classified (correct, wrong, unparsed or truncated, exactly one),
a truncation exactly when vLLM says ``finish_reason == "length"``, the output tokens summed over the
answers equal to what vLLM itself counted (``vllm:generation_tokens_total`` before and after), and a
``roost eval`` killed with SIGKILL in the middle resumes from its log without asking an answered
question again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.cli import ROOST
from support.wait import poll

from roost.eval.log import read_answers
from roost.eval.runner import EvalSettings, run_eval
from roost.eval.scoring import summarize
from roost.eval.suites import VERDICTS
from roost.vllm.server_metrics import parse_text, totals

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def datasets(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("eval-data")
    gsm = d / "gsm8k.jsonl"
    gsm.write_text("".join(json.dumps({"question": f"Tom has {i} apples and buys {i + 2} more. How many now?",
                                       "answer": f"{i} + {i + 2} = {2 * i + 2}\n#### {2 * i + 2}"}) + "\n"
                           for i in range(1, 25)))
    math = d / "math500.jsonl"
    math.write_text("".join(json.dumps({"problem": f"Compute ${i} \\cdot {i}$.", "answer": str(i * i),
                                        "subject": ("Algebra", "Prealgebra")[i % 2], "level": 1,
                                        "unique_id": f"test/{i}.json"}) + "\n" for i in range(1, 9)))
    rows = [{"question_id": n, "question": f"Which letter is number {n % 4 + 1} of the alphabet?",
             "options": ["A", "B", "C", "D"], "answer": "ABCD"[n % 4], "answer_index": n % 4,
             "category": ("math", "other")[n % 2], "src": "test"} for n in range(8)]
    mmlu = d / "mmlu_pro.parquet"
    pq.write_table(pa.Table.from_pylist(rows), mmlu)
    return {"gsm8k": gsm, "math500": math, "mmlu-pro": mmlu}


def generation_tokens(base_url: str, key: str) -> float:
    text = httpx.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10).text
    return totals(parse_text(text))["vllm:generation_tokens_total"]


@pytest.mark.parametrize("task", ["gsm8k", "math500", "mmlu-pro"])
def test_each_task_is_asked_scored_and_counted_like_vllm(task: str, datasets: dict[str, Path], vllm_server: Any,
                                                         tmp_path: Path) -> None:
    settings = EvalSettings.for_task(task, dataset=str(datasets[task]), limit=6, max_tokens=24, temperature=0.0,
                                     concurrency=3, thinking=False, per_category=3 if task == "mmlu-pro" else None)
    before = generation_tokens(vllm_server.base_url, vllm_server.api_key)
    result = run_eval(vllm_server.base_url, vllm_server.model, settings, api_key=vllm_server.api_key,
                      log_path=tmp_path / "log.jsonl")
    after = generation_tokens(vllm_server.base_url, vllm_server.api_key)
    s = result.summary
    assert s.n == 6 == len(result.answers) == len({a.id for a in result.answers})
    assert s.correct + s.wrong + s.unparsed + s.truncated == s.n
    for a in result.answers:
        assert a.verdict in VERDICTS
        assert (a.verdict == "truncated") == (a.finish_reason == "length")
        assert a.output_tokens is not None and 1 <= a.output_tokens <= 24
        assert a.prompt_tokens is not None and a.prompt_tokens > 10
    # the tokens roost counted are the tokens vLLM generated, reasoning included (none here)
    assert sum(a.output_tokens or 0 for a in result.answers) == after - before
    assert s.mean_output_tokens == pytest.approx((after - before) / s.n)
    assert len(read_answers(tmp_path / "log.jsonl")) == 6


def test_a_run_killed_with_sigkill_resumes_from_its_log(datasets: dict[str, Path], vllm_server: Any,
                                                       tmp_path: Path) -> None:
    log = tmp_path / "gsm8k.jsonl"
    args = [ROOST, "eval", vllm_server.base_url, "--model", vllm_server.model,
            "--task", "gsm8k", "--dataset", str(datasets["gsm8k"]), "--max-tokens", "160", "--temperature", "0",
            "--concurrency", "1", "--no-thinking", "--log", str(log), "--quiet", "--json"]
    env = dict(os.environ, VLLM_API_KEY=vllm_server.api_key)
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    def three_answers() -> bool:
        if log.is_file() and len(read_answers(log)) >= 3:
            return True
        assert proc.poll() is None, proc.communicate()
        return False

    poll(three_answers, timeout_s=240, every_s=0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    answered = {a["id"] for a in read_answers(log)}
    assert 3 <= len(answered) < 24, "the run must be killed in the middle"

    settings = EvalSettings.for_task("gsm8k", dataset=str(datasets["gsm8k"]), max_tokens=160, temperature=0.0,
                                     concurrency=1, thinking=False)
    result = run_eval(vllm_server.base_url, vllm_server.model, settings, api_key=vllm_server.api_key, log_path=log)
    assert result.resumed == len(answered)
    lines = read_answers(log)
    ids = [a["id"] for a in lines]
    assert len(ids) == len(set(ids)) == 24  # nothing answered was asked again; every question once
    assert {a.id for a in result.answers} == set(ids)
    assert result.summary == summarize(lines)  # the scores are those of the whole log
