"""The tables' Arrow schemas and how a record becomes rows (statistics flattened here, and only here)."""

from __future__ import annotations

import json
import types
import typing
from typing import Any

import pyarrow as pa

from roost.headline import headline
from roost.records import DISTRIBUTIONS, STATISTICS, BenchPoint, RunRecord, utcnow
from roost.store.layout import comparable_key_id

STORE_VERSION = 2

_TS = pa.timestamp("us", tz="UTC")

_META_FIELDS: list[tuple[str, pa.DataType]] = [
    ("store_version", pa.int32()),
    ("schema_version", pa.int32()),
    ("run_id", pa.string()),
    ("started_at", _TS),
    ("roost_version", pa.string()),
    ("profile", pa.string()),
    ("repo_id", pa.string()),
    ("revision", pa.string()),
    ("commit", pa.string()),
    ("served_model_name", pa.string()),
    ("host_name", pa.string()),
    ("backend", pa.string()),
    ("image", pa.string()),
    ("image_digest", pa.string()),
    ("vllm_version", pa.string()),
    ("vllm_args", pa.string()),
    ("prefect_flow_run_id", pa.string()),
    ("comparable_key", pa.string()),
    ("status", pa.string()),
]

RUNS_SCHEMA = pa.schema(
    [
        *_META_FIELDS,
        ("failed_stage", pa.string()),
        ("failure_class", pa.string()),
        ("failure_message", pa.string()),
        ("remediation", pa.string()),
        ("decode_tok_s", pa.float64()),
        ("ttft_s", pa.float64()),
        ("reference_prompt_tokens", pa.int64()),
        ("decode_ceiling_tok_s", pa.float64()),
        ("decode_pct_of_ceiling", pa.float64()),
        ("peak_output_tok_s", pa.float64()),
        ("peak_concurrency", pa.int64()),
        ("knee_concurrency", pa.int64()),
        ("knee_output_tok_s", pa.float64()),
        ("predicted_kv_cache_tokens", pa.int64()),
        ("logged_kv_cache_tokens", pa.int64()),
        ("predicted_max_concurrency", pa.float64()),
        ("logged_max_concurrency", pa.float64()),
        ("start_to_healthy_s", pa.float64()),
        ("load_s", pa.float64()),
        ("compile_s", pa.float64()),
        ("ready_s", pa.float64()),
        ("points", pa.int64()),
        ("requests", pa.int64()),
        ("error_requests", pa.int64()),
        ("stages_s", pa.float64()),
        ("stages", pa.string()),
        ("record_path", pa.string()),
        ("report_path", pa.string()),
        ("stored_at", _TS),
    ],
    metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "runs"},
)


