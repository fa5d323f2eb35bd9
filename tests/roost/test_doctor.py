"""roost.doctor: each preflight check on recorded inputs (docker info, nvidia-smi, disk, registry, Prefect)."""

from __future__ import annotations

from typing import Any

import pytest

from roost.doctor import (
    CUDA13_MIN_DRIVER,
    Facts,
    check_base_image,
    check_disk,
    check_docker,
    check_driver,
    check_nvidia_runtime,
    check_prefect,
    checkpoint_need,
    parse_driver,
    required_driver,
    run_checks,
)
from roost.hosts import CPU, CPU_DOCKER, SPARK

# `docker info` on a DGX Spark with nvidia-container-toolkit configured (trimmed to what the checks read)
SPARK_DOCKER_INFO: dict[str, Any] = {
    "ServerVersion": "28.3.3",
    "Runtimes": {"io.containerd.runc.v2": {"path": "runc"}, "nvidia": {"path": "nvidia-container-runtime"},
                 "runc": {"path": "runc"}},
    "DefaultRuntime": "runc",
}
PLAIN_DOCKER_INFO: dict[str, Any] = {"ServerVersion": "26.1.5", "Runtimes": {"runc": {"path": "runc"}},
                                     "DefaultRuntime": "runc"}
SPARK_SMI = "NVIDIA GB10, 580.95.05\n"
OLD_SMI = "NVIDIA GB10, 575.57.08\n"


def ready_spark() -> Facts:
    return Facts(
        docker_info=SPARK_DOCKER_INFO, nvidia_smi=SPARK_SMI, disk_path="/home/u/.cache/roost/models",
        disk_free_bytes=500 * 10**9, need_bytes=70_300_000_000, need_what="profile ornith-35b",
        image_present=True, prefect_api_url="http://prefect:4200/api", prefect_error=None,
    )


def test_a_ready_spark_passes_every_check() -> None:
    report = run_checks(SPARK, ready_spark())
    assert report.ok, report
    assert [c.status for c in report.checks] == ["ok"] * 6
    assert [c.name for c in report.checks] == [
        "docker", "nvidia-runtime", "nvidia-driver", "disk", "base-image", "prefect-api"]


def test_the_cpu_host_has_no_gpu_docker_or_image_checks() -> None:
    facts = Facts(disk_path="/r/models", disk_free_bytes=50 * 10**9, prefect_api_url="http://127.0.0.1:4200/api")
    report = run_checks(CPU, facts)
    status = {c.name: c.status for c in report.checks}
    assert status == {"docker": "n/a", "nvidia-runtime": "n/a", "nvidia-driver": "n/a", "disk": "ok",
                      "base-image": "n/a", "prefect-api": "ok"}
    assert report.ok


def test_this_cpu_box_checked_as_a_spark_fails_with_fixes() -> None:
    """No Docker, no nvidia-smi, no Prefect: every failure names what to do."""
    facts = Facts(docker_error="Connection refused", disk_path="/r/models", disk_free_bytes=70 * 10**9,
                  need_bytes=70_300_000_000, need_what="profile ornith-35b", prefect_api_url="")
    report = run_checks(SPARK, facts)
    assert not report.ok
    failed = {c.name: c for c in report.checks if c.status == "fail"}
    assert set(failed) == {"docker", "nvidia-runtime", "nvidia-driver", "disk", "base-image", "prefect-api"}
    assert all(c.fix for c in failed.values())
    assert "systemctl enable --now docker" in failed["docker"].fix
    assert "580" in failed["nvidia-driver"].fix
    assert "PREFECT_API_URL" in failed["prefect-api"].fix


def test_nvidia_runtime_missing_from_docker_info() -> None:
    check = check_nvidia_runtime(SPARK, Facts(docker_info=PLAIN_DOCKER_INFO))
    assert check.status == "fail" and "runc" in check.detail and "nvidia-ctk runtime configure" in check.fix
    assert check_nvidia_runtime(SPARK, Facts(docker_info=SPARK_DOCKER_INFO)).status == "ok"
    assert check_nvidia_runtime(CPU_DOCKER, Facts(docker_info=PLAIN_DOCKER_INFO)).status == "n/a"


