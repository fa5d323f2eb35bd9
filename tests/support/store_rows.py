"""Synthetic ``runs`` rows in the real schema, for the store's scale tests and ``benchmarks/bench_store_scale.py``:
one real row (``roost.store.run_row`` of a sample record) repeated with its identity varied (run id,
start, model, host, commit), so a catalog of 100,000 runs is built in seconds instead of landed."""

from __future__ import annotations

import datetime as dt
import random

import pyarrow as pa

from roost import store
from roost.records import RunRecord
from support.samples import spark_run

T0 = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)


def partitions(models: int, hosts: int) -> list[tuple[str, str]]:
    """``(repo id, host)`` pairs: ``team/model-<m>`` on ``spark-<h>``."""
    return [(f"team/model-{m:02d}", f"spark-{h:02d}") for m in range(models) for h in range(hosts)]


def run_id_at(when: dt.datetime, n: int) -> str:
    return f"{when:%Y%m%dT%H%M%SZ}-{n:08x}"


def synthetic_runs(n: int, parts: list[tuple[str, str]], *, seed: int = 0, span_days: float = 365.0,
                   start: dt.datetime = T0) -> pa.Table:
    """``n`` runs spread over ``parts`` and ``span_days``, oldest first, as one Arrow table with the
    runs schema plus ``model`` and ``host`` (what a catalog holds)."""
    rng = random.Random(seed)
    base = store.run_row(spark_run(day=1), "records/x.json")
    step = span_days * 86400.0 / max(1, n)
    rows = []
    for i in range(n):
        repo, host = parts[rng.randrange(len(parts))]
        when = start + dt.timedelta(seconds=i * step)
        run_id = run_id_at(when, i)
        row = dict(base)
        row.update(run_id=run_id, started_at=when, repo_id=repo, host_name=host, stored_at=when,
                   decode_tok_s=12.0 + rng.random(), record_path=f"records/model={store.slug(repo)}/host={host}/{run_id}.json",
                   model=store.slug(repo), host=store.slug(host))
        rows.append(row)
    schema = store.RUNS_SCHEMA.append(pa.field("model", pa.string())).append(pa.field("host", pa.string()))
    return pa.Table.from_pylist(rows, schema=schema)


def record_for(row: dict[str, object]) -> RunRecord:
    """A full record for a synthetic row (for the objects a baseline lookup reads)."""
    rec = spark_run(day=1, run_id=str(row["run_id"]))
    meta = rec.meta.model_copy(update={"repo_id": row["repo_id"], "host": row["host_name"],
                                       "started_at": row["started_at"]})
    return rec.model_copy(update={"meta": meta})
