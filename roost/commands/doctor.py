"""``roost doctor [--host H] [--profile P] [--json]``: can this machine run roost's worker for host H?

Reads what the checks in :mod:`roost.doctor` need (the Docker engine's info, ``nvidia-smi``, free
disk where the checkpoint goes, the base image or its registry, the Prefect API's ``/health``),
then prints one line per check (``ok``, ``FAIL`` with what to fix, ``n/a`` when the host does not
need it: a ``cpu`` host has no GPU checks) or the report as JSON. Exit 0 when nothing failed, 1 when
a check failed, 2 for an unknown host or profile. ``scripts/install-worker`` runs it first.
"""

from __future__ import annotations

import shutil
import subprocess
from typing import Annotated

import httpx
import typer

from roost.commands._common import echo_json, user_errors
from roost.doctor import (
    NGC_REGISTRY,
    Facts,
    Report,
    checkpoint_need,
    required_driver,
    run_checks,
    uses_docker,
)
from roost.hosts import HostProfile, get_host
from roost.profiles import get_profile
from roost.settings import checkpoint_dir, environment, roost_home

PROBE_TIMEOUT_S = 5.0


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 200 else text[:197] + "..."


def _docker_facts(host: HostProfile, facts: Facts) -> None:
    import docker  # the engine's Python API: only when the host serves through Docker

    try:
        client = docker.DockerClient(base_url=host.docker_url, timeout=int(PROBE_TIMEOUT_S))
    except Exception as exc:
        facts.docker_error = _short(exc)
        return
    try:
        facts.docker_info = client.info()
        try:
            client.images.get(host.base_image)
            facts.image_present = True
        except docker.errors.ImageNotFound:
            facts.image_present = False
    except Exception as exc:
        facts.docker_error = _short(exc)
    finally:
        client.close()


def _nvidia_facts(facts: Facts) -> None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return
    try:
        out = subprocess.run([smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        facts.nvidia_smi, facts.nvidia_smi_error = "", _short(exc)
        return
    facts.nvidia_smi = out.stdout if out.returncode == 0 else ""
    if out.returncode != 0:
        facts.nvidia_smi_error = _short(Exception(out.stderr or out.stdout or f"exit {out.returncode}"))


def _disk_facts(host: HostProfile, profile: str | None, facts: Facts) -> None:
    target = checkpoint_dir(get_profile(profile).repo_id) if profile else roost_home() / "models"
    facts.need_bytes, facts.need_what = checkpoint_need(host, profile)
    if target.is_dir():
        facts.disk_held_bytes = sum(p.stat().st_size for p in target.rglob("*") if p.is_file()) if profile else 0
    probe = target
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent  # the disk the directory will be created on
    facts.disk_path = str(target)
    try:
        facts.disk_free_bytes = shutil.disk_usage(probe).free
    except OSError:
        facts.disk_free_bytes = None


def _registry_facts(facts: Facts) -> None:
    try:  # any HTTP answer (401 without a token) proves the registry is reachable
        httpx.get(f"https://{NGC_REGISTRY}/v2/", timeout=PROBE_TIMEOUT_S)
        facts.registry_reachable = True
    except httpx.HTTPError as exc:
        facts.registry_reachable, facts.registry_error = False, _short(exc)


def prefect_api_url() -> str:
    """PREFECT_API_URL from the environment, else from the active Prefect profile."""
    url = environment().prefect_api_url or ""
    if url:
        return url
    from prefect.settings import PREFECT_API_URL  # the profile's setting (`prefect config set`)

    return str(PREFECT_API_URL.value() or "")


def _prefect_facts(facts: Facts) -> None:
    facts.prefect_api_url = prefect_api_url().rstrip("/")
    if not facts.prefect_api_url:
        return
    try:
        r = httpx.get(f"{facts.prefect_api_url}/health", timeout=PROBE_TIMEOUT_S)
        facts.prefect_error = None if r.status_code == 200 else f"HTTP {r.status_code}"
    except httpx.HTTPError as exc:
        facts.prefect_error = _short(exc)


def gather(host: HostProfile, profile: str | None) -> Facts:
    facts = Facts()
    if uses_docker(host):
        _docker_facts(host, facts)
    if required_driver(host) is not None:
        _nvidia_facts(facts)
    _disk_facts(host, profile, facts)
    if uses_docker(host) and facts.image_present is not True and host.base_image.startswith(f"{NGC_REGISTRY}/"):
        _registry_facts(facts)
    _prefect_facts(facts)
    return facts


def print_report(report: Report) -> None:
    label = {"ok": "ok  ", "fail": "FAIL", "n/a": "n/a "}
    for check in report.checks:
        typer.echo(f"{label[check.status]}  {check.name:<15} {check.detail}")
        if check.fix:
            typer.echo(f"      {'':<15} fix: {check.fix}")
    failed = [c.name for c in report.checks if c.status == "fail"]
    typer.echo(f"host {report.host}: " + (f"{len(failed)} check(s) failed ({', '.join(failed)})" if failed
                                           else "ready (every check ok or not applicable)"))


def doctor_command(
    host: Annotated[str, typer.Option("--host", help="Host profile to check for (roost.hosts); default ROOST_HOST, "
                                      "else spark.")] = "",
    profile: Annotated[str | None, typer.Option("--profile", help="Model profile whose checkpoint must fit on disk "
                                                "(default: the largest known one served on the host).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Check this machine for a host profile: Docker, NVIDIA runtime and driver, disk, base image, Prefect API."""
    host_profile = get_host(host or environment().roost_host or "spark")
    if profile is not None:
        get_profile(profile)  # an unknown profile is a UserError (exit 2)
    report = run_checks(host_profile, gather(host_profile, profile))
    if as_json:
        echo_json({"host": report.host, "ok": report.ok, "checks": [c.model_dump() for c in report.checks]})
    else:
        print_report(report)
    if not report.ok:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("doctor", help="Preflight a worker host: Docker, NVIDIA runtime and driver, disk, base image, "
                "Prefect API (exit 0 ready, 1 a check failed, 2 bad input).")(user_errors(doctor_command))
