"""scripts/install-worker --warm-fork --dry-run: the warm fork server's unit, in the worker's user, directory
and settings, started before the worker (which wants it), restarted always, stopping only the server; its socket
in the settings both read. (Without the flag: tests/scripts/test_install_worker.py.)"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install-worker"


@pytest.mark.slow  # uv links the environment from its cache first: ~10-25 s
def test_warm_fork_dry_run_prints_the_server_unit(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", "VIRTUAL_ENV")}
    env |= {"ROOST_WORKER_ENV": str(tmp_path / "env"), "PREFECT_API_URL": "http://prefect.example:4200/api"}
    r = subprocess.run(["bash", str(SCRIPT), "--dry-run", "--host", "spark", "--warm-fork"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=600, check=False)
    assert r.returncode == 0, r.stderr
    worker, rest = r.stdout.split("would write /etc/systemd/system/roost-warm@.service:\n")
    warm, settings = rest.split("would write /etc/roost/worker-spark.env (mode 600):\n")
    assert "Wants=roost-warm@%i.service" in worker
    assert f"ExecStart={tmp_path / 'env'}/bin/prefect worker start" in worker
    for line in ("Before=roost-worker@%i.service", f"WorkingDirectory={ROOT}", "EnvironmentFile=/etc/roost/worker-%i.env",
                 f"ExecStart={tmp_path / 'env'}/bin/python {ROOT}/scripts/warm_fork.py serve", "Restart=always",
                 "KillMode=process", "RuntimeDirectory=roost-warm-%i", "WantedBy=multi-user.target"):
        assert line + "\n" in warm, line
    assert [ln for ln in worker.splitlines() if ln.startswith("User=")] == [
        ln for ln in warm.splitlines() if ln.startswith("User=")]
    assert "ROOST_WARM_FORK_SOCKET=/run/roost-warm-spark/warm.sock\n" in settings
    assert "systemctl enable --now roost-warm@spark.service roost-worker@spark.service" in settings
