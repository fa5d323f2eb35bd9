"""Who else holds the host (pure): GPU and port holders from ``docker inspect`` attributes, the
refusal and its remedy, the memory check, MemAvailable, and the restart policy a landing takes."""

from __future__ import annotations

from typing import Any

import pytest

from roost.serve.occupancy import (
    HostBusy,
    HostMemoryShort,
    Occupant,
    container_occupant,
    holds_gpus,
    lease_forgotten,
    mem_available_bytes,
    memory_refusal,
    occupancy_refusal,
    published_ports,
    restart_policy_for,
)
from roost.units import GiB

# `docker inspect` of `docker run --gpus all -p 127.0.0.1:8004:8004 --restart unless-stopped ...` (abridged)
GPU_CONTAINER: dict[str, Any] = {
    "HostConfig": {
        "DeviceRequests": [{"Driver": "", "Count": -1, "DeviceIDs": None, "Capabilities": [["gpu"]], "Options": {}}],
        "PortBindings": {"8004/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8004"}]},
        "RestartPolicy": {"Name": "unless-stopped", "MaximumRetryCount": 0},
        "Runtime": "runc",
    },
    "NetworkSettings": {"Ports": {"8004/tcp": [{"HostIp": "127.0.0.1", "HostPort": "8004"}]}},
}
PLAIN_CONTAINER: dict[str, Any] = {  # e.g. the Prometheus container: no GPUs, its own port
    "HostConfig": {"DeviceRequests": None, "PortBindings": {"9090/tcp": [{"HostIp": "", "HostPort": "9090"}]},
                   "RestartPolicy": {"Name": "unless-stopped"}, "Runtime": "runc"},
    "NetworkSettings": {"Ports": {"9090/tcp": [{"HostIp": "0.0.0.0", "HostPort": "9090"}]}},
}


@pytest.mark.parametrize(("host_config", "expected"), [
    (GPU_CONTAINER["HostConfig"], True),
    ({"Runtime": "nvidia"}, True),  # the legacy nvidia runtime gives every GPU
    ({"DeviceRequests": [{"Driver": "nvidia", "Capabilities": []}]}, True),
    (PLAIN_CONTAINER["HostConfig"], False),
    ({}, False),
])
def test_holds_gpus(host_config: dict[str, Any], expected: bool) -> None:
    assert holds_gpus(host_config) is expected


def test_published_ports_from_bindings_and_running_ports() -> None:
    assert published_ports(GPU_CONTAINER) == {8004}
    assert published_ports(PLAIN_CONTAINER) == {9090}
    assert published_ports({"HostConfig": {"PortBindings": {"80/tcp": [{"HostPort": ""}]}}}) == set()


def test_a_container_is_an_occupant_for_what_it_holds() -> None:
    both = container_occupant("vllm-ornith-a3b", GPU_CONTAINER, 8004)
    assert both is not None and both.holds == ["the GPUs", "port 8004"] and both.restart_policy == "unless-stopped"
    gpus_only = container_occupant("vllm-ornith-a3b", GPU_CONTAINER, None)  # a free port: only the GPUs count
    assert gpus_only is not None and gpus_only.holds == ["the GPUs"]
    assert container_occupant("prometheus", PLAIN_CONTAINER, 8004) is None  # never in the way


def test_refused_naming_each_occupant_unless_replace() -> None:
    occ = [Occupant(kind="container", name="vllm-ornith-a3b", holds=["the GPUs", "port 8004"],
                    restart_policy="unless-stopped", can_stop=True)]
    refusal = occupancy_refusal(occ, "spark", replace=False)
    assert isinstance(refusal, HostBusy) and refusal.failure_class == "host_busy" and refusal.exit_code == 1
    assert str(refusal) == ("host-check: host spark is busy, roost did not start: container vllm-ornith-a3b "
                            "(the GPUs and port 8004, restart unless-stopped)")
    assert "--replace" in refusal.remediation
    assert occupancy_refusal(occ, "spark", replace=True) is None
    assert occupancy_refusal([], "spark", replace=False) is None


def test_a_process_is_never_replaced() -> None:
    proc = Occupant(kind="process", name="a process listening on 127.0.0.1:8004", holds=["port 8004"], can_stop=False)
    refusal = occupancy_refusal([proc], "spark", replace=True)
    assert refusal is not None and "never stops a process" in refusal.remediation


@pytest.mark.parametrize(("available", "needed", "refused"), [
    (100 * GiB, 82 * GiB, False),  # the Ornith 1.0 35B plan on an idle Spark
    (40 * GiB, 82 * GiB, True),  # another 0.70-utilization server still holds memory
    (82 * GiB, 82 * GiB, False),
    (None, 82 * GiB, False),  # a remote engine: unknown, not refused
])
def test_memory_check(available: int | None, needed: int, refused: bool) -> None:
    refusal = memory_refusal(available, needed, "spark")
    assert (refusal is not None) is refused
    if refusal is not None:
        assert isinstance(refusal, HostMemoryShort) and refusal.failure_class == "host_memory_short"
        assert str(refusal) == ("host-check: host spark has 40.00 GiB available, the plan needs 82.00 GiB "
                                "(weights + KV pool + headroom)")


def test_mem_available_from_proc_meminfo() -> None:
    text = "MemTotal:       24573648 kB\nMemFree:        17000000 kB\nMemAvailable:   23162676 kB\n"
    assert mem_available_bytes(text) == 23162676 * 1024
    assert mem_available_bytes("MemTotal: 1 kB\n") is None
    assert mem_available_bytes("MemAvailable: lots\n") is None


@pytest.mark.parametrize(("keep_serving", "asked", "expected"), [
    (True, None, "unless-stopped"),  # a production landing survives a reboot (the recipe's run.sh default)
    (False, None, "no"),  # a test run is stopped at its end anyway
    (True, "no", "no"),  # RESTART=no ./run.sh: a one-off kept server
    (False, "always", "always"),
])
def test_restart_policy(keep_serving: bool, asked: str | None, expected: str) -> None:
    assert restart_policy_for(keep_serving, asked) == expected  # type: ignore[arg-type]


def test_a_lease_refused_before_it_could_expire_was_forgotten() -> None:
    """Renewed (asked) at t=100 for 60 s: refused at 159 it was forgotten (a restarted server's memory);
    refused at 160 or later it may have expired and been given back by the server."""
    assert lease_forgotten(100.0, 159.0, 60.0)
    assert not lease_forgotten(100.0, 160.0, 60.0)
    assert not lease_forgotten(100.0, 400.0, 60.0)
