"""Host preflight: can this machine run roost's worker for a host profile? Pure checks.

``roost doctor`` (``roost/commands/doctor.py``) gathers :class:`Facts` (docker info, nvidia-smi,
free disk, the base image, the Prefect API) and every check here turns them into one
:class:`Check`: ``ok``, ``fail`` with what to fix, or ``n/a`` when the host profile does not need it
(a ``cpu`` host serves vLLM as a local process: no Docker, no GPU, no NGC image). Nothing here does
I/O, so each check is tested on recorded inputs.

What the Spark needs, from the recipes: an NVIDIA driver >= 580 (CUDA 13, which NGC's vLLM images
are built on), Docker with the NVIDIA container runtime, the ``nvcr.io/nvidia/vllm`` base image (or
nvcr.io reachable to pull it), disk for the checkpoint (Ornith 1.0 35B in BF16 is ~70.3 GB, the 9B
~18.8 GB), and the Prefect API the worker polls.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, Field

from roost.hosts import HostProfile
from roost.profiles import PROFILES

Status = Literal["ok", "fail", "n/a"]

NGC_REGISTRY = "nvcr.io"
CUDA13_MIN_DRIVER = 580
"""NVIDIA driver major a CUDA 13 container needs (the recipes: "NVIDIA driver >= 580 (CUDA-13 capable)")."""

CHECKPOINT_BYTES: dict[str, int] = {
    "ornith-35b": 70_300_000_000,  # the Ornith 1.0 recipe: "checkpoint (~70.3 GB"
    "ornith-9b": 18_800_000_000,  # "checkpoint (~18.8 GB"
}
"""Checkpoint sizes the recipes state, by model profile; other profiles' sizes are unknown."""

MIN_FREE_BYTES = 1_000_000_000
"""Free space below which a download cannot even start, when no checkpoint size is known."""


class Check(BaseModel):
    """One preflight check's verdict."""

    name: str
    status: Status
    detail: str = Field(description="What was found.")
    fix: str = Field(default="", description="What to do about a failed check; empty otherwise.")


class Report(BaseModel):
    host: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        return all(c.status != "fail" for c in self.checks)


class Facts(BaseModel):
    """What ``roost doctor`` read from the machine (or a test recorded)."""

    docker_info: dict[str, Any] | None = Field(default=None, description="`docker info` as the Engine API answers it.")
    docker_error: str = ""
    nvidia_smi: str | None = Field(
        default=None, description="`nvidia-smi --query-gpu=name,driver_version --format=csv,noheader` output; "
        "None: nvidia-smi is not installed.")
    nvidia_smi_error: str = ""
    disk_path: str = ""
    disk_free_bytes: int | None = None
    disk_held_bytes: int = Field(default=0, description="Bytes of the checkpoint already downloaded there.")
    need_bytes: int | None = Field(default=None, description="The checkpoint's size, when known.")
    need_what: str = ""
    image_present: bool | None = Field(default=None, description="The base image is in the local image store.")
    registry_reachable: bool | None = Field(default=None, description="None: not probed.")
    registry_error: str = ""
    prefect_api_url: str = ""
    prefect_error: str | None = Field(default=None, description="None: /health answered.")


def uses_docker(host: HostProfile) -> bool:
    return host.backend == "docker"


def uses_gpu(host: HostProfile) -> bool:
    return host.accelerator == "gpu"


def required_driver(host: HostProfile) -> int | None:
    """The driver major the host's base image needs: CUDA 13 for NGC's images on a GPU host."""
    if uses_gpu(host) and uses_docker(host) and host.base_image.startswith(f"{NGC_REGISTRY}/"):
        return CUDA13_MIN_DRIVER
    return None


