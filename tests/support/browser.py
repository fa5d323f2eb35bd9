"""A real browser for the tests: Debian's headless Chromium driven by Playwright, the Prefect UI
served by a ``prefect server start --no-services`` whose pages talk to the session's API, and
``roost results serve`` on loopback.

Chromium comes from the system (``apt-get install chromium``), never from ``playwright install``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from support.cli import ROOST
from support.prefect_server import PrefectServer

CHROMIUM = Path(os.environ.get("ROOST_TEST_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]


@contextmanager
def chromium(user_data_dir: Path) -> Iterator[Any]:
    """A Playwright browser context of headless Chromium with a fresh profile in ``user_data_dir``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            str(user_data_dir), executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield context
        finally:
            context.close()


def _stop(proc: subprocess.Popen[Any]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextmanager
def prefect_ui(api_url: str, workdir: Path) -> Iterator[str]:
    """The Prefect UI (``prefect server start --ui --no-services`` with a home of its own) whose pages
    read ``api_url`` (the session's server, which runs with the UI off); yields the UI's root URL."""
    ui = PrefectServer(workdir / "prefect-ui.log", args=["--ui", "--no-services"], env={
        "PREFECT_HOME": str(workdir / "home"), "PREFECT_UI_ENABLED": "true", "PREFECT_SERVER_UI_ENABLED": "true",
        "PREFECT_UI_API_URL": api_url, "PREFECT_SERVER_UI_API_URL": api_url, "PREFECT_SERVER_ANALYTICS_ENABLED": "false"})
    with ui:
        yield f"http://127.0.0.1:{ui.port}"


@contextmanager
def results_server(root: Path) -> Iterator[str]:
    """``roost results serve --port 0 --root root`` on loopback; yields the ROOST_RESULTS_URL it prints."""
    root.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([ROOST, "results", "serve", "--port", "0", "--root", str(root)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        name, _, url = line.partition("=")
        if name != "ROOST_RESULTS_URL" or not url.startswith("http://127.0.0.1:"):
            raise RuntimeError(f"roost results serve printed {line!r}")
        yield url
    finally:
        _stop(proc)


def check_report_artifact(context: Any, ui_url: str, flow_run_id: str, results_url: str, shots: Path) -> None:
    """Open the flow run's Artifacts tab in the UI, open its roost report artifact, check that every
    chart image loads from ``results_url`` and that the full-report link opens report.html over http.

    On a failure a screenshot is saved in ``shots`` and its path printed."""
    page = context.new_page()
    try:
        page.goto(f"{ui_url}/runs/flow-run/{flow_run_id}", wait_until="networkidle")
        page.get_by_role("tab", name="Artifacts").or_(page.get_by_text("Artifacts", exact=True)).first.click()
        card = page.locator(".artifact-card").filter(has_text="roost report")
        card.first.wait_for(timeout=60_000)
        card.first.click()
        page.wait_for_url("**/artifacts/artifact/**", timeout=60_000)
        images = page.locator(f"img[src^='{results_url}']")
        images.first.wait_for(timeout=60_000)
        page.wait_for_function(
            "base => [...document.images].filter(i => i.src.startsWith(base)).every(i => i.complete)",
            arg=results_url, timeout=60_000)
        widths = images.evaluate_all("els => els.map(e => [e.getAttribute('src'), e.naturalWidth])")
        assert widths and all(w > 0 for _, w in widths), widths
        link = page.locator("a[href$='report.html']").first
        href = link.get_attribute("href")
        assert href is not None and href.startswith(results_url), href
        report = context.new_page()
        response = report.goto(href)
        assert response is not None and response.status == 200, href
        assert response.headers["content-type"].startswith("text/html"), response.headers
        assert report.url.startswith("http://") and "roost" in report.title().lower(), (report.url, report.title())
        report.close()
    except BaseException:
        shots.mkdir(parents=True, exist_ok=True)
        shot = shots / "prefect-ui-failure.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot of the failing page: {shot}")
        raise
    finally:
        page.close()
