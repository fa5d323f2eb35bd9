"""A run's accuracy beside the runs it is compared with, read from the results store.

- :func:`pair_with_baseline`: this run's verdicts against the baseline run's (the newest earlier run
  of the same model on the same questions: ``roost.regress.accuracy_baseline``), question by question
  (McNemar: ``roost.eval.scoring.paired``);
- :func:`other_models`: the newest scores of the models a profile compares with, on the same
  dataset revision.
"""

from __future__ import annotations

from collections.abc import Sequence

from roost.eval.scoring import paired
from roost.records import EvalRecord, OtherModelScore, RunRecord
from roost.regress import accuracy_baseline, latest_scores
from roost.store import load_eval_answers, record_batches_newest_first


def pair_with_baseline(record: RunRecord, ev: EvalRecord, verdicts: dict[str, tuple[str, bool]]) -> RunRecord | None:
    """Set ``ev.baseline_run_id``, ``ev.baseline`` and ``ev.comparison`` from the baseline run (the
    model's stored runs read newest first, until it is found); ``verdicts``: this run's
    ``question id -> (category, correct)``. Returns the baseline run, None when there is none."""
    found = next((f for batch in record_batches_newest_first(model=record.meta.repo_id)
                  if (f := accuracy_baseline(ev, batch, before=record.meta.started_at)) is not None), None)
    if found is None:
        return None
    base_rec, base_ev = found
    rows = load_eval_answers(base_rec.meta.run_id, base_ev.task, model=base_rec.meta.repo_id, host=base_rec.meta.host)
    before = {str(r.question_id): (str(r.category or ""), r.verdict == "correct") for r in rows.itertuples()}
    ev.baseline_run_id = base_rec.meta.run_id
    ev.baseline = score_of(base_rec, base_ev)
    ev.comparison = paired(before, verdicts)
    return base_rec


def other_models(repo_ids: Sequence[str], ev: EvalRecord) -> list[OtherModelScore]:
    """The newest scores of ``repo_ids`` (a profile's ``eval_compare_with``) on ``ev``'s task and
    dataset revision; a model never evaluated on it is left out."""
    out = []
    for repo_id in repo_ids:
        found = next((f for batch in record_batches_newest_first(model=repo_id)
                      if (f := latest_scores(ev.task, ev.dataset.revision, batch)) is not None), None)
        if found is not None:
            out.append(score_of(*found))
    return out


def score_of(rec: RunRecord, ev: EvalRecord) -> OtherModelScore:
    """``ev``'s summary as a comparison row naming its run."""
    s = ev.summary
    return OtherModelScore(repo_id=rec.meta.repo_id, run_id=rec.meta.run_id, host=rec.meta.host, accuracy=s.accuracy,
                           ci_low=s.ci_low, ci_high=s.ci_high, n=s.n, per_category=s.per_category)
