"""The vLLM API key of a server container roost starts is in the container's environment (where vLLM
reads it) and nowhere else ``docker inspect`` or ``docker ps`` shows: not the command, the arguments,
the entrypoint, the labels, the host config, nor the container's log, nor any process's command line.

The container is started through roost's own ``start_container`` (the docker backend's start, with the
planted key as the landing passes it) from the local vLLM CPU base image, inspected once vLLM has logged
the arguments it runs with, then stopped: a whole Docker landing would cost minutes for what the start function alone decides.
The scan is ``tests/support/secret_scan.py`` (the key as it is, URL-encoded, JSON-escaped, base64).
This file is apart from ``test_secret_scan.py`` so that only it joins the Docker tests' worker.
"""

from __future__ import annotations

import base64
import copy
import json
import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from docker_fixtures import base_image, docker_engine, docker_tiny_model, nothing_left_behind
from support.secret_scan import CmdlineSampler, SecretScan
from support.wait import poll

from roost.hosts import CPU
from roost.net import free_port
from roost.serve.base import ServeSpec
from roost.serve.docker.containers import LABEL_MANAGED, start_container

if TYPE_CHECKING:
    import docker

__all__ = ["base_image", "docker_engine", "docker_tiny_model", "nothing_left_behind"]

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def test_the_key_is_in_the_containers_environment_and_nowhere_else(
    docker_engine: docker.DockerClient, base_image: str, docker_tiny_model: Path
) -> None:
    key = "vk-docker-" + base64.b64encode(os.urandom(24)).decode()
    host = CPU.model_copy(update={"name": "scan-docker", "backend": "docker", "base_image": base_image})
    spec = ServeSpec(model_dir=docker_tiny_model, served_model_name="scan", port=free_port(),
                     vllm_args=["--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager"])
    with CmdlineSampler(interval_s=0.1) as sampler:
        server = start_container(spec, host, image=base_image, api_key=key, client=docker_engine)
        try:
            # vLLM's own process in the container (as `ps` on the host shows it), and its log up to the
            # arguments it echoes (vLLM's "non-default args" line)
            ours = "\0".join(["--model", "/model", "--host", "0.0.0.0", "--port", str(spec.port), ""]).encode()
            poll(lambda: sampler.matching(ours) and "non-default args" in server.logs(), timeout_s=120, every_s=0.2)
            attrs: dict[str, Any] = docker_engine.api.inspect_container(server.id)
            cli = subprocess.run(["docker", "inspect", server.name], capture_output=True, text=True, timeout=60)
            ps = subprocess.run(["docker", "ps", "--all", "--no-trunc", "--filter", f"label={LABEL_MANAGED}=true"],
                                capture_output=True, text=True, timeout=60)
            sampler.sample()
        finally:
            server.stop()
    logs = server.logs()

    # where the key is meant to be: the environment vLLM reads it from, once
    assert f"VLLM_API_KEY={key}" in attrs["Config"]["Env"]
    assert cli.returncode == 0 and json.dumps(attrs).count(key) == 1, "the key is somewhere besides Config.Env"
    assert cli.stdout.count(key) == 1
    # ... and nowhere else: everything inspect shows but Config.Env, the CLI's output but the Env lines
    rest = copy.deepcopy(attrs)
    rest["Config"]["Env"] = [e for e in rest["Config"]["Env"] if not e.startswith("VLLM_API_KEY=")]
    shown = {"Path": attrs["Path"], "Args": attrs["Args"], "Cmd": attrs["Config"]["Cmd"],
             "Entrypoint": attrs["Config"]["Entrypoint"], "Labels": attrs["Config"]["Labels"]}
    assert "--model" in shown["Args"] and shown["Labels"][LABEL_MANAGED] == "true", shown
    scan = SecretScan({"vLLM API key": key})
    scan.json("docker inspect (but the key's Config.Env entry)", server.name, rest)
    scan.text("docker inspect CLI (but the key's Env line)", "docker inspect",
              "\n".join(line for line in cli.stdout.splitlines() if f"VLLM_API_KEY={key}" not in line))
    scan.text("docker ps --no-trunc", "docker ps", ps.stdout + ps.stderr)
    scan.text("container log", f"docker logs {server.name}", logs)
    sampler.scan_into(scan)
    print(scan.report())
    assert sampler.matching(ours), "vLLM's process in the container was not seen"
    assert "non-default args" in logs, logs[-2000:]
    assert scan.hits == [], scan.report()
