"""A deployment run's flow-run process imports the flow's module first (issue 38): what only a landing that
keeps its server uses (the gateway's database layer, Docker's SDK for the monitoring sync) loads in those
stages, not at import. Each check runs a clean interpreter and reads ``sys.modules``; no timing here (that is
``benchmarks/bench_orchestration.py``'s)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DEFERRED = ("docker", "sqlalchemy", "tasks.gateway", "tasks.gateway_door", "tasks.monitor",
            "roost.gateway.db", "roost.monitor.sync")
"""Loaded by the stages that use them (a kept server's gateway and monitoring, a retired server), never by
importing a flow."""


@pytest.mark.parametrize("flow", ["land", "rebenchmark", "audit", "sweep"])
def test_importing_a_flow_loads_no_gateway_database_nor_docker(flow: str) -> None:
    code = f"import json, sys; import flows.{flow}; print(json.dumps(sorted(sys.modules)))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True,
                       cwd=REPO)
    modules = set(json.loads(r.stdout.splitlines()[-1]))
    assert f"flows.{flow}" in modules
    assert sorted(n for n in DEFERRED if any(m == n or m.startswith(n + ".") for m in modules)) == []


def test_the_stages_that_use_them_still_import_them() -> None:
    code = ("import sys; import flows.land; from flows.stages import gateway, gateway_door, host; "
            "import tasks.gateway, tasks.gateway_door, tasks.monitor; print('ok')")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True,
                       cwd=REPO)
    assert r.stdout.strip().endswith("ok")