def checkpoint_need(host: HostProfile, profile: str | None) -> tuple[int | None, str]:
    """Bytes to keep free for the checkpoint: ``profile``'s known size, else the largest known size of
    the profiles served on ``host``; None when none is known."""
    if profile is not None:
        size = CHECKPOINT_BYTES.get(profile)
        return size, f"profile {profile}" if size else ""
    known = {p: CHECKPOINT_BYTES[p] for p in PROFILES if p in CHECKPOINT_BYTES and PROFILES[p].host == host.name}
    if not known:
        return None, ""
    largest = max(known, key=lambda p: known[p])
    return known[largest], f"the largest checkpoint served on {host.name} (profile {largest})"


def check_docker(host: HostProfile, facts: Facts) -> Check:
    if not uses_docker(host):
        return Check(name="docker", status="n/a", detail=f"host {host.name} serves vLLM as a process (backend process)")
    if facts.docker_info is None:
        return Check(
            name="docker", status="fail",
            detail=f"Docker engine not reachable at {host.docker_url}: {facts.docker_error or 'no answer'}",
            fix="install Docker Engine and start it (`systemctl enable --now docker`); run roost as a user in "
                "the docker group (or root)",
        )
    version = facts.docker_info.get("ServerVersion", "?")
    return Check(name="docker", status="ok", detail=f"Docker engine {version} at {host.docker_url}")


def check_nvidia_runtime(host: HostProfile, facts: Facts) -> Check:
    if not (uses_gpu(host) and uses_docker(host)):
        return Check(name="nvidia-runtime", status="n/a", detail=f"host {host.name} serves on the CPU")
    if facts.docker_info is None:
        return Check(name="nvidia-runtime", status="fail", detail="Docker engine not reachable: runtimes unknown",
                     fix="fix the docker check first")
    runtimes = sorted((facts.docker_info.get("Runtimes") or {}).keys())
    if "nvidia" in runtimes:
        default = facts.docker_info.get("DefaultRuntime", "")
        return Check(name="nvidia-runtime", status="ok",
                     detail=f"NVIDIA container runtime registered (runtimes: {', '.join(runtimes)}; default {default})")
    return Check(
        name="nvidia-runtime", status="fail",
        detail=f"no 'nvidia' runtime in docker info (runtimes: {', '.join(runtimes) or 'none'})",
        fix="install nvidia-container-toolkit, then `nvidia-ctk runtime configure --runtime=docker` and "
            "`systemctl restart docker`",
    )


_DRIVER = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse_driver(nvidia_smi: str) -> tuple[str, str] | None:
    """(GPU name, driver version) from the first line of
    ``nvidia-smi --query-gpu=name,driver_version --format=csv,noheader``; None if unparsable."""
    for line in nvidia_smi.splitlines():
        if not line.strip():
            continue
        name, _, version = line.rpartition(",")
        if _DRIVER.fullmatch(version.strip()):
            return name.strip(), version.strip()
        return None
    return None


def check_driver(host: HostProfile, facts: Facts) -> Check:
    need = required_driver(host)
    if need is None:
        return Check(name="nvidia-driver", status="n/a", detail=f"host {host.name} needs no NVIDIA driver")
    fix = f"install NVIDIA driver {need} or newer (CUDA 13, which {host.base_image} is built on) and reboot"
    if facts.nvidia_smi is None:
        return Check(name="nvidia-driver", status="fail",
                     detail=f"nvidia-smi not found{': ' + facts.nvidia_smi_error if facts.nvidia_smi_error else ''}",
                     fix=fix)
    parsed = parse_driver(facts.nvidia_smi)
    if parsed is None:
        first = facts.nvidia_smi.strip().splitlines()[0] if facts.nvidia_smi.strip() else "no output"
        return Check(name="nvidia-driver", status="fail", detail=f"cannot read the driver version from nvidia-smi: {first}",
                     fix=fix)
    gpu, version = parsed
    major = int(version.split(".")[0])
    if major < need:
        return Check(name="nvidia-driver", status="fail",
                     detail=f"driver {version} on {gpu}; {host.base_image} needs {need}+", fix=fix)
    return Check(name="nvidia-driver", status="ok", detail=f"driver {version} on {gpu} (>= {need})")


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


