"""``roost compare MODEL_A MODEL_B``: the three comparisons as tables, the charts, --json, bad input (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run_roost
from support.comparison import NEW, OLD, new_and_old, run, store_run


@pytest.fixture
def root(tmp_path: Path) -> Path:
    new, old, na, oa = new_and_old()
    store_run(tmp_path / "store", old, oa)
    store_run(tmp_path / "store", new, na)
    store_run(tmp_path / "store", run("team/elsewhere", 3, profile="cpu-only", rates={1: 5.0}, evals={}, host="cpu"), {})
    return tmp_path


def test_tables_and_charts(root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_roost(capsys, monkeypatch, "compare", NEW, "qwen38", "--dir", str(root / "store"),
                               "--out", str(root / "charts"))
    assert code == 0, err
    assert out.splitlines()[0] == (f"{NEW} (run 20260305T020000Z-00000005) vs {OLD} (run 20260302T020000Z-00000002) "
                                   "on spark")
    assert "Aggregate throughput per concurrency" in out and "MMLU-Pro per category" in out
    assert any(line.split()[:2] == ["20", "490.3"] and line.endswith("1.33x") for line in out.splitlines())
    assert any(line.startswith("MATH-500  Qwen3.8-35B-A3B") and "70.0%" in line for line in out.splitlines())
    assert any(line.startswith("law") and line.endswith("-10.0") for line in out.splitlines())
    assert "- only Qwen3.8-35B-A3B was measured at 8 concurrent" in out
    for name in ("compare_throughput", "compare_reasoning", "compare_knowledge"):
        assert (root / "charts" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"


def test_json(root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = run_roost(capsys, monkeypatch, "compare", "qwen38", NEW, "--host", "spark", "--json",
                               "--dir", str(root / "store"), "--out", str(root / "c"))
    assert code == 0, err
    doc = json.loads(out)
    assert list(doc) == ["host", "a", "b", "throughput", "reasoning", "knowledge", "notes", "charts"]
    assert doc["host"] == "spark" and doc["a"]["repo_id"] == OLD and doc["b"]["run_id"] == "20260305T020000Z-00000005"
    level = next(lv for lv in doc["throughput"]["levels"] if lv["concurrency"] == 20)
    assert set(level) == {"concurrency", "a", "b", "ratio"} and level["b"]["value"] == 490.3
    assert set(level["a"]) == {"value", "low", "high"} and level["ratio"] == pytest.approx(370.0 / 490.3)
    gsm = doc["reasoning"][0]
    assert set(gsm) == {"task", "title", "a", "b", "same_questions", "notes"}
    assert set(gsm["a"]) == {"n", "accuracy", "truncated", "truncation_rate", "unparsed", "unparsed_rate",
                             "output_tokens_mean", "output_tokens_median", "output_tokens_p90"}
    assert set(doc["knowledge"]) == {"overall", "categories"}
    assert set(doc["knowledge"]["categories"][0]) == {"category", "a", "b"}
    assert set(doc["knowledge"]["categories"][0]["a"]) == {"n", "accuracy", "unparsed_rate"}
    assert sorted(doc["charts"]) == ["compare_knowledge", "compare_reasoning", "compare_throughput"]
    assert all(Path(p).is_file() for p in doc["charts"].values())


@pytest.mark.parametrize(("args", "line"), [
    (["nobody/never", OLD], "roost: error: MODEL_A 'nobody/never': no runs for it in the results store; known: "),
    ([NEW, "qwen"], "roost: error: MODEL_B 'qwen': no runs for it in the results store; known: "),
    ([NEW, "ornith-1.5-35b-a3b-nvfp4"], "roost: error: MODEL_A 'ornith-ai/Ornith-1.5-35B-A3B-NVFP4' and MODEL_B "
                                        "'ornith-1.5-35b-a3b-nvfp4' name the same model; name two models"),
    ([NEW, OLD, "--host", "cpu"], "roost: error: --host 'cpu': MODEL_A has no completed run there; it has: spark"),
    ([NEW, "team/elsewhere"], "roost: error: no host has completed runs of both models (MODEL_A on spark; MODEL_B "
                              "on cpu): a comparison is of one host"),
])
def test_bad_input_is_one_line_exit_2(root: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                      args: list[str], line: str) -> None:
    code, out, err = run_roost(capsys, monkeypatch, "compare", *args, "--dir", str(root / "store"),
                               "--out", str(root / "c"))
    assert code == 2 and out == ""
    assert len(err.splitlines()) == 1 and err.startswith(line), err
    assert not (root / "c").exists()


def test_an_out_that_is_a_file_and_an_empty_store(root: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    (root / "file").write_text("x")
    code, _, err = run_roost(capsys, monkeypatch, "compare", NEW, OLD, "--dir", str(root / "store"), "--out",
                             str(root / "file"))
    assert code == 2 and err.startswith("roost: error: --out ") and err.rstrip().endswith("give a directory for the charts")
    code, _, err = run_roost(capsys, monkeypatch, "compare", NEW, OLD, "--dir", str(root / "empty"))
    assert code == 2 and err == f"roost: error: MODEL_A {NEW!r}: no runs for it in the results store; known: none\n"
