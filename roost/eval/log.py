"""The per-question JSONL log of an accuracy run, and resuming from it.

Line 1 is a header naming what the answers belong to (task, model, dataset revision, sampling, the
sample's seed and size, a digest of its question ids); every further line is one answered question
(:class:`Answer`), appended and flushed to disk as soon as it is scored. A run given an existing
log checks the header (a log of another task, model, dataset or sampling cannot be resumed: its
answers would not be this run's) and asks only the questions it does not hold, so no question is
asked twice and the final scores are those of an uninterrupted run. A line cut by ``kill -9`` in the
middle of a write is dropped (the question is asked again) and the file is cut back to the last
whole line before anything is appended.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from roost.errors import UserError
from roost.eval.suites import Question, Verdict

LOG_VERSION = 1


class Answer(BaseModel):
    """One question answered and scored (a log line; a row of the store's per-question table)."""

    id: str
    category: str = ""
    verdict: Verdict
    extracted: str | None = None
    reference: str
    output_tokens: int | None = Field(default=None, description="usage.completion_tokens (reasoning included).")
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    seconds: float | None = None
    answer: str = Field(default="", description="The answer text (reasoning cut out).")
    reasoning: str = Field(default="", description="The reasoning, kept apart from the answer.")


class LogHeader(BaseModel):
    roost_eval_log: int = LOG_VERSION
    task: str
    model: str
    dataset_source: str
    dataset_revision: str
    sampling: dict[str, Any] = Field(description="What decides the answers: every sampling field but concurrency.")
    seed: int
    sample_size: int
    sample_digest: str


def sample_digest(questions: Sequence[Question]) -> str:
    return hashlib.sha256("\n".join(q.id for q in questions).encode()).hexdigest()[:16]


_COMPARED = ("task", "model", "dataset_source", "dataset_revision", "sampling", "seed", "sample_size", "sample_digest")


class EvalLog:
    """An open log: the answers it already held, and :meth:`append` for new ones."""

    def __init__(self, path: Path, header: LogHeader) -> None:
        self.path = path
        self.header = header
        self.answers: dict[str, Answer] = {}
        self._fh: Any = None

    @classmethod
    def open(cls, path: Path, header: LogHeader) -> EvalLog:
        """Open ``path`` for this run: a new log, or the answers of an earlier run of the same settings."""
        log = cls(path, header)
        if path.exists() and not path.is_file():
            raise UserError(f"--log {path}: not a regular file")
        if path.is_file() and path.stat().st_size > 0:
            log._read()
        else:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(header.model_dump_json() + "\n", encoding="utf-8")
            except OSError as exc:
                raise UserError(f"--log {path}: cannot write ({exc.strerror}); pick a writable path") from None
        try:
            log._fh = path.open("a", encoding="utf-8")
        except OSError as exc:
            raise UserError(f"--log {path}: cannot append ({exc.strerror})") from None
        return log

    def _read(self) -> None:
        raw = self.path.read_bytes()
        whole = raw[: raw.rfind(b"\n") + 1]  # a last line without its newline was cut mid-write
        lines = whole.decode("utf-8", errors="replace").splitlines()
        try:
            old = LogHeader.model_validate_json(lines[0]) if lines else None
        except ValidationError:
            old = None
        if old is None:
            raise UserError(f"--log {self.path}: not a roost eval log (no header line); give a new file")
        mine, theirs = self.header.model_dump(), old.model_dump()
        diff = [k for k in _COMPARED if mine[k] != theirs[k]]
        if diff:
            k = diff[0]
            raise UserError(f"--log {self.path}: written by a run with another {k.replace('_', ' ')} "
                            f"({theirs[k]!r}, this run: {mine[k]!r}); resume with the same settings or give a new file")
        for line in lines[1:]:
            try:
                a = Answer.model_validate_json(line)
            except ValidationError:
                continue  # a damaged line: that question is asked again
            self.answers[a.id] = a
        if len(whole) != len(raw):
            with self.path.open("r+b") as f:
                f.truncate(len(whole))

    def append(self, answer: Answer) -> None:
        self.answers[answer.id] = answer
        self._fh.write(answer.model_dump_json() + "\n")
        self._fh.flush()
        os.fsync(self._fh.fileno())

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def read_answers(path: Path) -> list[dict[str, Any]]:
    """The answer lines of a log, as dicts (for reports and tests)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines()[1:]:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
