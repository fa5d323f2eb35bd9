"""Evaluation stage: thin Prefect tasks over ``roost.eval`` (datasets first, then the questions).

- ``eval_datasets_task``: every evaluation's questions read (and the sample drawn) while the Hub
  source is open and before any server starts, so a missing dataset or a sample that cannot be drawn
  stops the run before a GPU minute is spent. Retried like the download when the Hub is unreachable.
- ``eval_task``: one evaluation against the server: a Prefect progress artifact (questions done,
  accuracy so far, ETA) and a log line every ``LOG_EVERY_S``; a table artifact of the scores per
  category at the end. The per-question log (``log_path``) is kept across retries of the flow run,
  so a retried stage asks only the questions it had not answered.

Never cached (an evaluation measures *now*); the API key is a ``SecretStr`` and is never logged.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import cast
from uuid import UUID

from prefect import task
from prefect.artifacts import create_markdown_artifact, create_progress_artifact, update_progress_artifact
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger
from pydantic import BaseModel, SecretStr

from blocks.secrets import hub_token
from roost import catalogue as C
from roost.eval.datasets import Dataset, load_dataset, sample
from roost.eval.runner import EvalProgress, EvalResult, EvalSettings, run_eval
from roost.eval.suites import get_task
from roost.naming import artifact_key
from roost.report.markdown import pane_tables
from roost.settings import environment
from tasks._shared import retry_transient_only

LOG_EVERY_S = 10.0
"""Seconds between progress log lines (and artifact updates) of a long evaluation."""


class PreparedEval(BaseModel):
    """One evaluation ready to run: its settings and its questions (the sample already drawn)."""

    settings: EvalSettings
    dataset: Dataset


@task(name="eval-datasets", cache_policy=NO_CACHE, persist_result=False, retries=2, retry_delay_seconds=5,
      retry_condition_fn=retry_transient_only)
def eval_datasets_task(settings: list[EvalSettings], endpoint: str | None = None,
                       token_secret: str | None = None) -> list[PreparedEval]:
    """Read each evaluation's dataset (a path, or a Hub dataset repo from ``endpoint``, else ``HF_ENDPOINT``)
    and draw its sample. The Hub token by roost's one precedence (``blocks.secrets.hub_token``)."""
    logger = get_run_logger()
    token = hub_token(token_secret)
    endpoint = endpoint or environment().hf_endpoint
    out: list[PreparedEval] = []
    for s in settings:
        t0 = time.monotonic()
        data = load_dataset(get_task(s.task), s.dataset, endpoint=endpoint, token=token)
        questions = sample(data.questions, seed=s.seed, limit=s.limit, per_category=s.per_category)
        logger.info("%s: %d of %d questions from %s@%s (%.1f s)", s.task, len(questions), len(data.questions),
                    data.info.source, data.info.revision[:16], time.monotonic() - t0)
        out.append(PreparedEval(settings=s, dataset=data.model_copy(update={"questions": questions})))
    return out


def score_table(result: EvalResult) -> list[dict[str, object]]:
    """The scores as the table artifact shows them: the whole sample, then one row per category."""
    s = result.summary
    rows: list[dict[str, object]] = [{"category": "all", "n": s.n, "correct": s.correct,
                                      C.ACCURACY.label: C.fmt_accuracy(s.accuracy, s.ci_low, s.ci_high),
                                      C.UNPARSED.label: s.unparsed, C.TRUNCATED.label: s.truncated,
                                      C.MEAN_OUTPUT_TOKENS.label: C.MEAN_OUTPUT_TOKENS.format(s.mean_output_tokens)}]
    for cat, c in s.per_category.items():
        rows.append({"category": cat, "n": c.n, "correct": c.correct, C.ACCURACY.label: C.fmt_accuracy(c.accuracy),
                     C.UNPARSED.label: "", C.TRUNCATED.label: "", C.MEAN_OUTPUT_TOKENS.label: ""})
    return rows


@task(name="evaluate", cache_policy=NO_CACHE, persist_result=False)
def eval_task(base_url: str, model: str, prepared: PreparedEval, api_key: SecretStr | None, *, log_path: Path,
              profile: str = "", host: str = "") -> EvalResult:
    """Ask ``prepared``'s questions of ``model`` at ``base_url``; return the scored answers."""
    logger = get_run_logger()
    s = prepared.settings
    title = get_task(s.task).title
    where = f"{title} on {model}" + (f" ({profile} on {host})" if profile and host else "")
    artifact_id = cast(UUID, create_progress_artifact(
        progress=0.0, key=artifact_key("roost-eval-progress", s.task, profile, host), description=f"{where}: starting"))
    logger.info("%s: %d questions, %d in flight, max_tokens %d, temperature %s, thinking %s; log %s", where,
                len(prepared.dataset.questions), s.sampling.concurrency, s.sampling.max_tokens,
                s.sampling.temperature, "on" if s.sampling.thinking else "off", log_path)
    last = [0.0]

    def progress(p: EvalProgress) -> None:
        now = time.monotonic()
        if p.done < p.total and now - last[0] < LOG_EVERY_S:
            return
        last[0] = now
        line = f"{p.done}/{p.total} questions, {p.describe()}"
        logger.info("%s: %s", title, line)
        update_progress_artifact(artifact_id=artifact_id, progress=round(100 * p.done / max(p.total, 1), 1),
                                 description=f"{where}: {line}")

    key = api_key.get_secret_value() if api_key is not None else None
    result = run_eval(base_url, model, s, api_key=key or None, log_path=log_path, progress=progress,
                      dataset=prepared.dataset)
    # as Markdown fitted to the artifact pane (the UI never wraps a table cell)
    create_markdown_artifact(markdown=pane_tables(score_table(result), text=("category",)),
                             key=artifact_key("roost-eval", s.task, profile, host),
                             description=f"{where}: accuracy with its 95% Wilson interval, per category "
                             "(definitions: roost/catalogue.py)")
    sm = result.summary
    logger.info("%s: %s; %d unparsed, %d truncated, %s per answer%s", where,
                C.fmt_accuracy(sm.accuracy, sm.ci_low, sm.ci_high), sm.unparsed, sm.truncated,
                C.MEAN_OUTPUT_TOKENS.format(sm.mean_output_tokens),
                f" ({result.resumed} answers from the log)" if result.resumed else "")
    return result
