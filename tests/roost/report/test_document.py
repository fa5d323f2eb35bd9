"""build_document's section on vLLM's own log: weights measured vs predicted, kernels, explained lines."""

from __future__ import annotations

from pathlib import Path

from roost.records import RunRecord
from roost.report import write_report
from roost.report.document import Bullets, Para, Table, build_document

AUTO_PREFETCH = ("Auto-prefetch is disabled because the filesystem (EXT4) is not a recognized network FS (NFS/Lustre). "
                 "If you want to force prefetching, start vLLM with --safetensors-load-strategy=prefetch.")
MEANING = ("Informational: vLLM prefetches a whole checkpoint into page cache only on network filesystems, so on local "
           "disk it reads shards as it needs them and there is nothing to tune.")


def _with_log_facts(record: RunRecord) -> RunRecord:
    serve = record.serve.model_copy(update={
        "logged_weights_gib": 17.5, "logged_model_load_s": 108.2,
        "attention_backends": ["FLASH_ATTN"], "moe_backends": ["FlashInfer CUTLASS (Unquantized MoE)"],
        "explained_log_lines": [{"key": "auto_prefetch_local_fs", "line": AUTO_PREFETCH, "meaning": MEANING}],
    })
    plan = record.plan | {"fit": {"weight_bytes": 17.4 * 1024**3, "kv_cache_memory_bytes": 12 * 1024**3}}
    return record.model_copy(update={"serve": serve, "plan": plan})


def _section(record: RunRecord) -> list[object]:
    doc = build_document(record, [], None, {})
    [sec] = [s for s in doc.sections if s.title == "What vLLM measured, chose and said"]
    return list(sec.blocks)


def test_weights_measured_against_the_plan_and_the_kernels(record: RunRecord) -> None:
    blocks = _section(_with_log_facts(record))
    assert isinstance(blocks[0], Para)
    assert blocks[0].text == ("Weights in memory: **17.50 GiB** measured (vLLM log) vs 17.40 GiB predicted (+0.6%); "
                              "vLLM timed the model load at 108.2 s.")
    assert isinstance(blocks[1], Table)
    assert blocks[1].rows == [["Attention", "`FLASH_ATTN`"], ["MoE", "`FlashInfer CUTLASS (Unquantized MoE)`"]]
    assert isinstance(blocks[3], Bullets) and blocks[3].items == [f"`{AUTO_PREFETCH}`: {MEANING}"]


def test_markdown_carries_the_new_lines(tmp_path: Path, record: RunRecord) -> None:
    md = write_report(_with_log_facts(record), [], None, tmp_path).markdown.read_text()
    assert "## What vLLM measured, chose and said" in md
    assert "Weights in memory: **17.50 GiB** measured (vLLM log) vs 17.40 GiB predicted (+0.6%)" in md
    assert "| Attention | `FLASH_ATTN` |" in md
    assert "| MoE | `FlashInfer CUTLASS (Unquantized MoE)` |" in md
    assert f"- `{AUTO_PREFETCH}`: {MEANING}" in md


def test_without_a_prediction_or_backends_it_says_so(record: RunRecord) -> None:
    serve = record.serve.model_copy(update={"logged_weights_gib": 0.01})
    blocks = _section(record.model_copy(update={"serve": serve}))
    assert isinstance(blocks[0], Para) and blocks[0].text == (
        "Weights in memory: **0.01 GiB** measured (vLLM log), no prediction in the plan.")
    assert isinstance(blocks[1], Table) and blocks[1].rows == [["Attention", "not logged by this vLLM"]]
    assert len(blocks) == 2


def test_a_record_from_before_these_fields_has_no_such_section(record: RunRecord) -> None:
    old = RunRecord.model_validate(record.model_dump(mode="json", exclude={"serve": {"attention_backends"}}))
    doc = build_document(old, [], None, {})
    assert "What vLLM measured, chose and said" not in [s.title for s in doc.sections]
