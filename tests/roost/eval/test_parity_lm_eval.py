"""Scoring parity with lm-evaluation-harness: roost's verdict on realistic model answers against
lm-eval's, case by case, with every disagreement listed and explained.

The answers are ``tests/fixtures/eval/parity_*.jsonl`` (one per task: the reference as the
upstream dataset gives it, and a chat completion's ``content``). lm-eval's side is lm-eval's own
code, configured from the task YAML shipped inside the installed package (nothing copied by hand):

- the answer is what lm-eval's ``local-chat-completions`` client hands to scoring
  (``postprocess_generated_text`` with ``think_end_token="</think>"``, as one runs it against a
  reasoning model served without a reasoning parser);
- GSM8K: the ``strict-match`` and ``flexible-extract`` filter pipelines of ``gsm8k/gsm8k.yaml``
  built by ``build_filter_ensemble`` exactly as ``ConfigurableTask`` builds them, and the YAML's
  ``exact_match`` (``regexes_to_ignore``, ``ignore_case``) against ``doc_to_target``. roost reads
  strictly and falls back to the last number, so lm-eval's side is strict-match's score when its
  filter found a ``#### N``, else flexible-extract's;
- MMLU-Pro: the ``custom-extract`` filter and ``exact_match`` of ``mmlu_pro/mmlu_pro_math.yaml``
  (with its included template);
- MATH-500: ``math_verify.verify(parse(gold), parse(answer))`` on the whole answer, the gold being
  the reference boxed (as lm-eval's ``minerva_math`` parses the boxed reference solution).

Verdicts compare three-valued: ``correct``, ``wrong``, ``unparsed`` (lm-eval: the filter's
fallback ``[invalid]``; math-verify: nothing parsed). The test fails when a case disagrees that is
not listed in ``DISAGREEMENTS``, or a listed case agrees, or disagrees differently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import lm_eval
import pytest
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_metric
from lm_eval.filters import build_filter_ensemble
from lm_eval.models.utils import postprocess_generated_text
from lm_eval.tasks._yaml_loader import load_yaml
from lm_eval.utils import apply_template

from roost.eval.suites import EvalTask, Question, get_task, split_reasoning, verdict

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "eval"
LM_EVAL_TASKS = Path(lm_eval.__file__).resolve().parent / "tasks"
THINK_END = "</think>"

# Every case where roost and lm-eval disagree: case id -> (roost's verdict, lm-eval's, why).
DISAGREEMENTS: dict[str, dict[str, tuple[str, str, str]]] = {
    "gsm8k": {
        "hash-trailing-zeros": ("correct", "wrong", "18.00 vs 18: lm-eval compares strings, roost numbers"),
        "hash-leading-zeros": ("correct", "wrong", "007 vs 7: lm-eval compares strings, roost numbers"),
        "hash-decimal-cents": ("correct", "wrong", "5.00 vs 5: lm-eval compares strings, roost numbers"),
        "think-unclosed": ("unparsed", "correct", "a <think> never closed: roost reads no answer, lm-eval reads the thinking"),
        "ellipsis-after-number": ("correct", "wrong", "'18...': lm-eval's regexes_to_ignore drop one trailing '.', roost all"),
        "ellipsis-at-end": ("correct", "wrong", "a final '...' is flexible-extract's last match; roost skips matches that are no number"),
        "hash-dot-then-number": ("correct", "wrong", "'#### .': lm-eval's strict-match takes '.', roost falls back to the last number"),
    },
    "mmlu-pro": {
        "answer-line": ("correct", "unparsed", "'ANSWER: X' (roost's prompt format) is not lm-eval's 'the answer is (X)'"),
        "answer-line-bold-paren": ("correct", "unparsed", "'**ANSWER: (C)**': roost's format, with markdown"),
        "lowercase-answer-line": ("correct", "unparsed", "'answer: c': roost's format, read case-insensitively"),
        "letter-beyond-options": ("wrong", "unparsed", "'ANSWER: H' of 4 options: roost's format; a letter past the options is wrong"),
        "changes-mind": ("correct", "wrong", "two 'the answer is (X)': lm-eval takes the first, roost the last"),
        "cot-then-answer-line": ("correct", "wrong", "'ANSWER: D' after 'the answer is (C)': roost's own format wins"),
        "think-unclosed": ("unparsed", "correct", "a <think> never closed: roost reads no answer, lm-eval reads the thinking"),
        "final-answer-colon-paren": ("correct", "unparsed", "'Final answer: (B)': roost's format"),
        "two-answer-lines": ("correct", "unparsed", "two 'ANSWER:' lines: roost's format, the last one"),
        "wrong-answer-line": ("wrong", "unparsed", "'ANSWER: A' (wrong letter): roost's format"),
        "answer-line-backticks": ("correct", "unparsed", "'ANSWER: `G`': roost's format, with markdown"),
        "answer-line-parens-lowercase": ("correct", "unparsed", "'answer: (f)': roost's format, read case-insensitively"),
    },
    "math500": {
        "no-boxed-prose": ("unparsed", "correct", "no \\boxed: roost reads only the box its prompt asks for, math-verify any last number"),
        "no-boxed-latex": ("unparsed", "correct", "no \\boxed: roost reads only the box, math-verify the last $...$ expression"),
        "think-unclosed": ("unparsed", "correct", "a <think> never closed: roost reads no answer, lm-eval reads the thinking"),
        "truncated-boxed": ("unparsed", "wrong", "a \\boxed{ never closed (a cut-off answer): roost reads no answer, math-verify a fragment"),
    },
}


@dataclass(frozen=True)
class Case:
    id: str
    row: dict[str, Any]
    response: str


def cases(task: str) -> list[Case]:
    path = FIXTURES / f"parity_{task.replace('-', '_')}.jsonl"
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        out.append(Case(id=row.pop("id"), response=row.pop("response"), row=row))
    return out


# --- roost ------------------------------------------------------------------------------------------

def roost_verdict(task: EvalTask, case: Case) -> str:
    """What the runner does with a chat completion's content: cut the reasoning, extract, score."""
    q: Question = task.question(case.row, case.id)
    answer, _ = split_reasoning(case.response, None)
    return verdict(task, q, answer, "stop")[0]


