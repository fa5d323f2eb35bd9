"""The three accuracy suites (GSM8K, MATH-500, MMLU-Pro): each one's upstream columns, prompt, answer
extraction and scoring, defined once, with the reasons. Each is an :class:`EvalTask` ("task" is
lm-evaluation-harness's word, and ``roost eval --task``'s; Prefect's tasks are the top-level ``tasks/``).

A task turns a dataset row into a :class:`Question`, a question into chat messages, and a model's
answer (the ``content`` of the chat completion, reasoning kept apart: :func:`split_reasoning`) into
an extracted answer or ``None`` (unparsed), then says whether that answer is right.

- **GSM8K** (``question``, ``answer`` ending in ``#### N``): the prompt asks for a last line
  ``#### N``, GSM8K's own answer format, so an instruction-following model is read strictly (as
  lm-evaluation-harness's ``strict-match``: the first ``#### N``); without one, the last number
  in the answer (lm-eval's ``flexible-extract``) — models that think aloud often end with a plain
  "The answer is 18." Numbers compare as numbers: ``18.00`` and ``18`` are the same answer (lm-eval
  compares strings and calls that wrong).
- **MATH-500** (``problem``, ``answer``, ``subject``, ``level``): the prompt asks for the final
  answer within ``\\boxed{}`` (the MATH convention every reasoning model is trained on); the last
  ``\\boxed{...}`` (balanced braces) is the answer, and it is compared with the reference by
  ``math-verify`` (symbolic and numeric equivalence: ``\\frac{1}{2}`` = ``0.5``, ``x=3`` = ``3``,
  intervals, sets) rather than string equality, which marks right answers wrong.
- **MMLU-Pro** (``question``, ``options`` up to ten, ``answer`` letter, ``answer_index``,
  ``category``): zero-shot, the options lettered A-J, and the prompt asks for a last line
  ``ANSWER: <letter>`` (the recipe's format: unambiguous to find and hard to produce by accident);
  the last such line is the answer, else the last "the answer is (X)" (MMLU-Pro's own CoT format,
  which lm-eval reads), since models trained on it keep using it.
"""

from __future__ import annotations

import hashlib
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from roost.errors import UserError
from roost.eval_record import Sampling

TaskName = Literal["gsm8k", "math500", "mmlu-pro"]
Verdict = Literal["correct", "wrong", "unparsed", "truncated"]
VERDICTS: tuple[Verdict, ...] = ("correct", "wrong", "unparsed", "truncated")

LETTERS = "ABCDEFGHIJ"


class Question(BaseModel):
    """One question of a task, as the run asks it and the log records it."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(description="Stable across files and formats: the dataset's own id, else a hash of the text.")
    category: str = Field(default="", description="MMLU-Pro's category, MATH-500's subject; '' for GSM8K.")
    text: str
    options: tuple[str, ...] = ()
    reference: str = Field(description="The right answer: GSM8K's number, MATH-500's answer, MMLU-Pro's letter.")


def split_reasoning(content: str | None, reasoning: str | None) -> tuple[str, str]:
    """(answer, reasoning) of a chat completion.

    vLLM's reasoning parser puts the thinking in ``message.reasoning`` (``reasoning_content`` on
    older servers) and the answer in ``content``. Without a parser the thinking stays in
    ``content`` between ``<think>`` and ``</think>``: it is cut out here, so a number or a letter
    in the thinking is never read as the answer. A ``<think>`` never closed leaves no answer.
    """
    answer, thought = content or "", reasoning or ""
    if "</think>" in answer:
        before, _, answer = answer.rpartition("</think>")
        thought = (thought + "\n" + before.replace("<think>", "", 1)).strip()
    elif answer.lstrip().startswith("<think>"):
        thought, answer = (thought + "\n" + answer.replace("<think>", "", 1)).strip(), ""
    return answer.strip(), thought


def question_id(*parts: str) -> str:
    """A stable id from a question's text (and options): the same question in a Parquet file and a
    JSONL file gets the same id, so a log and a baseline pair them."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]


def _text(row: Mapping[str, Any], column: str, where: str) -> str:
    value = row.get(column)
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise UserError(f"{where}: column {column!r} must be text, got {type(value).__name__}; "
                        f"is this the task's upstream file?")
    return str(value)


