"""The audit and plan snapshots of a run record: typed where roost reads them back, and every stored
document (an older release's keys included) read and written back byte for byte."""

from __future__ import annotations

import json
from pathlib import Path

from support.samples import spark_record

from roost.records import AuditSnapshot, Finding, PlanSnapshot, RunRecord

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "results-v1"
RECORDS = sorted((FIXTURE / "records").rglob("*.json"))


def test_every_stored_document_reads_typed_and_dumps_as_it_was_written() -> None:
    for path in RECORDS:
        raw = json.loads(path.read_text())
        record = RunRecord.model_validate_json(path.read_bytes())
        assert isinstance(record.audit, AuditSnapshot) and isinstance(record.plan, PlanSnapshot)
        assert all(isinstance(f, Finding) for f in record.audit.findings)
        assert [f.code for f in record.audit.findings] == [f["code"] for f in raw["audit"]["findings"]]
        again = json.loads(record.model_dump_json())
        for key in ("audit", "plan"):  # same keys, same order, same values
            assert list(again[key].items()) == list(raw[key].items()), (path.name, key)


def test_roost_0_1s_audit_keeps_its_own_keys_and_reads_none_where_it_had_no_field() -> None:
    old = RunRecord.model_validate_json(RECORDS[0].read_bytes())
    assert old.audit.model_dump()["decode_bytes_gb"] == 15.87  # an extra key of that release, kept
    assert old.audit.weight_bytes_by_class is None and old.plan.fit is None
    assert "weight_bytes_by_class" not in old.model_dump(mode="json")["audit"]  # not written as a default


def test_the_current_plan_reads_its_fit_and_the_pool_setting() -> None:
    current = [RunRecord.model_validate_json(p.read_bytes()) for p in RECORDS]
    with_fit = [r for r in current if r.plan.fit is not None]
    assert with_fit
    for r in with_fit:
        fit = r.plan.fit
        assert fit is not None and fit.total_bytes == fit.weight_bytes + fit.kv_cache_memory_bytes + fit.headroom_bytes  # type: ignore[operator]
        assert r.audit.weight_bytes_by_class and all(isinstance(v, int) for v in r.audit.weight_bytes_by_class.values())


def test_a_document_assigned_or_copied_in_becomes_its_snapshot() -> None:
    record = spark_record()
    record.audit = {"findings": [{"code": "X", "severity": "error", "message": "m"}], "tensor_count": 3}  # type: ignore[assignment]
    assert isinstance(record.audit, AuditSnapshot) and record.audit.findings[0].severity == "error"
    assert record.audit["tensor_count"] == 3 and list(record.audit.keys()) == ["findings", "tensor_count"]
    bare = record.model_copy(update={"audit": {}, "plan": {}})
    assert isinstance(bare.audit, AuditSnapshot) and not bare.audit and not bare.plan
    assert bare.model_dump(mode="json")["audit"] == {} and RunRecord.model_validate(bare.model_dump()).audit == bare.audit


def test_merging_a_snapshot_replaces_and_adds_keys_like_a_dict() -> None:
    plan = spark_record().plan
    merged = plan | {"fit": {"weight_bytes": 1.5, "total_bytes": 10}, "max_model_len": 4096}
    assert isinstance(merged, PlanSnapshot) and merged.fit is not None and merged.fit.weight_bytes == 1.5
    assert list(merged.model_dump()) == [*plan.keys(), "fit"] and merged["max_model_len"] == 4096
    assert list(merged.model_dump()["fit"]) == ["weight_bytes", "total_bytes"]  # its own order, no defaults
