"""Ask a sample of a task's questions of a server, score each answer, and summarize.

Each question is one non-streamed ``/v1/chat/completions`` request through
:class:`~roost.vllm.client.VllmClient` (answers need their text, not their timing), with the task's
sampling, ``chat_template_kwargs.enable_thinking`` and a per-question ``seed`` derived from the run's
seed and the question id: a resumed run asks a question exactly as the first run would have.
``concurrency`` requests are in flight at once. Every answer is scored and appended to the log (if
any) before the next is counted, so an interrupted run loses nothing it had answered.

What the server does decides the exit: a model it does not serve, a refused key, a request it
rejects (400), or an answer that is not a chat completion are unusable input (:class:`UserError`);
a server that stops answering (connection refused, 5xx after retries) fails the run
(:class:`EvalServerGone`). Both keep what was answered in the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import BaseModel, Field

from roost.errors import RoostError, UserError
from roost.eval.datasets import Dataset, load_dataset, sample
from roost.eval.log import Answer, EvalLog, LogHeader, sample_digest
from roost.eval.scoring import summarize
from roost.eval.settings import EvalSettings as EvalSettings  # re-exported: declared apart, light
from roost.eval.suites import EvalTask, Question, get_task, split_reasoning, verdict
from roost.eval_record import DatasetInfo, EvalSummary, Sampling
from roost.inputs.text import shown
from roost.vllm.client import VllmClient, display_url, run_sync

RETRIES = 3
"""Attempts per question when the server is unreachable or answers 5xx (1 s, 2 s, 4 s apart)."""


class EvalServerGone(RoostError):
    """The server stopped answering: the run failed (exit 1); the log keeps what was answered."""

    exit_code = 1


class EvalProgress(BaseModel):
    done: int
    total: int
    correct: int
    elapsed_s: float
    eta_s: float | None

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.done if self.done else None

    def describe(self) -> str:
        """``accuracy so far 41.2%, ETA 312 s`` (the count is shown beside it)."""
        acc = f"{100 * self.accuracy:.1f}%" if self.accuracy is not None else "—"
        eta = f", ETA {self.eta_s:.0f} s" if self.eta_s is not None else ""
        return f"accuracy so far {acc}{eta}"


class EvalResult(BaseModel):
    """A finished (or stopped) accuracy run."""

    task: str
    model: str
    base_url: str
    status: Literal["completed", "failed"] = "completed"
    error: str = ""
    summary: EvalSummary
    sampling: Sampling
    seed: int
    limit: int | None = None
    per_category: int | None = None
    dataset: DatasetInfo
    sample_digest: str = Field(default="", description="Digest of the sample's question ids (roost.eval.log).")
    resumed: int = Field(default=0, description="Answers taken from the log instead of asked again.")
    elapsed_s: float = 0.0
    answers: list[Answer] = Field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """The CLI's JSON (the answers stay in the log)."""
        s = self.summary
        return {
            "task": self.task, "model": self.model, "status": self.status, "n": s.n, "correct": s.correct,
            "wrong": s.wrong, "accuracy": s.accuracy, "ci_low": s.ci_low, "ci_high": s.ci_high,
            "unparsed": s.unparsed, "truncated": s.truncated, "mean_output_tokens": s.mean_output_tokens,
            "per_category": {k: v.model_dump() for k, v in s.per_category.items()},
            "sampling": self.sampling.model_dump(), "seed": self.seed, "limit": self.limit,
            "per_category_sample": self.per_category, "dataset": self.dataset.model_dump(),
            "resumed": self.resumed, "elapsed_s": round(self.elapsed_s, 3), "error": self.error,
        }


