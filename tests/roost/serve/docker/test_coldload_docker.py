"""The cold-load retry loop driven by real faults on the docker backend (the production path): a port
someone else holds (Docker refuses to publish it), a KV pool vLLM finds too small for one request,
a health wait too short for a cold load. The policy is the real one; only the waits between attempts
are shortened, through ``cold_load``'s ``sleep``."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from roost.hosts import CPU_DOCKER, HostProfile
from roost.net import free_port
from roost.serve.base import Readiness, Server, ServeSpec
from roost.serve.coldload import ColdLoadFailed, cold_load
from roost.serve.docker.backend import DockerBackend
from roost.serve.docker.containers import roost_containers
from roost.serve.health import wait_until_ready
from roost.units import GiB

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]

KEY = "coldload-key-0123456789"
VLLM_ARGS = ["--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager"]


def cpu_host(name: str, base_image: str) -> HostProfile:
    return CPU_DOCKER.model_copy(update={"name": name, "base_image": base_image})


def test_a_squatted_port_then_a_pool_too_small_are_retried_until_ready(
    docker_engine: docker.DockerClient, base_image: str, docker_tiny_model: Path
) -> None:
    backend = DockerBackend(cpu_host("coldload", base_image), client=docker_engine)
    prepared = backend.prepare()
    slept: list[float] = []
    said: list[str] = []

    def start(spec: ServeSpec) -> Server:
        return backend.start(spec, KEY, prepared)

    def wait(server: Server) -> Readiness:
        return wait_until_ready(server, api_key=KEY, timeout_s=900)

    with socket.socket() as squatter:  # a listener on the port first: Docker cannot publish it
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        port = squatter.getsockname()[1]
        spec = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny", port=port,
                         vllm_args=[*VLLM_ARGS, "--kv-cache-memory-bytes", "1048576"])  # 1 MiB: too small
        loaded = cold_load(start, wait, spec, sleep=slept.append, log=said.append)
    try:
        first, second, third = loaded.attempts
        assert (first.attempt, first.ok, first.port, first.failure_class, first.retryable, first.action) == (
            1, False, port, "port_in_use", True, "retry on a new port")
        assert f"127.0.0.1:{port}" in first.evidence
        new_port = second.port
        assert new_port != port and (second.attempt, second.ok) == (2, False)
        assert (second.failure_class, second.retryable, second.action) == ("kv_pool_too_small", False, "raise the pool")
        assert second.vllm_args[-2:] == ["--kv-cache-memory-bytes", "1048576"]
        assert "To serve at least one request with the model's max seq len (2048)" in second.evidence
        assert (third.attempt, third.ok, third.port, third.failure_class) == (3, True, new_port, "")
        assert third.vllm_args == [*VLLM_ARGS, "--kv-cache-memory-bytes", str(GiB)]  # what vLLM said, at least 1 GiB
        assert loaded.spec.port == new_port and loaded.spec.vllm_args == third.vllm_args
        assert slept == []  # neither is a reason to wait
        assert loaded.facts.kv_cache_tokens is not None and loaded.facts.kv_cache_tokens >= 2048
        assert "raising the KV pool to 1073741824 bytes" in " ".join(said)
        assert [c.name for c in roost_containers(docker_engine, "coldload")] == ["roost-coldload-tiny"]
    finally:
        loaded.server.stop()
    assert roost_containers(docker_engine, "coldload") == []


def test_health_timeouts_back_off_and_fail_with_one_row_per_attempt(
    docker_engine: docker.DockerClient, base_image: str, docker_tiny_model: Path
) -> None:
    backend = DockerBackend(cpu_host("coldload-slow", base_image), client=docker_engine)
    prepared = backend.prepare()
    slept: list[float] = []
    started: list[Server] = []

    def start(spec: ServeSpec) -> Server:
        started.append(backend.start(spec, KEY, prepared))
        return started[-1]

    def wait(server: Server) -> Readiness:
        return wait_until_ready(server, api_key=KEY, timeout_s=3)  # no cold load is this fast

    def sleep(seconds: float) -> None:  # the policy's backoffs, recorded, waited briefly
        slept.append(seconds)
        time.sleep(0.1)

    spec = ServeSpec(model_dir=docker_tiny_model, served_model_name="tiny", port=free_port(), vllm_args=VLLM_ARGS,
                     env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    with pytest.raises(ColdLoadFailed) as info:
        cold_load(start, wait, spec, sleep=sleep)
    exc = info.value
    assert slept == [5.0, 10.0]
    assert [(a.attempt, a.ok, a.port, a.failure_class, a.retryable, a.action) for a in exc.attempts] == [
        (1, False, spec.port, "health_timeout", True, "retry"),
        (2, False, spec.port, "health_timeout", True, "retry"),
        (3, False, spec.port, "health_timeout", True, "stop"),
    ]
    assert exc.failure_class == "health_timeout" and exc.stage == "health-wait"
    assert str(exc) == f"health-wait: health_timeout: {exc.remediation} (evidence: {exc.evidence})"
    assert "raise the host profile's health timeout" in exc.remediation
    assert len(started) == 3 and not any(s.is_running() for s in started)  # every failed server stopped
    assert roost_containers(docker_engine, "coldload-slow") == []
