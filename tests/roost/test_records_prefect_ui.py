"""``RunMeta.prefect_ui_url`` (issue 39): which Prefect UI holds a run's flow run. Records stored before the
field (schema 1 and 2 alike) still read, as held by no known server; a new record keeps it through the store."""

from __future__ import annotations

import json
from pathlib import Path

from support.samples import spark_run

from roost.records import SCHEMA_VERSION, RunRecord
from roost.store import append_run, load_records

TEAM = "http://prefect.team:4200"


def test_a_record_stored_before_the_field_reads_as_held_by_no_known_server() -> None:
    stored = json.loads(spark_run(day=1, flow_run_id="6c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f").model_dump_json())
    del stored["meta"]["prefect_ui_url"]
    assert stored["schema_version"] == SCHEMA_VERSION == 2  # a field with a default: no new schema version
    old = RunRecord.model_validate_json(json.dumps(stored))
    assert old.meta.prefect_ui_url == "" and old.meta.prefect_flow_run_id == "6c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f"
    v1 = {**stored, "schema_version": 1}
    assert RunRecord.model_validate(v1).meta.prefect_ui_url == ""


def test_a_field_the_reader_does_not_know_is_ignored_as_an_older_release_ignores_this_one() -> None:
    data = json.loads(spark_run(day=1).model_dump_json())
    data["meta"]["prefect_server_of_tomorrow"] = "x"
    assert RunRecord.model_validate(data).meta.run_id == data["meta"]["run_id"]


def test_the_store_keeps_the_ui_of_the_run(tmp_path: Path) -> None:
    run = spark_run(day=2, flow_run_id="7d2e3f4a-5b6c-4d7e-8f9a-0b1c2d3e4f5a")
    run.meta.prefect_ui_url = TEAM
    append_run(run, tmp_path)
    (back,) = load_records(tmp_path, model=run.meta.repo_id, host=run.meta.host)
    assert back.meta.prefect_ui_url == TEAM
