"""Keep Prometheus in step with what roost keeps serving: re-render the files and make the running
Prometheus load them, in the way that works for how it was started.

- Started by ``roost monitor up`` (its folder bind-mounted): ``POST /-/reload``; the new files are
  visible in the container because the folder, not the file, is mounted.
- A container whose ``prometheus.yml`` is bind-mounted as a single file: the container is restarted.
  Such a mount pins the file's inode, and every atomic write (a new file renamed over the old, as
  roost writes, or ``sed -i``) leaves the container reading the old one; a reload or SIGHUP reloads
  stale content.
- Any other Prometheus (a URL only): ``POST /-/reload``.

Either way the configuration Prometheus reports as loaded is compared with what was rendered; a
reload that kept the old targets is not reported as done.

An Alertmanager roost knows of (``alertmanager_url``, set by ``roost monitor up``) is sent
``POST /-/reload`` when its files changed (its folder is mounted whole); one that does not answer is
noted, not an error: the alerts' routing is what changed, not what Prometheus scrapes.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from roost.monitor import scrape
from roost.monitor.alertmanager import AlertmanagerAPI, AlertmanagerError
from roost.monitor.containers import engine
from roost.monitor.prometheus import PrometheusAPI, PrometheusError
from roost.monitor.render import ALERTMANAGER_DIR, PROMETHEUS_DIR, Rendered, render
from roost.monitor.state import MonitorState, load_state
from roost.serve.docker.images import DEFAULT_DOCKER_URL

log = logging.getLogger(__name__)

Method = Literal["none", "unchanged", "lifecycle-reload", "container-restart"]
CONFIG_IN_CONTAINER = "/etc/prometheus/prometheus.yml"


@dataclass
class SyncResult:
    rendered: Rendered
    method: Method
    targets: list[str] = field(default_factory=list)
    note: str = ""
    alertmanager_reload: str = "none"  # none, unchanged, reloaded, or why it failed

    def to_json(self) -> dict[str, object]:
        return {**self.rendered.to_json(), "reload": self.method, "loaded_targets": self.targets, "note": self.note,
                "alertmanager_reload": self.alertmanager_reload}


def reload_alertmanager(state: MonitorState, rendered: Rendered) -> str:
    """Make a known Alertmanager read changed files: none, unchanged, reloaded, or why not."""
    if not state.alertmanager_url:
        return "none"
    if not any(c.startswith(ALERTMANAGER_DIR + "/") for c in rendered.changed):
        return "unchanged"
    try:
        AlertmanagerAPI(state.alertmanager_url).reload()
    except AlertmanagerError as exc:
        log.warning("%s", exc)
        return str(exc)
    return "reloaded"


def single_file_mount(container: Any, config_path: str = CONFIG_IN_CONTAINER) -> bool:
    """Is the container's Prometheus config a bind mount of one file (not of its folder)?"""
    for m in container.attrs.get("Mounts") or []:
        if m.get("Type") == "bind" and m.get("Destination") == config_path:
            return Path(str(m.get("Source", ""))).is_file()
    return False


def wait_loaded(api: PrometheusAPI, expected: list[str], timeout_s: float) -> list[str] | None:
    """Poll the loaded configuration until its vllm targets are ``expected``; None on timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            loaded = scrape.vllm_addresses(api.loaded_config())
            if loaded == expected:
                return loaded
        except PrometheusError:
            pass  # restarting
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.25)


def sync(state: MonitorState | None = None, *, force_reload: bool = False, timeout_s: float = 60.0,
         slack_secret: SecretStr | None = None) -> SyncResult | None:
    """Re-render and reload; None when no monitoring is set up here (nothing rendered yet).
    ``slack_secret``: the Slack receiver's webhook URL or bot token, written now (``MonitorState.options``)."""
    state = state or load_state()
    if state is None:
        return None
    rendered = render(Path(state.out), state.options(slack_secret))
    alertmanager = reload_alertmanager(state, rendered)  # first: a Prometheus failing does not hold it back
    result = _sync_prometheus(state, rendered, force_reload, timeout_s)
    result.alertmanager_reload = alertmanager
    return result


def _sync_prometheus(state: MonitorState, rendered: Rendered, force_reload: bool, timeout_s: float) -> SyncResult:
    expected = sorted(t.address for t in rendered.targets.vllm)
    prom_changed = any(c.startswith(PROMETHEUS_DIR + "/") for c in rendered.changed)
    if not state.prometheus_url:
        return SyncResult(rendered, "none", note="no Prometheus recorded: files written only")
    if not prom_changed and not force_reload:
        return SyncResult(rendered, "unchanged", expected)
    api = PrometheusAPI(state.prometheus_url)
    container = None
    if state.prometheus_container:
        try:
            container = engine(state.docker_url or DEFAULT_DOCKER_URL).containers.get(state.prometheus_container)
        except Exception as exc:  # docker.errors.NotFound, UserError (engine down)
            raise PrometheusError(f"the Prometheus container {state.prometheus_container!r} is not there "
                                  f"({type(exc).__name__}): run roost monitor up") from None
    if container is not None and single_file_mount(container):
        return _restart(container, api, rendered, expected, timeout_s,
                        "prometheus.yml is bind-mounted as a single file: restarted (a reload would read the old file)")
    api.reload()
    loaded = wait_loaded(api, expected, min(timeout_s, 15.0))
    if loaded is not None:
        return SyncResult(rendered, "lifecycle-reload", loaded)
    if container is not None:
        return _restart(container, api, rendered, expected, timeout_s,
                        "the reload kept the old configuration: restarted the container")
    raise PrometheusError(f"Prometheus at {state.prometheus_url} reloaded but still scrapes its old vLLM targets: "
                          f"if it runs in a container with {scrape.CONFIG_FILE} bind-mounted as a single file, mount "
                          f"its folder instead or restart the container")


def _restart(container: Any, api: PrometheusAPI, rendered: Rendered, expected: list[str], timeout_s: float,
             note: str) -> SyncResult:
    log.info("restarting Prometheus container %s: %s", container.name, note)
    container.restart(timeout=10)
    loaded = wait_loaded(api, expected, timeout_s)
    if loaded is None:
        raise PrometheusError(f"Prometheus container {container.name} did not come back with the new configuration "
                              f"in {timeout_s:.0f} s: docker logs {container.name}")
    return SyncResult(rendered, "container-restart", loaded, note)
