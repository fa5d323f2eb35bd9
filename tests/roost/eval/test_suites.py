"""Each task's answer extraction and verdicts (roost/eval/suites.py), split_reasoning, and the
recipe's settings per task (EvalSettings.for_task)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from roost.errors import UserError
from roost.eval.runner import EvalSettings
from roost.eval.suites import (
    GSM8K,
    LETTERS,
    MMLUPro,
    Question,
    get_task,
    last_boxed,
    split_reasoning,
    verdict,
)

GSM = get_task("gsm8k")
MATH = get_task("math500")
MMLU = get_task("mmlu-pro")


def gsm_q(reference: str = "18") -> Question:
    return Question(id="g1", text="Janet has ducks.", reference=reference)


def mmlu_q(reference: str = "C", n: int = 4) -> Question:
    return Question(id="m1", category="law", text="Which?", options=tuple(f"opt{i}" for i in range(n)),
                    reference=reference)


def math_q(reference: str) -> Question:
    return Question(id="x1", category="Algebra", text="Solve.", reference=reference)


# --- split_reasoning --------------------------------------------------------------------------------

@pytest.mark.parametrize(("content", "reasoning", "want"), [
    ("#### 7", None, ("#### 7", "")),
    ("  #### 7 \n", "I add 3 and 4", ("#### 7", "I add 3 and 4")),
    ("<think>maybe 5?</think>\n#### 7", None, ("#### 7", "maybe 5?")),
    ("<think>maybe 5?</think>#### 7", "server reasoning", ("#### 7", "server reasoning\nmaybe 5?")),
    ("still thinking</think>#### 7", None, ("#### 7", "still thinking")),  # template opened <think> itself
    ("<think>12 or 13, let me see", None, ("", "12 or 13, let me see")),  # never closed: no answer
    (None, None, ("", "")),
    (None, "only reasoning, 42", ("", "only reasoning, 42")),
])
def test_split_reasoning(content: str | None, reasoning: str | None, want: tuple[str, str]) -> None:
    assert split_reasoning(content, reasoning) == want


def test_unclosed_think_after_whitespace_is_no_answer() -> None:
    answer, thought = split_reasoning("\n <think>unclosed 9", "r")
    assert answer == "" and thought.startswith("r") and thought.endswith("unclosed 9")


def test_reasoning_in_think_is_never_read_as_the_answer() -> None:
    for task, q, thought in ((GSM, gsm_q("18"), "#### 18 is my guess, the answer is 18"),
                             (MMLU, mmlu_q("C"), "ANSWER: C"),
                             (MATH, math_q("5"), "\\boxed{5}")):
        answer, _ = split_reasoning(f"<think>{thought}</think>I am not sure.", None)
        assert verdict(task, q, answer, "stop") == ("unparsed", None), task.name
        # an unclosed <think> holding the right answer is no answer either
        answer, _ = split_reasoning(f"<think>{thought}", None)
        assert verdict(task, q, answer, "stop") == ("unparsed", None), task.name


# --- GSM8K -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("answer", "extracted"), [
    ("Step 1... 3 + 15 = 18\n#### 18", "18"),
    ("#### 18\nthen 99 more words 7", "18"),  # strict: the first #### N, whatever follows
    ("#### 5\n#### 6", "5"),
    ("#### 1,234", "1234"),
    ("So she makes $18 every day.", "18"),  # flexible: the last number
    ("The answer is 18.", "18"),
    ("3 apples and then 4 pears, 12 in all", "12"),
    ("It costs $1,000.", "1000"),
    ("She loses -3 points", "-3"),
    ("#### abc, so the total is 5", "5"),  # a #### not followed by a number falls back
    ("I cannot solve this.", None),
    ("", None),
    ("Hmm... ...", None),
])
def test_gsm8k_extract(answer: str, extracted: str | None) -> None:
    assert GSM.extract(answer) == extracted


@pytest.mark.parametrize(("answer", "reference", "want"), [
    ("#### 18", "18", "correct"),
    ("#### 18.00", "18", "correct"),  # numbers compare as numbers
    ("#### 18", "18.0", "correct"),
    ("The answer is 1,800.", "1800", "correct"),
    ("#### 17", "18", "wrong"),
    ("#### -18", "18", "wrong"),
    ("no idea", "18", "unparsed"),
])
def test_gsm8k_verdicts(answer: str, reference: str, want: str) -> None:
    assert verdict(GSM, gsm_q(reference), answer, "stop")[0] == want


def test_gsm8k_question_from_upstream_row() -> None:
    q = GSM8K().question({"question": "How many?", "answer": "work <<3*6=18>>\n#### 1,800"}, "f row 0")
    assert (q.reference, q.category, q.options) == ("1800", "", ())
    assert q.id == GSM8K().question({"question": "How many?", "answer": "#### 5"}, "w").id  # id from the text
    with pytest.raises(UserError, match=r"^f row 3: GSM8K 'answer' has no '#### N' final line"):
        GSM8K().question({"question": "q", "answer": "18"}, "f row 3")
    with pytest.raises(UserError, match=r"'#### eighteen', which is not a number"):
        GSM8K().question({"question": "q", "answer": "#### eighteen"}, "w")
    with pytest.raises(UserError, match=r"column 'question' must be text, got list"):
        GSM8K().question({"question": ["q"], "answer": "#### 1"}, "w")


# --- MMLU-Pro ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("answer", "extracted"), [
    ("Reasoning...\nANSWER: C", "C"),
    ("answer: (b)", "B"),
    ("**Answer:** E", "E"),
    ("Answer: `J`", "J"),
    ("ANSWER: A\nOn reflection:\nANSWER: D", "D"),  # the last such line
    ("Let's think step by step. The answer is (D).", "D"),  # MMLU-Pro's own CoT format
    ("the answer is B", "B"),
    ("ANSWER: C, although the answer is (D)", "C"),  # the recipe's format wins over the CoT one
    ("I think it is the second option.", None),
    ("ANSWER: K", None),  # not a letter of A-J
])
def test_mmlu_pro_extract(answer: str, extracted: str | None) -> None:
    assert MMLU.extract(answer) == extracted


def test_mmlu_pro_pronoun_is_not_a_letter() -> None:
    """The letter must end its ANSWER line: "Answer: I think B" follows neither format (no answer), and
    the pronoun is never read as option I."""
    assert MMLU.extract("Final Answer: I think B") is None
    assert MMLU.extract("answer: a guess\nANSWER: B") == "B"


@pytest.mark.parametrize(("answer", "want"), [
    ("ANSWER: C", ("correct", "C")),
    ("ANSWER: c", ("correct", "C")),
    ("ANSWER: A", ("wrong", "A")),
    ("ANSWER: J", ("wrong", "J")),  # a letter beyond the options is a wrong answer, not unparsed
    ("no letter here", ("unparsed", None)),
])
def test_mmlu_pro_verdicts(answer: str, want: tuple[str, str | None]) -> None:
    assert verdict(MMLU, mmlu_q("C"), answer, "stop") == want


def _mmlu_row(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"question_id": 70, "question": "Which?", "options": ["w", "x", "y", "z"], "answer": "C",
                           "answer_index": 2, "category": "law"}
    row.update(over)
    return row


def test_mmlu_pro_question_from_upstream_row() -> None:
    q = MMLUPro().question(_mmlu_row(), "f row 0")
    assert (q.id, q.category, q.options, q.reference) == ("70", "law", ("w", "x", "y", "z"), "C")
    assert "A) w\nB) x\nC) y\nD) z" in MMLU.prompt(q) and "ANSWER: $LETTER" in MMLU.prompt(q)
    # no question_id: a hash of the text and the options
    a = MMLUPro().question(_mmlu_row(question_id=None), "w")
    b = MMLUPro().question(_mmlu_row(question_id=None, options=["w", "x", "y", "other"]), "w")
    assert a.id != b.id and len(a.id) == 16


@pytest.mark.parametrize(("over", "message"), [
    ({"answer": "B"}, "'answer' 'B' does not match 'answer_index' 2"),
    ({"answer": "E", "answer_index": 4}, "'answer' 'E' does not match"),  # beyond the 4 options
    ({"options": []}, "'options' must be a list of 1 to 10 answers"),
    ({"options": "w x y z"}, "'options' must be a list"),
    ({"options": [str(i) for i in range(11)]}, "'options' must be a list of 1 to 10"),
    ({"category": None}, "column 'category' must be text, got NoneType"),
    ({"question": {"text": "Which?"}}, "column 'question' must be text, got dict"),
])
def test_mmlu_pro_bad_rows(over: dict[str, Any], message: str) -> None:
    with pytest.raises(UserError, match=r"^f row 7: ") as err:
        MMLUPro().question(_mmlu_row(**over), "f row 7")
    assert message in str(err.value)


@pytest.mark.parametrize("letter", ["", "AB"])
def test_mmlu_pro_answer_must_be_one_letter(letter: str) -> None:
    with pytest.raises(UserError):
        MMLUPro().question(_mmlu_row(answer=letter, answer_index=None), "f row 0")


# --- MATH-500 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(("text", "boxed"), [
    ("so \\boxed{5}", "5"),
    ("\\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),  # braces balanced
    ("first \\boxed{3} then \\boxed{4}", "4"),  # the last
    ("\\boxed{3} and a cut \\boxed{\\frac{1", "3"),  # an unclosed one is skipped
    ("\\boxed 7.", "7."),
    ("\\fbox{x=2}", "x=2"),
    ("no box, 42", None),
])
def test_last_boxed(text: str, boxed: str | None) -> None:
    assert last_boxed(text) == boxed


@pytest.mark.parametrize(("answer", "reference", "want"), [
    ("The answer is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}", "correct"),
    ("\\boxed{0.5}", "\\frac{1}{2}", "correct"),  # math-verify: numeric equivalence
    ("\\boxed{x=3}", "3", "correct"),
    ("\\boxed{\\frac{2}{4}}", "\\frac12", "correct"),
    ("\\boxed{4}", "3", "wrong"),
    ("The answer is 3.", "3", "unparsed"),  # no \boxed{}: MATH-500 is read strictly
    ("\\boxed{}", "3", "unparsed"),
])
def test_math500_verdicts(answer: str, reference: str, want: str) -> None:
    assert verdict(MATH, math_q(reference), answer, "stop")[0] == want


def test_math500_question_keeps_subject_and_unique_id() -> None:
    row = {"problem": "Solve x+1=2.", "answer": " 1 ", "subject": "Algebra", "level": 1,
           "unique_id": "test/algebra/1.json"}
    q = MATH.question(row, "w")
    assert (q.id, q.category, q.reference) == ("test/algebra/1.json", "Algebra", "1")
    assert MATH.prompt(q).endswith("put your final answer within \\boxed{}.")


# --- truncated, whatever it contains ---------------------------------------------------------------

@pytest.mark.parametrize(("task", "q", "answer"), [
    (GSM, gsm_q("18"), "#### 18"),
    (GSM, gsm_q("18"), "#### 17"),
    (GSM, gsm_q("18"), "so far nothing"),
    (MMLU, mmlu_q("C"), "ANSWER: C"),
    (MATH, math_q("5"), "\\boxed{5}"),
    (GSM, gsm_q("18"), ""),
])
def test_truncated_whatever_it_contains(task: Any, q: Question, answer: str) -> None:
    assert verdict(task, q, answer, "length")[0] == "truncated"


def test_verdict_is_exactly_one_of_four() -> None:
    seen = {verdict(GSM, gsm_q("18"), a, f)[0] for a, f in
            (("#### 18", "stop"), ("#### 1", "stop"), ("?", "stop"), ("#### 18", "length"))}
    assert seen == {"correct", "wrong", "unparsed", "truncated"}


def test_get_task() -> None:
    assert get_task(" MMLU-Pro ") is MMLU
    with pytest.raises(UserError, match=r"^unknown task 'gsm9k': choose one of gsm8k, math500, mmlu-pro$"):
        get_task("gsm9k")
    assert LETTERS == "ABCDEFGHIJ"


# --- EvalSettings.for_task --------------------------------------------------------------------------

def test_settings_defaults_per_task() -> None:
    mmlu = EvalSettings.for_task("mmlu-pro")
    assert (mmlu.task, mmlu.sampling.concurrency, mmlu.per_category) == ("mmlu-pro", 8, 50)
    for name in ("gsm8k", "math500"):
        s = EvalSettings.for_task(name)
        assert (s.task, s.sampling.concurrency, s.per_category, s.limit) == (name, 16, None, None)
    s = EvalSettings.for_task("gsm8k")
    assert (s.sampling.temperature, s.sampling.top_p, s.sampling.top_k, s.sampling.max_tokens,
            s.sampling.thinking, s.seed, s.max_tokens_given) == (0.6, 0.95, 20, 16384, True, 0, False)


def test_settings_overrides() -> None:
    s = EvalSettings.for_task("mmlu-pro", concurrency=3, per_category=None, max_tokens=512, thinking=False,
                              temperature=0.0, limit=7, seed=9, dataset="x.jsonl")
    assert (s.sampling.concurrency, s.per_category, s.sampling.max_tokens, s.sampling.thinking,
            s.sampling.temperature, s.limit, s.seed, s.dataset, s.max_tokens_given) == \
        (3, 50, 512, False, 0.0, 7, 9, "x.jsonl", True)  # None keeps the task's default
    assert EvalSettings.for_task("mmlu-pro", per_category=5).per_category == 5
    with pytest.raises(ValidationError, match="concurrency"):
        EvalSettings.for_task("gsm8k", concurrency=0)
    with pytest.raises(ValidationError, match="top_p"):
        EvalSettings.for_task("gsm8k", top_p=1.5)
    with pytest.raises(ValidationError, match="limit"):
        EvalSettings.for_task("gsm8k", limit=0)
    with pytest.raises(UserError, match="unknown task"):
        EvalSettings.for_task("humaneval")
