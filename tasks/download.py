"""Download stage: fetch + verify a checkpoint (``roost.hub.snapshot``), with Prefect retries, caching
and a progress artifact. Returns the :class:`~roost.hub.snapshot.DownloadResult` model.

- Retries only transient faults (the Hub unreachable after roost's own backoff); 401/403/404, a bad
  revision, no disk space and integrity failures fail at once (``retry_condition_fn``).
- Cache key: repo + resolved commit + pattern selection + local dir + the fingerprints of the verified
  files (``warm_state_key``). The revision is resolved first (a full sha needs no network), and there
  is no key (the task runs) unless the manifest says this commit is verified there and no file
  changed since, so a Prefect cache hit can never hand back a directory whose files were touched.
  The result is persisted as JSON; Prefect's serializer restores the ``DownloadResult`` model.
- Progress: a Prefect progress artifact and a log line with bytes, rate and ETA every 10 s.
- Token: the Prefect Secret block named ``token_secret``, else ``HF_TOKEN``; never logged.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.blocks.system import Secret
from prefect.context import TaskRunContext
from prefect.logging import get_run_logger
from prefect.tasks import exponential_backoff

from roost.errors import UserError
from roost.hub.errors import HubUnreachable, is_transient
from roost.hub.progress import DownloadProgress
from roost.hub.snapshot import (
    DownloadResult,
    DownloadSpec,
    RetryPolicy,
    download_and_verify,
    warm_state_key,
)
from roost.profiles import ModelProfile
from roost.units import format_bytes

LOG_EVERY_S = 10.0
ARTIFACT_EVERY_S = 2.0
CACHE_KEY_PREFIX = "roost-download-result-"
"""Results cached under the previous prefix (``roost-download-``) were dicts, not DownloadResult."""


def spec_for(profile: ModelProfile, revision: str | None = None) -> DownloadSpec:
    """The download spec of a model profile (its repo and patterns), at ``revision`` or the profile's."""
    return DownloadSpec(
        repo_id=profile.repo_id,
        revision=revision or profile.revision,
        allow_patterns=list(profile.allow_patterns),
        ignore_patterns=list(profile.ignore_patterns),
    )


def token_from(secret_block: str | None) -> str | None:
    """The HF token in the Prefect Secret block ``secret_block``; None when no block is named (the
    download then uses ``HF_TOKEN`` or the stored login, or goes anonymous)."""
    if not secret_block:
        return None
    try:
        secret = cast("Secret[str]", Secret.load(secret_block))
    except ValueError:
        raise UserError(
            f"Prefect Secret block {secret_block!r} not found: create it (prefect block create secret, "
            "or Secret(value=...).save(name)) holding a Hugging Face read token"
        ) from None
    value = secret.get()
    return str(value) if value else None


def download_cache_key(_: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """``roost-download-result-<digest>`` when this commit is already verified in ``local_dir``; else None."""
    try:
        digest = warm_state_key(
            spec_for(parameters["profile"], parameters.get("revision")),
            Path(parameters["local_dir"]),
            endpoint=parameters.get("endpoint"),
            token=token_from(parameters.get("token_secret")),
        )
    except Exception:
        return None  # no key: the task runs and reports the real problem
    return None if digest is None else CACHE_KEY_PREFIX + digest


def retry_transient_only(_task: Any, _task_run: Any, state: Any) -> bool:
    """Retry when the Hub stayed unreachable; never for 401/403/404, bad input or integrity failures."""
    try:
        state.result()
    except HubUnreachable:
        return True
    except Exception as exc:
        return is_transient(exc)
    return False


class _Reporter:
    """Progress callback: a Prefect progress artifact, and a log line with rate and ETA every 10 s."""

    def __init__(self, logger: Any, artifact_id: UUID, what: str) -> None:
        self.logger = logger
        self.artifact_id = artifact_id
        self.what = what
        self._last_log: dict[str, float] = {}
        self._last_artifact = 0.0

    def __call__(self, p: DownloadProgress) -> None:
        now = time.monotonic()
        final = p.bytes_done >= p.bytes_total
        if final or now - self._last_log.get(p.phase, 0.0) >= LOG_EVERY_S:
            if p.bytes_done > 0 or not final:
                self.logger.info("%s %s", self.what, p.line())
            self._last_log[p.phase] = now
        if final or now - self._last_artifact >= ARTIFACT_EVERY_S:
            # download counts for 90% of the bar, verifying what is left for the last 10%
            pct = 90 * p.fraction if p.phase == "download" else 90 + 10 * p.fraction
            update_progress_artifact(
                artifact_id=self.artifact_id, progress=round(pct, 1), description=f"{self.what}: {p.line()}"
            )
            self._last_artifact = now


def _artifact_key(repo_id: str) -> str:
    return "download-" + re.sub(r"[^a-z0-9]+", "-", repo_id.lower()).strip("-")


@task(
    name="download",
    cache_key_fn=download_cache_key,
    persist_result=True,
    result_serializer="json",
    retries=3,
    retry_delay_seconds=exponential_backoff(backoff_factor=10),
    retry_jitter_factor=0.5,
    retry_condition_fn=retry_transient_only,
)
def download_task(
    profile: ModelProfile,
    revision: str | None,
    local_dir: str,
    endpoint: str | None = None,
    token_secret: str | None = None,
    retry: RetryPolicy | None = None,
) -> DownloadResult:
    """Download and verify ``profile.repo_id`` at ``revision`` into ``local_dir``."""
    spec = spec_for(profile, revision)
    what = f"{spec.repo_id}@{spec.revision}"
    key = _artifact_key(spec.repo_id)
    artifact_id = cast(UUID, create_progress_artifact(progress=0.0, key=key, description=f"download {what}"))
    result = download_and_verify(
        spec,
        Path(local_dir),
        endpoint=endpoint,
        token=token_from(token_secret),
        progress=_Reporter(get_run_logger(), artifact_id, what),
        progress_interval=1.0,
        retry=retry,
    )
    update_progress_artifact(
        artifact_id=artifact_id,
        progress=100.0,
        description=f"{spec.repo_id}@{result.commit[:12]}: {len(result.files)} files, "
        f"{format_bytes(result.bytes)} verified" + (" (cached)" if result.cached else ""),
    )
    get_run_logger().info("%s", result.summary())
    return result
