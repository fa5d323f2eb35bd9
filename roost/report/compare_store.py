"""The runs two models are compared on (``roost.report.compare``), found in the results store.

- :func:`matching`: the stored runs of a model named by repo id, its slug, served model name or profile;
- :func:`pick_run`: a model's run to compare: its newest completed run on the host that has evaluations
  (a landing), else its newest completed run (a rebenchmark measures throughput only);
- :func:`previous_production`: the model a production landing replaced: the newest earlier completed run
  on the same host of another model that was production (a profile marked ``production``, or a server
  that kept serving: restart policy ``unless-stopped``, ``roost.serve.occupancy.PRODUCTION_POLICY``);
- :func:`stored_answers` and :func:`compare_stored`: a run's stored answers per task, and the comparison.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from roost.records import RunRecord
from roost.report.compare import KNOWLEDGE_TASK, REASONING_TASKS, Answers, ModelComparison, compare_models
from roost.store import StoreLike, load_eval_answers, load_evals, load_record, load_runs, resolve, slug

ANSWER_COLUMNS = ("verdict", "category", "output_tokens")


def matching(runs: Any, model: str) -> Any:
    """The rows of a ``load_runs`` frame whose model is ``model`` (repo id, slug, served name or profile)."""
    keep = ((runs["repo_id"] == model) | (runs["model"] == slug(model)) | (runs["served_model_name"] == model)
            | (runs["profile"] == model))
    return runs[keep]


def pick_run(runs: Any, evals: Any) -> Any | None:
    """The row of the run to compare among one model's ``runs`` (see the module's docstring); None
    when none completed. ``evals``: a ``load_evals`` frame of the same partitions."""
    done = runs[runs["status"] == "completed"]
    if done.empty:
        return None
    evaluated = done[done["run_id"].isin(set(evals["run_id"]))] if not evals.empty else done.iloc[:0]
    return (evaluated if not evaluated.empty else done).iloc[-1]


def is_production(row: Any, record: RunRecord | None, production_profiles: Collection[str]) -> bool:
    """Was a run its host's production model: its profile is one, or its server kept serving."""
    from roost.serve.occupancy import PRODUCTION_POLICY

    return str(row["profile"]) in production_profiles or (
        record is not None and record.serve.restart_policy == PRODUCTION_POLICY)


def previous_production(record: RunRecord, production_profiles: Collection[str],
                        root: StoreLike = None) -> str | None:
    """The repo id of the production model ``record``'s landing replaced on its host; None when none is stored."""
    store = resolve(root)
    m = record.meta
    runs = load_runs(store, host=m.host)
    earlier = runs[(runs["repo_id"] != m.repo_id) & (runs["status"] == "completed") & (runs["run_id"] != m.run_id)
                   & (runs["started_at"] < m.started_at)]
    for _, row in earlier.iloc[::-1].iterrows():
        if is_production(row, None, production_profiles):
            return str(row["repo_id"])
        rec = load_record(str(row["run_id"]), store, model=str(row["repo_id"]), host=m.host)
        if is_production(row, rec, production_profiles):
            return str(row["repo_id"])
    return None


def stored_run(model: str, host: str, root: StoreLike = None, before: Any = None) -> RunRecord | None:
    """The record :func:`pick_run` picks of ``model`` on ``host`` (started before ``before`` if given)."""
    store = resolve(root)
    runs = matching(load_runs(store, host=host), model)
    if before is not None:
        runs = runs[runs["started_at"] < before]
    if runs.empty:
        return None
    repo_id = str(runs.iloc[-1]["repo_id"])
    row = pick_run(runs, load_evals(store, model=repo_id, host=host))
    return None if row is None else load_record(str(row["run_id"]), store, model=str(row["repo_id"]), host=host)


def stored_answers(record: RunRecord, root: StoreLike = None) -> Answers:
    """The run's stored answers of the compared tasks (a task without stored answers is left out)."""
    out: dict[str, list[dict[str, Any]]] = {}
    m = record.meta
    for task in {e.task for e in record.evals} & {*REASONING_TASKS, KNOWLEDGE_TASK}:
        df = load_eval_answers(m.run_id, task, root, model=m.repo_id, host=m.host)
        if not df.empty:
            out[task] = [{k: (None if v != v else v) for k, v in r.items()}  # NaN (a missing count) -> None
                         for r in df[list(ANSWER_COLUMNS)].to_dict(orient="records")]
    return out


def compare_stored(a: RunRecord, b: RunRecord, root: StoreLike = None) -> ModelComparison:
    """:func:`roost.report.compare.compare_models` of two runs with their stored answers."""
    store = resolve(root)
    return compare_models(a, b, stored_answers(a, store), stored_answers(b, store))


def landing_comparison(record: RunRecord, compare_with: str, production: bool, production_profiles: Collection[str],
                       root: StoreLike = None) -> tuple[ModelComparison | None, str]:
    """A landing's comparison with the model it replaced: ``compare_with`` (a profile's setting) if given, else
    for a ``production`` landing the host's previous production model (:func:`previous_production`); and a
    sentence saying what was compared, or why nothing was."""
    if not compare_with and not production:
        return None, "not compared with another model (neither production nor compare_with)"
    store = resolve(root)
    other = compare_with or previous_production(record, production_profiles, store)
    if not other:
        return None, f"no earlier production model of {record.meta.host} in the results store: nothing to compare with"
    theirs = stored_run(other, record.meta.host, store)
    if theirs is None or theirs.meta.repo_id == record.meta.repo_id:
        return None, f"no completed run of {other} on {record.meta.host} in the results store: not compared"
    return compare_stored(record, theirs, store), f"compared with {theirs.meta.repo_id}, run {theirs.meta.run_id}"