def request_seed(seed: int, qid: str) -> int:
    """The per-question sampling seed: the same question asked again draws the same tokens."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{qid}".encode()).digest()[:4], "big") >> 1


def chat_body(task: EvalTask, q: Question, model: str, sampling: Sampling, seed: int) -> dict[str, Any]:
    return {
        "model": model, "messages": task.messages(q), "max_tokens": sampling.max_tokens,
        "temperature": sampling.temperature, "top_p": sampling.top_p, "top_k": sampling.top_k,
        "seed": request_seed(seed, q.id), "chat_template_kwargs": {"enable_thinking": sampling.thinking},
    }


def _server_message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:200]
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return str(err.get("message") or err)[:300]
    return str(body.get("message") or body.get("detail") or body)[:300] if isinstance(body, dict) else str(body)[:200]


def score_response(task: EvalTask, q: Question, body: Any, seconds: float) -> Answer:
    """An :class:`Answer` from a chat completion's JSON; a UserError if it is not one."""
    choices = body.get("choices") if isinstance(body, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    message = choice.get("message") if choice else None
    if not isinstance(message, dict):
        raise UserError("the server answered without a chat completion (no choices[0].message): is it an "
                        "OpenAI-compatible chat server?")
    content = message.get("content")
    thought = message.get("reasoning") or message.get("reasoning_content")
    answer, reasoning = split_reasoning(content if isinstance(content, str) else None,
                                        thought if isinstance(thought, str) else None)
    finish = choice.get("finish_reason") if choice else None
    finish = finish if isinstance(finish, str) else None
    usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
    out_tokens, in_tokens = usage.get("completion_tokens"), usage.get("prompt_tokens")
    v, extracted = verdict(task, q, answer, finish)
    return Answer(id=q.id, category=q.category, verdict=v, extracted=extracted, reference=q.reference,
                  output_tokens=out_tokens if type(out_tokens) is int else None,
                  prompt_tokens=in_tokens if type(in_tokens) is int else None, finish_reason=finish,
                  seconds=round(seconds, 3), answer=answer, reasoning=reasoning)


async def _ask(client: VllmClient, task: EvalTask, q: Question, model: str, sampling: Sampling, seed: int) -> Answer:
    body = chat_body(task, q, model, sampling, seed)
    timeout = 120.0 + sampling.max_tokens * 0.5  # a slow Spark under load still writes 2 tok/s
    fault = ""
    for attempt in range(RETRIES):
        if attempt:
            await asyncio.sleep(2 ** (attempt - 1))
        t0 = time.perf_counter()
        try:
            resp = await client.post_json("/v1/chat/completions", body, timeout_s=timeout)
        except httpx.HTTPError as exc:
            fault = f"{type(exc).__name__}"
            continue
        if resp.status_code >= 500 or resp.status_code in (408, 429):
            fault = f"HTTP {resp.status_code}: {_server_message(resp)}"
            continue
        if resp.status_code in (401, 403):
            raise UserError(f"the server refused the API key (HTTP {resp.status_code}): give the server's key with "
                            f"--api-key or VLLM_API_KEY")
        if resp.status_code != 200:
            raise UserError(f"the server rejected a question (HTTP {resp.status_code}): "
                            f"{client.scrub(_server_message(resp))}")
        try:
            data = resp.json()
        except ValueError:
            raise UserError("the server answered a chat completion with something that is not JSON: is it an "
                            "OpenAI-compatible chat server?") from None
        return score_response(task, q, data, time.perf_counter() - t0)
    raise EvalServerGone(f"the server stopped answering ({client.scrub(fault)}, {RETRIES} attempts)")


async def ask_all(client: VllmClient, task: EvalTask, questions: list[Question], model: str, sampling: Sampling,
                  seed: int, *, log: EvalLog | None, done: dict[str, Answer],
                  progress: Callable[[EvalProgress], None] | None = None) -> dict[str, Answer]:
    """Ask every question not in ``done``, ``sampling.concurrency`` at a time; all answers, by id."""
    answers = dict(done)
    todo = [q for q in questions if q.id not in answers]
    total, t0 = len(questions), time.monotonic()
    asked = 0
    correct = sum(a.verdict == "correct" for a in answers.values())
    sem = asyncio.Semaphore(sampling.concurrency)

    def report() -> None:
        if progress is None:
            return
        elapsed = time.monotonic() - t0
        left = total - len(answers)
        eta = elapsed / asked * left if asked else None
        progress(EvalProgress(done=len(answers), total=total, correct=correct, elapsed_s=elapsed, eta_s=eta))

    async def one(q: Question) -> None:
        nonlocal asked, correct
        async with sem:
            a = await _ask(client, task, q, model, sampling, seed)
        answers[q.id] = a
        asked += 1
        correct += a.verdict == "correct"
        if log is not None:
            log.append(a)
        report()

    tasks = [asyncio.ensure_future(one(q)) for q in todo]
    try:
        await asyncio.gather(*tasks)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return answers


async def check_server(client: VllmClient, model: str, settings: EvalSettings) -> Sampling:
    """The model is served; ``max_tokens`` fits its window (the task default is capped to half of it)."""
    try:
        listing = await client.models()
    except httpx.HTTPError as exc:
        raise EvalServerGone(f"{display_url(client.base_url)} does not answer ({type(exc).__name__})") from None
    if listing.status_code in (401, 403):
        raise UserError(f"{display_url(client.base_url)} refused the API key (HTTP {listing.status_code}): give the "
                        f"server's key with --api-key or VLLM_API_KEY")
    if listing.status_code == 200 and listing.problem:
        raise UserError(f"{display_url(client.base_url)} answered /v1/models with {listing.problem}: is it an "
                        "OpenAI-compatible server? pass its root URL (e.g. http://host:8000)")
    served = listing.get(model)
    if listing.status_code == 200 and served is None:
        raise UserError(f"--model {shown(model, 80)!r} is not served at {display_url(client.base_url)} "
                        f"(it serves: {listing.listing()})")
    sampling = settings.sampling
    window = served.max_model_len if served else None
    if window is not None and sampling.max_tokens >= window:
        if settings.max_tokens_given:
            raise UserError(f"--max-tokens {sampling.max_tokens} does not fit the server's {window:,}-token window "
                            f"with a question before it: give at most {window // 2}")
        sampling = sampling.model_copy(update={"max_tokens": window // 2})
    return sampling


def run_eval(base_url: str, model: str, settings: EvalSettings, *, api_key: str | None = None,
             log_path: Path | None = None, progress: Callable[[EvalProgress], None] | None = None,
             dataset: Dataset | None = None, endpoint: str | None = None, token: str | None = None) -> EvalResult:
    """Load, sample, ask and score (synchronous: the CLI and the Prefect task call it)."""
    task = get_task(settings.task)
    data = dataset or load_dataset(task, settings.dataset, endpoint=endpoint, token=token)
    questions = sample(data.questions, seed=settings.seed, limit=settings.limit, per_category=settings.per_category)

    async def go() -> EvalResult:
        t0 = time.monotonic()
        async with VllmClient(base_url, model, api_key=api_key,
                              http_connections=settings.sampling.concurrency + 2) as client:
            sampling = await check_server(client, model, settings)
            header = LogHeader(task=task.name, model=model, dataset_source=data.info.source,
                               dataset_revision=data.info.revision, sampling=sampling.answer_fields(),
                               seed=settings.seed, sample_size=len(questions), sample_digest=sample_digest(questions))
            log = EvalLog.open(log_path, header) if log_path is not None else None
            done = {q.id: log.answers[q.id] for q in questions if log is not None and q.id in log.answers}
            try:
                answers = await ask_all(client, task, questions, model, sampling, settings.seed, log=log, done=done,
                                        progress=progress)
            finally:
                if log is not None:
                    log.close()
        ordered = [answers[q.id] for q in questions]
        return EvalResult(task=task.name, model=model, base_url=display_url(client.base_url),
                          summary=summarize(a.model_dump() for a in ordered), sampling=sampling, seed=settings.seed,
                          limit=settings.limit, per_category=settings.per_category, dataset=data.info,
                          sample_digest=header.sample_digest, resumed=len(done), elapsed_s=time.monotonic() - t0, answers=ordered)

    return run_sync(go)