def check_disk(host: HostProfile, facts: Facts) -> Check:
    if facts.disk_free_bytes is None:
        return Check(name="disk", status="fail", detail=f"cannot read free space at {facts.disk_path}",
                     fix="create the checkpoint directory (ROOST_HOME/models) on a mounted, writable disk")
    free = facts.disk_free_bytes
    if facts.need_bytes is None:
        detail = f"{_gb(free)} free at {facts.disk_path} (no checkpoint size known for host {host.name})"
        if free < MIN_FREE_BYTES:
            return Check(name="disk", status="fail", detail=detail,
                         fix=f"free at least {_gb(MIN_FREE_BYTES)} there, or point ROOST_HOME at a larger disk")
        return Check(name="disk", status="ok", detail=detail)
    short = max(0, facts.need_bytes - facts.disk_held_bytes)
    what = f"{_gb(facts.need_bytes)} for {facts.need_what}" if facts.need_what else _gb(facts.need_bytes)
    held = f", {_gb(facts.disk_held_bytes)} already there" if facts.disk_held_bytes else ""
    detail = f"{_gb(free)} free at {facts.disk_path}; needs {what}{held}"
    if free < short:
        return Check(name="disk", status="fail", detail=detail,
                     fix=f"free {_gb(short - free)} more there, or point ROOST_HOME at a larger disk")
    return Check(name="disk", status="ok", detail=detail)


def check_base_image(host: HostProfile, facts: Facts) -> Check:
    if not uses_docker(host):
        return Check(name="base-image", status="n/a", detail=f"host {host.name} serves without a container image")
    image = host.base_image
    if facts.docker_info is None:
        return Check(name="base-image", status="fail", detail=f"Docker engine not reachable: cannot look for {image}",
                     fix="fix the docker check first")
    if facts.image_present:
        return Check(name="base-image", status="ok", detail=f"{image} is present locally")
    if not image.startswith(f"{NGC_REGISTRY}/"):
        return Check(name="base-image", status="fail", detail=f"{image} is not present locally (it is built here)",
                     fix="run scripts/build-test-base-image" if image.startswith("roost/") else f"docker pull {image}")
    if facts.registry_reachable:
        return Check(name="base-image", status="ok",
                     detail=f"{image} not pulled yet; {NGC_REGISTRY} is reachable (the first build pulls it)")
    return Check(
        name="base-image", status="fail",
        detail=f"{image} not present and {NGC_REGISTRY} not reachable"
               f"{': ' + facts.registry_error if facts.registry_error else ''}",
        fix=f"allow HTTPS to {NGC_REGISTRY}, or `docker pull {image}` on a machine that can and `docker load` it here",
    )


def check_prefect(facts: Facts) -> Check:
    if not facts.prefect_api_url:
        return Check(name="prefect-api", status="fail", detail="PREFECT_API_URL is not set",
                     fix="export PREFECT_API_URL=http://<prefect-server>:4200/api (the server `roost setup` configured)")
    if facts.prefect_error is not None:
        return Check(name="prefect-api", status="fail",
                     detail=f"{facts.prefect_api_url} did not answer /health: {facts.prefect_error}",
                     fix="start the Prefect server (`prefect server start --host 0.0.0.0`) or fix PREFECT_API_URL")
    return Check(name="prefect-api", status="ok", detail=f"{facts.prefect_api_url} is healthy")


def run_checks(host: HostProfile, facts: Facts) -> Report:
    """Every check, in the order a person fixes them."""
    return Report(host=host.name, checks=[
        check_docker(host, facts),
        check_nvidia_runtime(host, facts),
        check_driver(host, facts),
        check_disk(host, facts),
        check_base_image(host, facts),
        check_prefect(facts),
    ])