class EvalTask(ABC):
    """One accuracy task. Subclasses define every method; nothing is inherited by accident."""

    name: ClassVar[TaskName]
    title: ClassVar[str]
    columns: ClassVar[tuple[str, ...]]
    """The upstream columns a row must have."""
    hub_dataset: ClassVar[str]
    """The upstream dataset repo on the Hub (what ``--dataset`` defaults to)."""
    split_hint: ClassVar[str]
    """The subdirectory holding the evaluation split when a repo has several configs ('' for none)."""
    sampling: ClassVar[Sampling]
    """The recipe's settings for this task."""
    per_category: ClassVar[int | None]
    """Questions per category in the default sample (None: every question)."""
    id_column: ClassVar[str | None] = None

    @abstractmethod
    def question(self, row: Mapping[str, Any], where: str) -> Question:
        """The :class:`Question` of an upstream row (``where`` names the file and row in errors)."""

    @abstractmethod
    def prompt(self, q: Question) -> str:
        """The user message."""

    @abstractmethod
    def extract(self, answer: str) -> str | None:
        """The answer found in the model's answer text (reasoning already cut out); None: unparsed."""

    @abstractmethod
    def is_correct(self, extracted: str, q: Question) -> bool:
        """Whether an extracted answer is the reference."""

    def messages(self, q: Question) -> list[dict[str, str]]:
        return [{"role": "user", "content": self.prompt(q)}]

    def _id(self, row: Mapping[str, Any], *parts: str) -> str:
        if self.id_column and row.get(self.id_column) not in (None, ""):
            return str(row[self.id_column])
        return question_id(*parts)


# --- GSM8K ------------------------------------------------------------------------------------------

GSM8K_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
"""lm-eval's gsm8k ``strict-match`` (first match)."""
GSM8K_FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
"""lm-eval's gsm8k ``flexible-extract`` (last match)."""


def normalize_number(text: str) -> str:
    """What lm-eval's gsm8k ``regexes_to_ignore`` leave: no ``,``, no ``$``, no trailing ``.``."""
    return text.replace(",", "").replace("$", "").strip().rstrip(".")


def _decimal(text: str) -> Decimal | None:
    try:
        value = Decimal(normalize_number(text))
    except InvalidOperation:
        return None
    return value if value.is_finite() else None


class GSM8K(EvalTask):
    name = "gsm8k"
    title = "GSM8K"
    columns = ("question", "answer")
    hub_dataset = "openai/gsm8k"
    split_hint = "main"
    sampling = Sampling()
    per_category = None

    def question(self, row: Mapping[str, Any], where: str) -> Question:
        text, answer = _text(row, "question", where), _text(row, "answer", where)
        if "####" not in answer:
            raise UserError(f"{where}: GSM8K 'answer' has no '#### N' final line; is this GSM8K's upstream file?")
        reference = normalize_number(answer.rsplit("####", 1)[1])
        if _decimal(reference) is None:
            raise UserError(f"{where}: GSM8K 'answer' ends in '#### {reference}', which is not a number")
        return Question(id=self._id(row, text), text=text, reference=reference)

    def prompt(self, q: Question) -> str:
        return (f"{q.text}\n\nSolve the problem step by step. Then write the final answer, a number only, "
                f"on a last line of the form \"#### N\".")

    def extract(self, answer: str) -> str | None:
        strict = GSM8K_STRICT.search(answer)
        if strict and _decimal(strict.group(1)) is not None:
            return normalize_number(strict.group(1))
        for m in reversed(list(GSM8K_FLEXIBLE.finditer(answer))):
            found = m.group(1) or m.group(2)
            if _decimal(found) is not None:
                return normalize_number(found)
        return None

    def is_correct(self, extracted: str, q: Question) -> bool:
        got, want = _decimal(extracted), _decimal(q.reference)
        return got is not None and want is not None and got == want


# --- MATH-500 ---------------------------------------------------------------------------------------

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")


