"""``roost sweep``: the grid planned from the Hub with --dry-run (refused variants named), and every
mistake one line and exit 2 before anything starts. The sweep itself, across workers: tests/deployments/test_team.py."""

from __future__ import annotations

import json

import pytest
from support.cli import run_roost
from support.errors import assert_one_line_error


@pytest.mark.parametrize("args, says", [
    (["--grid", "max-num-seqs"], "write FLAG=V1,V2"),
    (["--grid", "api-key=a,b"], "carries a secret"),
    (["--grid", "max-num-seqs=1", "--objective", "fastest"], "--objective 'fastest': choose one of peak-output, decode, ttft"),
    (["--grid", "max-num-seqs=1", "--hosts", " , "], "--hosts is empty"),
    (["--grid", "max-num-seqs=1"], "set PREFECT_API_URL"),
    (["--grid", "max-num-seqs=1", "--pickup-timeout", "0"], "--pickup-timeout"),
    (["--gird", "max-num-seqs=1"], "No such option: --gird"),
])
def test_sweep_mistakes_are_one_line_exit_2(args: list[str], says: str, capsys: pytest.CaptureFixture[str],
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    assert_one_line_error(*run_roost(capsys, monkeypatch, "sweep", "--profile", "local", *args)[::2], says)


def test_a_dry_run_plans_every_variant_from_the_hub_and_names_the_refused(capsys: pytest.CaptureFixture[str],
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    code, out, err = run_roost(capsys, monkeypatch, "sweep", "--profile", "local", "--grid", "max-num-seqs=2,4",
                               "--grid", "kv-cache-memory-bytes=1,1073741824", "--dry-run", "--json")
    assert code == 1, err  # a variant vLLM would refuse
    rows = json.loads(out)
    assert [r["overrides"] for r in rows] == [
        ["--max-num-seqs=2", "--kv-cache-memory-bytes=1"], ["--max-num-seqs=2", "--kv-cache-memory-bytes=1073741824"],
        ["--max-num-seqs=4", "--kv-cache-memory-bytes=1"], ["--max-num-seqs=4", "--kv-cache-memory-bytes=1073741824"]]
    assert [r["refused"] is not None for r in rows] == [True, False, True, False]
    assert "KV pool cannot hold one" in rows[0]["refused"]
    assert rows[3]["vllm_args"][-2:] == ["--max-num-seqs=4", "--kv-cache-memory-bytes=1073741824"]