def _arrow_type(annotation: Any) -> pa.DataType:
    """The Arrow type of a BenchPoint field: numbers stay numbers, dicts become JSON text."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _arrow_type(args[0])
    if annotation is bool:
        return pa.bool_()
    if annotation is int:
        return pa.int64()
    if annotation is float:
        return pa.float64()
    return pa.string()  # str, Literal[...], dict (as JSON)


MEDIAN_ALIASES = ("output_tok_s", "request_rate")
"""Distributions whose bare column holds their median (store version 1 stored only that)."""


def _point_columns() -> list[tuple[str, pa.DataType]]:
    """The ``points`` columns of a BenchPoint: scalars as they are, each distribution flattened to
    ``<metric>_<statistic>`` (``ttft_s_median``, ``ttft_s_p90``...)."""
    cols: list[tuple[str, pa.DataType]] = []
    for name, field in BenchPoint.model_fields.items():
        if name in DISTRIBUTIONS:
            if name in MEDIAN_ALIASES:
                cols.append((name, pa.float64()))
            cols += [(f"{name}_{stat}", pa.int64() if stat == "count" else pa.float64()) for stat in STATISTICS]
        else:
            cols.append((name, _arrow_type(field.annotation)))
    return cols


_POINT_FIELDS = _point_columns()

POINTS_SCHEMA = pa.schema(
    [*_META_FIELDS, ("point_index", pa.int32()), *_POINT_FIELDS],
    metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "points"},
)

NOTIFICATIONS_SCHEMA = pa.schema(
    [
        ("store_version", pa.int32()),
        ("run_id", pa.string()),
        ("profile", pa.string()),
        ("repo_id", pa.string()),
        ("host_name", pa.string()),
        ("attempted_at", _TS),
        ("kind", pa.string()),
        ("status", pa.string()),
        ("transport", pa.string()),
        ("channel", pa.string()),
        ("message_ts", pa.string()),
        ("file_id", pa.string()),
        ("retries", pa.int64()),
        ("detail", pa.string()),
    ],
    metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "notifications"},
)

REQUESTS_SCHEMA = pa.schema([
    ("store_version", pa.int64()), ("run_id", pa.string()), ("profile", pa.string()), ("repo_id", pa.string()),
    ("commit", pa.string()), ("host_name", pa.string()),
    ("request_id", pa.string()), ("phase", pa.string()), ("point", pa.int64()), ("repeat", pa.int64()),
    ("concurrency", pa.int64()), ("prompt_tokens_target", pa.int64()), ("max_tokens", pa.int64()),
    ("prompt_tokens", pa.int64()), ("completion_tokens", pa.int64()), ("usage_missing", pa.bool_()),
    ("finish_reason", pa.string()), ("status_code", pa.int64()), ("error", pa.string()), ("error_kind", pa.string()),
    ("t_first_s", pa.float64()), ("t_last_s", pa.float64()), ("t_end_s", pa.float64()),
    ("ttft_s", pa.float64()), ("tpot_s", pa.float64()), ("e2el_s", pa.float64()), ("decode_tok_s", pa.float64()),
    ("token_chunks", pa.int64()), ("itl_s_max", pa.float64()),
    # added with issue 12 (files written before lack them: read as null)
    ("prefill_tok_s", pa.float64()), ("unmeasurable_reason", pa.string()),
    # added with issue 37: "gateway" for the sweep through the metering gateway (null, as in older files: direct)
    ("route", pa.string()),
], metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "requests"})

EVALS_SCHEMA = pa.schema([
    *_META_FIELDS,
    ("task", pa.string()), ("eval_status", pa.string()), ("error", pa.string()),
    ("dataset_source", pa.string()), ("dataset_revision", pa.string()), ("sample_digest", pa.string()),
    ("seed", pa.int64()), ("sample_limit", pa.int64()), ("sample_per_category", pa.int64()),
    ("sampling", pa.string()),
    ("n", pa.int64()), ("correct", pa.int64()), ("wrong", pa.int64()), ("unparsed", pa.int64()),
    ("truncated", pa.int64()), ("accuracy", pa.float64()), ("ci_low", pa.float64()), ("ci_high", pa.float64()),
    ("mean_output_tokens", pa.float64()), ("per_category", pa.string()), ("elapsed_s", pa.float64()),
    ("baseline_run_id", pa.string()), ("paired_p_value", pa.float64()), ("paired_change_points", pa.float64()),
    ("paired_significant", pa.bool_()),
], metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "evals"})
"""One row per evaluation of a committed run (``RunRecord.evals``): the run-level accuracy table."""

EVAL_ANSWERS_SCHEMA = pa.schema([
    ("store_version", pa.int64()), ("run_id", pa.string()), ("profile", pa.string()), ("repo_id", pa.string()),
    ("commit", pa.string()), ("host_name", pa.string()), ("task", pa.string()), ("sample_digest", pa.string()),
    ("question_id", pa.string()), ("category", pa.string()), ("verdict", pa.string()), ("extracted", pa.string()),
    ("reference", pa.string()), ("output_tokens", pa.int64()), ("prompt_tokens", pa.int64()),
    ("finish_reason", pa.string()), ("seconds", pa.float64()), ("answer", pa.string()),
], metadata={"roost.store_version": str(STORE_VERSION), "roost.table": "eval_answers"})
"""One row per question asked by an evaluation: the per-question table runs are paired on."""

SCHEMAS: dict[str, pa.Schema] = {"runs": RUNS_SCHEMA, "points": POINTS_SCHEMA, "requests": REQUESTS_SCHEMA,
                                  "notifications": NOTIFICATIONS_SCHEMA, "evals": EVALS_SCHEMA,
                                  "eval_answers": EVAL_ANSWERS_SCHEMA}




def _meta_row(record: RunRecord) -> dict[str, Any]:
    m = record.meta
    return {
        "store_version": STORE_VERSION,
        "schema_version": record.schema_version,
        "run_id": m.run_id,
        "started_at": m.started_at,
        "roost_version": m.roost_version,
        "profile": m.profile,
        "repo_id": m.repo_id,
        "revision": m.revision,
        "commit": m.commit,
        "served_model_name": m.served_model_name,
        "host_name": m.host,
        "backend": m.backend,
        "image": m.image,
        "image_digest": m.image_digest,
        "vllm_version": m.vllm_version,
        "vllm_args": json.dumps(m.vllm_args),
        "prefect_flow_run_id": m.prefect_flow_run_id,
        "comparable_key": comparable_key_id(m),
        "status": record.status,
    }


def run_row(record: RunRecord, record_file: str) -> dict[str, Any]:
    """The ``runs`` row of a record."""
    h = headline(record)
    s = record.serve
    return {
        **_meta_row(record),
        "failed_stage": record.failed_stage,
        "failure_class": record.failure_class,
        "failure_message": record.failure_message,
        "remediation": record.remediation,
        "decode_tok_s": h.decode_tok_s,
        "ttft_s": h.ttft_s,
        "reference_prompt_tokens": h.reference_prompt_tokens,
        "decode_ceiling_tok_s": h.decode_ceiling_tok_s,
        "decode_pct_of_ceiling": h.decode_pct_of_ceiling,
        "peak_output_tok_s": h.peak_output_tok_s,
        "peak_concurrency": h.peak_concurrency,
        "knee_concurrency": h.knee_concurrency,
        "knee_output_tok_s": h.knee_output_tok_s,
        "predicted_kv_cache_tokens": s.predicted_kv_cache_tokens,
        "logged_kv_cache_tokens": s.logged_kv_cache_tokens,
        "predicted_max_concurrency": s.predicted_max_concurrency,
        "logged_max_concurrency": s.logged_max_concurrency,
        "start_to_healthy_s": s.start_to_healthy_s,
        "load_s": s.load_s,
        "compile_s": s.compile_s,
        "ready_s": s.ready_s,
        "points": h.points,
        "requests": h.requests,
        "error_requests": h.error_requests,
        "stages_s": sum(t.seconds for t in record.stages),
        "stages": json.dumps([t.model_dump(mode="json") for t in record.stages]),
        "record_path": record_file,
        "report_path": record.report_path,
        "stored_at": utcnow(),
    }


def flatten_point(p: BenchPoint) -> dict[str, Any]:
    """One point as flat columns (see ``_point_columns``); ``metrics_delta`` as JSON text."""
    d = p.model_dump(mode="python")
    row: dict[str, Any] = {}
    for key, value in d.items():
        if key in DISTRIBUTIONS:
            if key in MEDIAN_ALIASES:
                row[key] = value["median"]
            row.update({f"{key}_{stat}": value[stat] for stat in STATISTICS})
        elif key == "metrics_delta":
            row[key] = json.dumps(value, sort_keys=True)
        else:
            row[key] = value
    return row


def point_rows(record: RunRecord) -> list[dict[str, Any]]:
    """The ``points`` rows of a record: each BenchPoint flattened, with the run's metadata columns."""
    meta = _meta_row(record)
    return [{**meta, "point_index": i, **flatten_point(p)} for i, p in enumerate(record.points)]