def last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (or ``\\fbox{...}``, or ``\\boxed 5``) in ``text``,
    braces balanced; None when there is none or it is never closed."""
    starts = [m.end() for m in _BOXED.finditer(text)]
    for start in reversed(starts):
        if start < len(text) and text[start] == "{":
            depth = 0
            for i in range(start, len(text)):
                if text[i] == "{":
                    depth += 1
                elif text[i] == "}":
                    depth -= 1
                    if depth == 0:
                        return text[start + 1:i].strip()
            continue  # never closed (a truncated answer): an earlier one may be whole
        m = re.match(r"([^\s$]+)", text[start:])
        if m:
            return m.group(1).strip()
    return None


_VERIFY_LOCK = threading.Lock()


def math_equal(reference: str, answer: str) -> bool:
    """``math-verify``'s verdict on an answer against the reference, both read as LaTeX.

    math-verify bounds parsing and comparison with ``signal.alarm``, which only works in the main
    thread; elsewhere (a Prefect task's thread) the bound is off and the lock keeps sympy calls
    one at a time."""
    from math_verify import parse, verify  # sympy: ~4 s to import, only for MATH-500

    main = threading.current_thread() is threading.main_thread()
    timeout = 5 if main else None
    with _VERIFY_LOCK:
        gold = parse(f"\\boxed{{{reference}}}", parsing_timeout=timeout)  # type: ignore[arg-type]
        got = parse(f"\\boxed{{{answer}}}", parsing_timeout=timeout)  # type: ignore[arg-type]
        if not gold or not got:
            return reference.strip() == answer.strip()
        return bool(verify(gold, got, timeout_seconds=timeout))


class Math500(EvalTask):
    name = "math500"
    title = "MATH-500"
    columns = ("problem", "answer", "subject")
    hub_dataset = "HuggingFaceH4/MATH-500"
    split_hint = ""
    sampling = Sampling()
    per_category = None
    id_column = "unique_id"

    def question(self, row: Mapping[str, Any], where: str) -> Question:
        text = _text(row, "problem", where)
        return Question(id=self._id(row, text), category=_text(row, "subject", where), text=text,
                        reference=_text(row, "answer", where).strip())

    def prompt(self, q: Question) -> str:
        return f"{q.text}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."

    def extract(self, answer: str) -> str | None:
        found = last_boxed(answer)
        return found or None

    def is_correct(self, extracted: str, q: Question) -> bool:
        return math_equal(q.reference, extracted)


# --- MMLU-Pro ---------------------------------------------------------------------------------------

MMLU_PRO_ANSWER = re.compile(r"(?im)answer\s*:\s*[*_`$]*\s*\(?\s*([A-J])(?=[)*_`$.,;:\]]|\s*$)")
"""The recipe's format: ``ANSWER: <letter>`` (markdown emphasis and a parenthesis tolerated). The
letter (either case) ends its line or is followed by punctuation, so in "Answer: I think B" the
pronoun is not read as option I, nor the article in "answer: a photon"."""
MMLU_PRO_LM_EVAL = re.compile(r"answer is \(?([ABCDEFGHIJ])\)?")
"""lm-eval's mmlu_pro filter (MMLU-Pro's own CoT format): ``the answer is (X)``."""


class MMLUPro(EvalTask):
    name = "mmlu-pro"
    title = "MMLU-Pro"
    columns = ("question", "options", "answer", "answer_index", "category")
    hub_dataset = "TIGER-Lab/MMLU-Pro"
    split_hint = ""
    sampling = Sampling(concurrency=8)
    per_category = 50
    id_column = "question_id"

    def question(self, row: Mapping[str, Any], where: str) -> Question:
        text, category = _text(row, "question", where), _text(row, "category", where)
        options: Any = row.get("options")
        if options is not None and hasattr(options, "tolist"):  # a numpy array from Parquet
            options = options.tolist()
        if not isinstance(options, (list, tuple)) or not options or len(options) > len(LETTERS):
            raise UserError(f"{where}: MMLU-Pro 'options' must be a list of 1 to {len(LETTERS)} answers")
        letter = _text(row, "answer", where).strip().upper()
        index = row.get("answer_index")
        if len(letter) != 1 or letter not in LETTERS[:len(options)] or (
                isinstance(index, int) and LETTERS[index:index + 1] != letter):
            raise UserError(f"{where}: MMLU-Pro 'answer' {letter!r} does not match 'answer_index' {index!r} "
                            f"and the {len(options)} options")
        opts = tuple(str(o) for o in options)
        return Question(id=self._id(row, text, *opts), category=category, text=text, options=opts, reference=letter)

    def prompt(self, q: Question) -> str:
        letters = LETTERS[:len(q.options)]
        choices = "\n".join(f"{letter}) {option}" for letter, option in zip(letters, q.options, strict=True))
        return ("Answer the following multiple choice question. The last line of your response should be of the "
                f"following format: 'ANSWER: $LETTER' (without quotes) where LETTER is one of {letters}. "
                f"Think step by step before answering.\n\n{q.text}\n\n{choices}")

    def extract(self, answer: str) -> str | None:
        for pattern in (MMLU_PRO_ANSWER, MMLU_PRO_LM_EVAL):
            found = pattern.findall(answer)
            if found:
                return str(found[-1]).upper()
        return None

    def is_correct(self, extracted: str, q: Question) -> bool:
        return extracted == q.reference


TASKS: dict[str, EvalTask] = {t.name: t for t in (GSM8K(), Math500(), MMLUPro())}


def get_task(name: str) -> EvalTask:
    try:
        return TASKS[name.strip().lower()]
    except KeyError:
        raise UserError(f"unknown task {name!r}: choose one of {', '.join(TASKS)}") from None


def verdict(task: EvalTask, q: Question, answer: str, finish_reason: str | None) -> tuple[Verdict, str | None]:
    """Exactly one of correct, wrong, unparsed or truncated, and the extracted answer.

    A truncated answer (``finish_reason == "length"``) counts as truncated whatever it contains:
    the model had not finished, so a number it was still working on is not its answer."""
    extracted = task.extract(answer) if answer else None
    if finish_reason == "length":
        return "truncated", extracted
    if extracted is None:
        return "unparsed", None
    return ("correct" if task.is_correct(extracted, q) else "wrong"), extracted