@pytest.mark.parametrize(("smi", "status"), [
    (SPARK_SMI, "ok"),
    ("NVIDIA GB10, 580.0\n", "ok"),
    ("NVIDIA GB10, 590.12.01\nNVIDIA GB10, 590.12.01\n", "ok"),
    (OLD_SMI, "fail"),
    ("", "fail"),  # nvidia-smi ran and failed (no driver loaded)
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.", "fail"),
])
def test_driver_version_against_cuda13(smi: str, status: str) -> None:
    check = check_driver(SPARK, Facts(nvidia_smi=smi))
    assert check.status == status, check
    if status == "fail":
        assert f"{CUDA13_MIN_DRIVER} or newer" in check.fix


def test_driver_check_needs_nvidia_smi_on_a_gpu_host_only() -> None:
    missing = check_driver(SPARK, Facts(nvidia_smi=None))
    assert missing.status == "fail" and "nvidia-smi not found" in missing.detail
    assert check_driver(CPU, Facts(nvidia_smi=None)).status == "n/a"
    assert required_driver(SPARK) == CUDA13_MIN_DRIVER and required_driver(CPU_DOCKER) is None


def test_parse_driver_reads_name_and_version() -> None:
    assert parse_driver(SPARK_SMI) == ("NVIDIA GB10", "580.95.05")
    assert parse_driver("\n  \n") is None
    assert parse_driver("No devices were found") is None


def test_disk_counts_what_is_already_downloaded() -> None:
    base = Facts(disk_path="/m", need_bytes=70 * 10**9, need_what="profile ornith-35b")
    assert check_disk(SPARK, base.model_copy(update={"disk_free_bytes": 71 * 10**9})).status == "ok"
    short = check_disk(SPARK, base.model_copy(update={"disk_free_bytes": 60 * 10**9}))
    assert short.status == "fail" and "free 10.0 GB more" in short.fix
    resumed = base.model_copy(update={"disk_free_bytes": 60 * 10**9, "disk_held_bytes": 20 * 10**9})
    assert check_disk(SPARK, resumed).status == "ok"


def test_disk_without_a_known_size_needs_a_minimum() -> None:
    assert check_disk(CPU, Facts(disk_path="/m", disk_free_bytes=5 * 10**9)).status == "ok"
    tiny = check_disk(CPU, Facts(disk_path="/m", disk_free_bytes=10**8))
    assert tiny.status == "fail" and "ROOST_HOME" in tiny.fix
    assert check_disk(CPU, Facts(disk_path="/m", disk_free_bytes=None)).status == "fail"


def test_checkpoint_need_from_the_profile_or_the_host() -> None:
    assert checkpoint_need(SPARK, "ornith-9b") == (18_800_000_000, "profile ornith-9b")
    size, what = checkpoint_need(SPARK, None)
    assert size == 70_300_000_000 and "ornith-35b" in what
    assert checkpoint_need(CPU, None) == (None, "")
    assert checkpoint_need(CPU, "local") == (None, "")


def test_base_image_present_pullable_or_not() -> None:
    info = {"docker_info": PLAIN_DOCKER_INFO}
    assert check_base_image(SPARK, Facts(**info, image_present=True)).status == "ok"
    pull = check_base_image(SPARK, Facts(**info, image_present=False, registry_reachable=True))
    assert pull.status == "ok" and "nvcr.io is reachable" in pull.detail
    cut = check_base_image(SPARK, Facts(**info, image_present=False, registry_reachable=False, registry_error="timed out"))
    assert cut.status == "fail" and "docker load" in cut.fix and "timed out" in cut.detail
    local = check_base_image(CPU_DOCKER, Facts(**info, image_present=False))
    assert local.status == "fail" and local.fix == "run scripts/build-test-base-image"
    assert check_base_image(SPARK, Facts(image_present=None)).fix == "fix the docker check first"


def test_docker_and_prefect_details() -> None:
    assert "28.3.3" in check_docker(SPARK, Facts(docker_info=SPARK_DOCKER_INFO)).detail
    assert check_docker(CPU, Facts()).status == "n/a"
    down = check_prefect(Facts(prefect_api_url="http://p:4200/api", prefect_error="HTTP 503"))
    assert down.status == "fail" and "HTTP 503" in down.detail
