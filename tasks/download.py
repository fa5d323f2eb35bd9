"""Download stage: fetch + verify a checkpoint (``roost.hub.snapshot``), with Prefect retries, caching
and a progress artifact. Returns the :class:`~roost.hub.snapshot.DownloadResult` model.

- Each failure is retried by one layer: roost's client retries the Hub's transient faults (with backoff,
  resuming partial files) and raises ``HubUnreachable`` once its attempts are spent; Prefect's retries
  are only for a transient fault that escaped it. ``HubUnreachable``, 401/403/404, a bad revision, no
  disk space and integrity failures fail the task at once (``retry_condition_fn``).
- Cache key: repo + resolved commit + pattern selection + local dir + the fingerprints of the verified
  files (``warm_state_key``). The revision is resolved first (a full sha needs no network), and there
  is no key (the task runs) unless the manifest says this commit is verified there and no file
  changed since, so a Prefect cache hit can never hand back a directory whose files were touched.
  The result is persisted as JSON; Prefect's serializer restores the ``DownloadResult`` model.
- Progress: a Prefect progress artifact and a log line with bytes, rate and ETA every 10 s.
- Token: roost's one precedence (``blocks.secrets.hub_token``): the Prefect Secret block named
  ``token_secret``, else ``HF_TOKEN``, else ``HUGGING_FACE_HUB_TOKEN``, else the stored login; never logged.
"""

from __future__ import annotations

import contextlib
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast
from uuid import UUID

from prefect import task
from prefect.artifacts import create_progress_artifact, update_progress_artifact
from prefect.context import FlowRunContext, TaskRunContext
from prefect.logging import get_run_logger
from prefect.logging.handlers import APILogHandler
from prefect.tasks import exponential_backoff

from blocks.secrets import hub_token
from roost.hub.progress import DownloadProgress
from roost.hub.snapshot import (
    DownloadResult,
    RetryPolicy,
    download_and_verify,
    warm_state_key,
)
from roost.profiles import ModelProfile
from roost.progress import terminal_progress
from roost.settings import ROOST_LOGGER
from roost.units import format_bytes
from tasks._shared import retry_transient_only, spec_for

LOG_EVERY_S = 10.0
ARTIFACT_EVERY_S = 2.0
CACHE_KEY_PREFIX = "roost-download-result-"
"""Results cached under the previous prefix (``roost-download-``) were dicts, not DownloadResult."""


def download_cache_key(_: TaskRunContext, parameters: dict[str, Any]) -> str | None:
    """``roost-download-result-<digest>`` when this commit is already verified in ``local_dir``; else None."""
    try:
        digest = warm_state_key(
            spec_for(parameters["profile"], parameters.get("revision")),
            Path(parameters["local_dir"]),
            endpoint=parameters.get("endpoint"),
            token=hub_token(parameters.get("token_secret")),
        )
    except Exception:
        return None  # no key: the task runs and reports the real problem
    return None if digest is None else CACHE_KEY_PREFIX + digest


class _Reporter:
    """Progress callback: a Prefect progress artifact, a log line with rate and ETA every 10 s, and
    bars on a terminal (``roost.progress``; close ``terminal`` when the download ends)."""

    def __init__(self, logger: Any, artifact_id: UUID, what: str) -> None:
        self.logger = logger
        self.artifact_id = artifact_id
        self.what = what
        self.terminal = terminal_progress(f"download {what}", unit="bytes", plain=False)
        self._last_log: dict[str, float] = {}
        self._last_artifact = 0.0

    def __call__(self, p: DownloadProgress) -> None:
        self.terminal.update(p.bytes_done, p.bytes_total, phase=p.phase, rate=p.rate_bps, eta_s=p.eta_s,
                             status=f"files {p.files_done}/{p.files_total}")
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


def cached_line(result: DownloadResult) -> str:
    """The one line a cached download logs: ``download cached: <repo>@<commit>, n files, X GB``."""
    return f"download cached: {result.repo_id}@{result.commit[:12]}, {len(result.files)} files, {format_bytes(result.bytes)}"


class _StampRun(logging.Filter):
    """Give a roost log record made outside any run context (a download or hashing thread of
    ``roost.hub``) the ids of the task run that started the thread, so Prefect's API handler sends it
    to that run instead of dropping it with a warning."""

    def __init__(self, flow_run_id: UUID, task_run_id: UUID) -> None:
        super().__init__()
        self.ids = {"flow_run_id": flow_run_id, "task_run_id": task_run_id}

    def filter(self, record: logging.LogRecord) -> bool:
        if (record.name == ROOST_LOGGER or record.name.startswith(ROOST_LOGGER + ".")) \
                and getattr(record, "flow_run_id", None) is None \
                and TaskRunContext.get() is None and FlowRunContext.get() is None:
            record.__dict__.update(self.ids)
        return True


@contextlib.contextmanager
def roost_threads_log_to_run() -> Iterator[None]:
    """While the body runs, roost's log lines from threads without a run context go to this task run.

    Applies to the Prefect API handlers on the ``roost`` logger (Prefect puts them there when
    ``roost`` is an extra logger, ``PREFECT_LOGGING_EXTRA_LOGGERS``); with none there it does nothing.
    """
    ctx = TaskRunContext.get()
    handlers = [h for h in logging.getLogger(ROOST_LOGGER).handlers if isinstance(h, APILogHandler)]
    if ctx is None or ctx.task_run.flow_run_id is None or not handlers:
        yield
        return
    stamp = _StampRun(ctx.task_run.flow_run_id, ctx.task_run.id)
    for h in handlers:
        h.addFilter(stamp)
    try:
        yield
    finally:
        for h in handlers:
            h.removeFilter(stamp)


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
    reporter = _Reporter(get_run_logger(), artifact_id, what)
    try:
        with roost_threads_log_to_run():  # roost.hub's retries and resumes, from its download threads
            result = download_and_verify(
                spec,
                Path(local_dir),
                endpoint=endpoint,
                token=hub_token(token_secret),
                progress=reporter,
                progress_interval=1.0,
                retry=retry,
            )
    finally:
        reporter.terminal.close()
    update_progress_artifact(
        artifact_id=artifact_id,
        progress=100.0,
        description=f"{spec.repo_id}@{result.commit[:12]}: {len(result.files)} files, "
        f"{format_bytes(result.bytes)} verified" + (" (cached)" if result.cached else ""),
    )
    get_run_logger().info("%s", cached_line(result) if result.cached else result.summary())
    return result