# --- lm-eval ----------------------------------------------------------------------------------------

@cache
def lm_eval_config(relative: str) -> dict[str, Any]:
    """A task YAML of the installed lm-eval, its includes merged, by lm-eval's own loader."""
    return load_yaml(LM_EVAL_TASKS / relative, resolve_func=False)


def lm_eval_answer(content: str) -> str:
    """The generation lm-eval's ``local-chat-completions`` client returns for this content."""
    return postprocess_generated_text(content, stop=None, think_end_token=THINK_END)


def lm_eval_filter(cfg: dict[str, Any], name: str, response: str) -> tuple[str, str]:
    """(filtered answer, the filter's fallback) of one of the YAML's filter pipelines, built as
    ``ConfigurableTask.__init__`` builds it and applied to an :class:`Instance` as its run does."""
    (spec,) = [f for f in cfg["filter_list"] if f["name"] == name]
    components = [[fn["function"], {k: v for k, v in fn.items() if k != "function"}] for fn in spec["filter"]]
    ensemble = build_filter_ensemble(name, components)
    inst = Instance(request_type="generate_until", doc={}, arguments=("", {}), idx=0)
    inst.resps = [response]
    ensemble.apply([inst])
    fallback = ensemble.filters[0]().fallback  # type: ignore[attr-defined]  # the regex filter
    return inst.filtered_resps[name], fallback


def lm_eval_exact_match(cfg: dict[str, Any], gold: str, prediction: str) -> bool:
    """The YAML's ``exact_match`` with its kwargs, called as ``ConfigurableTask.process_results`` does."""
    (metric,) = [m for m in cfg["metric_list"] if m["metric"] == "exact_match"]
    kwargs = {k: v for k, v in metric.items() if k not in ("metric", "aggregation", "higher_is_better", "hf_evaluate")}
    result = get_metric("exact_match")(references=[gold], predictions=[prediction], **kwargs)
    return float(result["exact_match"]) == 1.0


