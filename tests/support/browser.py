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


PANE_WIDTH = 1280
"""The window width the artifact pane is checked at (issue 39: a laptop's)."""

_PANE_FACTS = """() => {
  const pane = document.querySelector('.artifact-data-view');
  if (!pane) return null;
  const p = pane.getBoundingClientRect();
  const box = e => { const r = e.getBoundingClientRect(); return [r.left, r.right]; };
  const tables = [...pane.querySelectorAll('table')].map(t => {
    const wrap = t.parentElement;
    const head = [...t.querySelectorAll('th')].map(th => th.innerText.trim());
    const values = head[0] === 'Headline' ? [...t.querySelectorAll('tbody tr')].map(tr => {
      const td = tr.querySelectorAll('td')[1]; return [tr.querySelector('td').innerText.trim(), td.innerText.trim(), box(td)]; }) : [];
    return {head, box: box(t), scroll: [wrap.scrollWidth, wrap.clientWidth], values};
  });
  const images = [...pane.querySelectorAll('img')].map(i => ({alt: i.getAttribute('alt'), width: i.naturalWidth,
                                                              complete: i.complete, src: i.src.slice(0, 40)}));
  return {pane: [p.left, p.right], tables, images, text: pane.innerText};
}"""


def artifact_pane_facts(context: Any, url: str, shots: Path, name: str) -> dict[str, Any]:
    """Open an artifact's page (``url``) in a window ``PANE_WIDTH`` px wide and read what a person sees in its
    pane (the artifact's data, ``.artifact-data-view``): the pane's horizontal extent, each table's (its headers, box, and its wrapper's scroll and
    client widths; for the headline table each value cell's box), every image (alt, natural width) and the text.
    A screenshot is saved in ``shots`` as ``name``."""
    page = context.new_page()
    page.set_viewport_size({"width": PANE_WIDTH, "height": 900})
    try:
        page.goto(url, wait_until="networkidle")
        page.locator(".artifact-data-view h1, .artifact-data-view table").first.wait_for(timeout=60_000)
        page.wait_for_timeout(500)  # the rest of the Markdown is rendered in the same pass
        page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=60_000)
        facts: dict[str, Any] = page.evaluate(_PANE_FACTS)
        return facts
    finally:
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / name), full_page=True)
        page.close()


def assert_fits_the_pane(facts: dict[str, Any], what: str) -> None:
    """Every table of the pane lies inside it (to the pixel: a full-width table's border may round out) and does not scroll sideways; every headline value's cell lies
    inside it; every image loaded and its alt text reads as plain text (no HTML entity shown)."""
    left, right = facts["pane"]
    for t in facts["tables"]:
        t_left, t_right = t["box"]
        assert left - 1 <= t_left and t_right <= right + 1, f"{what}: table {t['head']} spans {t['box']}, the pane {facts['pane']}"
        scroll, client = t["scroll"]
        assert scroll <= client + 1, f"{what}: table {t['head']} scrolls sideways ({scroll} px in {client} px)"
        for label, value, (v_left, v_right) in t["values"]:
            assert left - 1 <= v_left and v_right <= right + 1, f"{what}: headline {label} = {value!r} at {v_left}-{v_right}"
    for image in facts["images"]:
        assert image["complete"] and image["width"] > 0, f"{what}: image {image} did not load"
        assert "&#" not in (image["alt"] or "") and "&amp;" not in (image["alt"] or ""), f"{what}: alt {image['alt']!r}"
