"""The production path end to end on this machine: `roost run --host cpu-docker` builds the serving
image (local vLLM CPU base + xgrammar patch layer), runs vLLM in a roost-managed container with the
port published on 127.0.0.1, benchmarks it and reports; the container is gone afterwards."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from roost.serve.dockerfile import LABEL_MANAGED

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_land_through_docker(prefect_api: str, base_image: str, docker_engine) -> None:  # type: ignore[no-untyped-def]
    res = subprocess.run([str(Path(sys.executable).parent / "roost"), "run", "--host", "cpu-docker", "--json",
                          "--no-notify", "--keep-serving", "--restart-policy", "unless-stopped"],
                         capture_output=True, text=True, timeout=1800, env=dict(os.environ))
    assert res.returncode == 0, res.stderr[-4000:]
    record = json.loads(res.stdout[res.stdout.index("{"):])
    # kept serving, in a container that Docker restarts unless stopped (the seeds' policy); then removed
    kept = docker_engine.containers.list(filters={"label": f"{LABEL_MANAGED}=true"})
    try:
        assert len(kept) == 1 and kept[0].status == "running"
        assert kept[0].attrs["HostConfig"]["RestartPolicy"]["Name"] == "unless-stopped"
    finally:
        for c in kept:
            c.remove(force=True)
    meta = record["meta"]
    assert meta["backend"] == "docker" and meta["image"].startswith("roost/vllm:")
    assert meta["image_digest"]
    stages = {s["stage"]: s for s in record["stages"]}
    assert stages["build"]["status"] == "completed"
    serve = record["serve"]
    assert serve["predicted_kv_cache_tokens"] == serve["logged_kv_cache_tokens"] > 0
    for phase in ("load_s", "compile_s", "ready_s"):
        assert serve[phase] is not None and serve[phase] >= 0, phase
    for p in record["points"]:
        assert p["errors"] == 0
        assert math.isfinite(p["decode_tok_s_median"]) and p["decode_tok_s_median"] > 0
    leftover = docker_engine.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=true"})
    assert leftover == []
