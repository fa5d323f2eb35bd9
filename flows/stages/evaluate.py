"""Stage 8b, ``evaluate``: accuracy evaluations, answers stored, paired with the baseline run."""

from __future__ import annotations

from pathlib import Path

from prefect import get_run_logger
from pydantic import SecretStr

from flows.stages.timing import stage
from roost import catalogue as C
from roost.accuracy import other_models, pair_with_baseline
from roost.errors import RoostError
from roost.eval.log import read_answers, sample_digest
from roost.eval.runner import EvalResult
from roost.eval.scoring import summarize
from roost.profiles import ModelProfile
from roost.records import EvalRecord, RunRecord
from roost.settings import roost_home
from roost.store import append_eval_answers
from tasks.evaluate import PreparedEval, eval_task


def eval_log_path(record: RunRecord, task_name: str) -> Path:
    """Where an evaluation's per-question log lives: per flow run (a retried run resumes it), else per run."""
    run = record.meta.prefect_flow_run_id or record.meta.run_id
    return roost_home() / "evals" / run / f"{task_name}.jsonl"


def eval_stage(record: RunRecord, base_url: str, prof: ModelProfile, key: SecretStr, prepared: list[PreparedEval],
               served_model_name: str | None = None) -> None:
    """Run each evaluation against the server into ``record.evals``: answers into the store's
    ``eval_answers`` table, paired with the newest earlier run of the same model and evaluation
    (McNemar, ``roost.accuracy.pair_with_baseline``), and the other models the profile compares with.
    An evaluation the server cuts short keeps its answers (log and store) and fails the stage."""
    if not prepared:
        return
    with stage(record, "evaluate") as st:
        notes = []
        for p in prepared:
            log_path = eval_log_path(record, p.settings.task)
            try:
                result = eval_task(base_url, served_model_name or prof.served_model_name, p, key, log_path=log_path,
                                   profile=record.meta.profile, host=record.meta.host)
            except RoostError as exc:
                _keep_partial(record, p, log_path, exc)
                raise
            ev = _evaluated(record, prof, result)
            record.evals.append(ev)
            notes.append(f"{result.task} {C.fmt_accuracy(result.summary.accuracy)}"
                         + (f" ({ev.comparison.describe()})" if ev.comparison else ""))
        st.note = "; ".join(notes)


def _evaluated(record: RunRecord, prof: ModelProfile, result: EvalResult) -> EvalRecord:
    """A finished evaluation: its answers stored, its record paired with the baseline and the others."""
    append_eval_answers(record.meta, result.task, result.sample_digest,
                        [a.model_dump(exclude={"reasoning"}) for a in result.answers])
    ev = EvalRecord(task=result.task, dataset=result.dataset, sampling=result.sampling, seed=result.seed,
                    limit=result.limit, per_category=result.per_category, sample_digest=result.sample_digest,
                    summary=result.summary, elapsed_s=result.elapsed_s, resumed=result.resumed)
    base = pair_with_baseline(record, ev, {a.id: (a.category, a.verdict == "correct") for a in result.answers})
    if base is not None and ev.comparison is not None and ev.comparison.significant:
        logger = get_run_logger()
        log = logger.warning if ev.comparison.direction == "worse" else logger.info
        log("%s accuracy vs run %s: %s", ev.task, base.meta.run_id, ev.comparison.describe())
    ev.others = other_models(prof.eval_compare_with, ev)
    return ev


def _keep_partial(record: RunRecord, p: PreparedEval, log_path: Path, exc: RoostError) -> None:
    """An evaluation cut short: what its log holds goes to the store and the record (status failed)."""
    answers = read_answers(log_path) if log_path.is_file() else []
    digest = sample_digest(p.dataset.questions)
    append_eval_answers(record.meta, p.settings.task, digest, [{k: v for k, v in a.items() if k != "reasoning"}
                                                               for a in answers])
    record.evals.append(EvalRecord(task=p.settings.task, status="failed", error=str(exc), dataset=p.dataset.info,
                                   sampling=p.settings.sampling, seed=p.settings.seed, limit=p.settings.limit,
                                   per_category=p.settings.per_category, sample_digest=digest,
                                   summary=summarize(answers)))
