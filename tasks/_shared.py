"""What several task modules share (``.importlinter``: the task modules never import each other, so a
helper two of them need lives here): the Hub's retry condition, a profile's download spec, the
audit's findings on the run's log, the environment vLLM will see."""

from __future__ import annotations

from typing import Any

from prefect.logging import get_run_logger

from roost.hosts import HostProfile
from roost.hub.errors import retry_may_cure
from roost.hub.snapshot import DownloadSpec
from roost.plan.report import AuditReport
from roost.profiles import ModelProfile
from roost.serve.process import CPU_ENV_DEFAULTS
from roost.settings import child_env


def retry_transient_only(_task: Any, _task_run: Any, state: Any) -> bool:
    """Prefect's retry condition of the Hub-facing tasks: only a transient failure roost's own retries never
    saw (``roost.hub.errors.retry_may_cure``). An unreachable Hub was asked as often as roost asks (its message
    says so), not again here; never for 401/403/404, bad input or integrity failures either."""
    try:
        state.result()
    except Exception as exc:
        return retry_may_cure(exc)
    return False


def spec_for(profile: ModelProfile, revision: str | None = None) -> DownloadSpec:
    """The download spec of a model profile (its repo and patterns), at ``revision`` or the profile's."""
    return DownloadSpec(
        repo_id=profile.repo_id,
        revision=revision or profile.revision,
        allow_patterns=list(profile.allow_patterns),
        ignore_patterns=list(profile.ignore_patterns),
    )


def log_findings(report: AuditReport) -> None:
    """Each finding on the run's log, at the level of its severity."""
    logger = get_run_logger()
    for f in report.findings:
        log = logger.error if f.severity == "error" else logger.warning if f.severity == "warning" else logger.info
        log("%s: %s", f.code, f.message)


def server_env(host: HostProfile) -> dict[str, str] | None:
    """The environment vLLM will see on ``host``: the process backend's CPU defaults under the caller's env."""
    if host.backend != "process":
        return None
    return {**CPU_ENV_DEFAULTS, **child_env()}
