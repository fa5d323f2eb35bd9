"""Where a browser reaches a run's report: the results URL and the URL of each report file.

The Prefect UI is watched from a laptop, not from the worker, so a report file is only useful in an
artifact as an ``http(s)`` URL. ``roost results serve`` serves the worker's reports directory
(``<results>/reports``, see ``roost.store.report_dir``) read-only; the *results URL* is where a browser
reaches that directory: ``ROOST_RESULTS_URL`` on the worker, else the host profile's ``results_url``,
else none (the artifacts then say how to enable it). No Prefect and no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import quote

from pydantic import BaseModel, Field

from roost.locations import validate_results_url
from roost.settings import ROOST_RESULTS_URL, environment

RESULTS_URL_ENV = ROOST_RESULTS_URL
"""Environment variable holding the results URL on the worker (overrides the host profile's)."""

ENABLE_HINT = (
    "run `roost results serve --bind <an address the browser reaches>` on the worker and set the "
    f"`{RESULTS_URL_ENV}` it prints in the worker's environment (or `results_url` on the host profile)"
)
"""How to get charts and a report link that open in the Prefect UI, for artifacts made without a URL."""


def results_url(host_results_url: str = "", env: Mapping[str, str] | None = None) -> str:
    """The results URL in effect: ``ROOST_RESULTS_URL`` if set, else the host profile's, else ``""``."""
    from_env = (environment(env).roost_results_url or "").strip()
    if from_env:
        return validate_results_url(from_env, RESULTS_URL_ENV)
    return validate_results_url(host_results_url, "results_url")


def file_url(path: Path, reports_root: Path, base_url: str) -> str | None:
    """The URL of ``path`` (a file under ``reports_root``) below ``base_url``; None if it is not under it."""
    try:
        rel = Path(path).relative_to(reports_root)
    except ValueError:
        return None
    return base_url + quote(rel.as_posix(), safe="/=-._~")


class ReportUrls(BaseModel):
    """Where a browser reaches one run's report files."""

    html: str
    markdown: str
    charts: dict[str, str] = Field(default_factory=dict)
    key_chart: str | None = None


def report_urls(
    html: Path,
    markdown: Path,
    charts: Mapping[str, Path],
    key_chart: Path | None,
    reports_root: Path,
    base_url: str,
) -> ReportUrls | None:
    """The URLs of a run's report files, or None without a results URL or when the report is not
    under ``reports_root`` (then the server cannot serve it)."""
    if not base_url:
        return None
    page, md = file_url(html, reports_root, base_url), file_url(markdown, reports_root, base_url)
    if page is None or md is None:
        return None
    chart_urls = {name: u for name, p in charts.items() if (u := file_url(p, reports_root, base_url)) is not None}
    key = file_url(key_chart, reports_root, base_url) if key_chart is not None else None
    return ReportUrls(html=page, markdown=md, charts=chart_urls, key_chart=key)