def lm_eval_verdict_gsm8k(case: Case) -> str:
    cfg = lm_eval_config("gsm8k/gsm8k.yaml")
    gold = apply_template(cfg["doc_to_target"], case.row)
    answer = lm_eval_answer(case.response)
    strict, fallback = lm_eval_filter(cfg, "strict-match", answer)
    found = strict if strict != fallback else lm_eval_filter(cfg, "flexible-extract", answer)[0]
    if found == fallback:
        return "unparsed"
    return "correct" if lm_eval_exact_match(cfg, gold, found) else "wrong"


def lm_eval_verdict_mmlu_pro(case: Case) -> str:
    cfg = lm_eval_config("mmlu_pro/mmlu_pro_math.yaml")
    assert cfg["doc_to_target"] == "answer"  # the gold is the row's letter column
    found, fallback = lm_eval_filter(cfg, "custom-extract", lm_eval_answer(case.response))
    if found == fallback:
        return "unparsed"
    return "correct" if lm_eval_exact_match(cfg, str(case.row["answer"]), found) else "wrong"


def lm_eval_verdict_math500(case: Case) -> str:
    from math_verify import parse, verify

    gold = parse(f"$\\boxed{{{case.row['answer']}}}$")
    got = parse(lm_eval_answer(case.response))
    if not got:
        return "unparsed"
    return "correct" if verify(gold, got) else "wrong"


LM_EVAL = {"gsm8k": lm_eval_verdict_gsm8k, "mmlu-pro": lm_eval_verdict_mmlu_pro, "math500": lm_eval_verdict_math500}


# --- the comparison ---------------------------------------------------------------------------------

@pytest.mark.parametrize("task_name", ["gsm8k", "mmlu-pro", "math500"])
def test_roost_agrees_with_lm_eval_except_the_listed_cases(task_name: str) -> None:
    task = get_task(task_name)
    fixture = cases(task_name)
    assert len(fixture) >= 25
    assert len({c.id for c in fixture}) == len(fixture), "case ids must be unique"
    expected = DISAGREEMENTS[task_name]
    assert set(expected) <= {c.id for c in fixture}, "a listed disagreement has no case"

    verdicts = {c.id: (roost_verdict(task, c), LM_EVAL[task_name](c)) for c in fixture}
    seen = {k: v for k, v in verdicts.items() if v[0] != v[1]}
    table = [f"  {c.id:<36} roost {verdicts[c.id][0]:<9} lm-eval {verdicts[c.id][1]:<9} {c.response[:60]!r}"
             for c in fixture]
    want = {k: v[:2] for k, v in expected.items()}
    report = "\n".join(table)
    new = {k: v for k, v in seen.items() if k not in want}
    gone = sorted(k for k in want if k not in seen)
    changed = {k: (want[k], seen[k]) for k in want if k in seen and seen[k] != want[k]}
    assert not new, f"new disagreements with lm-eval (roost, lm-eval): {new}\n{report}"
    assert not gone, f"listed disagreements that now agree: {gone}\n{report}"
    assert not changed, f"listed disagreements that changed (listed, now): {changed}\n{report}"

    # the fixture exercises every verdict on both sides, and most cases agree
    for side in (0, 1):
        assert {v[side] for v in verdicts.values()} == {"correct", "wrong", "unparsed"}, report
    assert len(seen) < len(fixture) / 2, report


def test_lm_eval_config_is_the_one_described() -> None:
    """The YAML settings the comparison relies on (a new lm-eval that changes them fails here first)."""
    gsm8k = lm_eval_config("gsm8k/gsm8k.yaml")
    assert [f["name"] for f in gsm8k["filter_list"]] == ["strict-match", "flexible-extract"]
    (em,) = [m for m in gsm8k["metric_list"] if m["metric"] == "exact_match"]
    assert em["ignore_case"] is True and em["regexes_to_ignore"]
    mmlu = lm_eval_config("mmlu_pro/mmlu_pro_math.yaml")
    assert [f["name"] for f in mmlu["filter_list"]] == ["custom-extract"]
    assert [fn["function"] for fn in mmlu["filter_list"][0]["filter"]] == ["regex", "take_first"]
