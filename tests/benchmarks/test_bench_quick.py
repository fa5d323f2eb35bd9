"""``bash scripts/bench --quick`` in CI: every benchmark runs on a small workload and is right (no exception,
no digest or count on which two tools disagree), against the test session's vLLM server instead of a cold
start of its own. Its figures are not judged: a slow machine never fails it, a broken benchmark does.

It writes its page to a temporary file (``--out``), never over ``docs/benchmarks.md``, whose full-mode table
is measured by hand on a quiet machine (``bash scripts/bench``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "benchmarks.md"


def test_every_benchmark_runs_quick_and_right(vllm_server: Any, tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from run_all import BENCHMARKS
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    docs_before = DOC.read_bytes()
    out, logs = tmp_path / "benchmarks.md", tmp_path / "logs"
    t0 = time.monotonic()
    r = subprocess.run(["bash", str(REPO / "scripts" / "bench"), "--quick", "--out", str(out), "--logs", str(logs),
                        "--vllm-url", vllm_server.base_url],
                       env=dict(os.environ, VLLM_API_KEY=vllm_server.api_key), capture_output=True, text=True,
                       timeout=1200)
    took = time.monotonic() - t0
    print(r.stdout)  # each benchmark's time, for the durations report
    assert r.returncode == 0, f"exit {r.returncode} after {took:.0f} s:\n{r.stdout[-8000:]}\n{r.stderr[-3000:]}"
    assert DOC.read_bytes() == docs_before

    page = out.read_text()
    ran = [b for b in BENCHMARKS if b.quick is not None]
    for b in ran:  # every benchmark that ran has rows, none broken, none judged
        rows = [line for line in page.splitlines() if line.startswith(f"| [{b.short}](#{b.anchor}) |")]
        assert rows, f"{b.name}: no rows in\n{page}"
        assert all("| not judged (quick run)" in line for line in rows), rows
    assert "**broken**" not in page
    m = re.search(r"quick mode \(small workloads, targets not judged\), [^:]+: ([a-z_, ]+)\.", page)
    assert m is not None, page
    assert m.group(1).split(", ") == [b.short for b in ran]
    # the benchmark measuring a vLLM measured the session's server: no vLLM of its own was started
    assert f"--vllm-url {vllm_server.base_url}" in (logs / "bench_vs_vllm.log").read_text()
