"""The production path end to end on this machine: ``land`` on the ``cpu-docker`` host builds the
serving image (local vLLM CPU base + xgrammar patch layer), runs vLLM in a roost-managed container with
the port published on 127.0.0.1, benchmarks it and reports. The port it is asked for is taken (a real
listening socket): Docker refuses to publish it, and the cold load is retried on another port, one
start attempt recorded per try. Kept serving with the Ornith 1.5 recipe's restart policy, then removed."""

from __future__ import annotations

import math
import socket
from typing import Any

import pytest

from roost.serve.dockerfile import LABEL_MANAGED

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_land_through_docker(prefect_api: str, base_image: str, docker_engine) -> None:  # type: ignore[no-untyped-def]
    from flows.land import land

    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        record: dict[str, Any] = land(host="cpu-docker", port=taken, notify=False, keep_serving=True,
                                      restart_policy="unless-stopped")
    first, second = record["serve"]["attempts"]
    assert (first["ok"], first["failure_class"], first["port"], first["action"]) == (
        False, "port_in_use", taken, "retry on a new port")
    assert second["ok"] and second["port"] != taken
    assert [(s["stage"], s["status"]) for s in record["stages"] if s["stage"] in ("serve", "health-wait")] == [
        ("serve", "failed"), ("serve", "completed"), ("health-wait", "completed")]
    assert record["status"] == "completed" and record["failure_class"] == ""
    # kept serving, in a container that Docker restarts unless stopped (the Ornith 1.5 recipe's policy); then removed
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
        assert math.isfinite(p["decode_tok_s"]["median"]) and p["decode_tok_s"]["median"] > 0
    leftover = docker_engine.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=true"})
    assert leftover == []