def parquet_bytes(rows: list[dict[str, Any]], schema: pa.Schema) -> bytes:
    table = pa.Table.from_pylist(rows, schema=schema)
    sink = pa.BufferOutputStream()
    import pyarrow.parquet as pq  # on first write: see roost.store's docstring

    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())




def eval_rows(record: RunRecord) -> list[dict[str, Any]]:
    """The ``evals`` rows of a record: one per evaluation, with the run's metadata columns."""
    meta = _meta_row(record)
    rows = []
    for e in record.evals:
        s, c = e.summary, e.comparison
        rows.append({
            **meta, "task": e.task, "eval_status": e.status, "error": e.error, "dataset_source": e.dataset.source,
            "dataset_revision": e.dataset.revision, "sample_digest": e.sample_digest, "seed": e.seed,
            "sample_limit": e.limit, "sample_per_category": e.per_category, "sampling": e.sampling.model_dump_json(),
            "n": s.n, "correct": s.correct, "wrong": s.wrong, "unparsed": s.unparsed, "truncated": s.truncated,
            "accuracy": s.accuracy, "ci_low": s.ci_low, "ci_high": s.ci_high,
            "mean_output_tokens": s.mean_output_tokens,
            "per_category": json.dumps({k: v.model_dump() for k, v in s.per_category.items()}, sort_keys=True),
            "elapsed_s": e.elapsed_s, "baseline_run_id": e.baseline_run_id,
            "paired_p_value": c.p_value if c else None, "paired_change_points": c.delta_points if c else None,
            "paired_significant": c.significant if c else None,
        })
    return rows
