"""``roost monitor up``/``down``: Prometheus, Alertmanager and Grafana as containers on a Spark (official images),
host networking (they reach the vLLM servers on 127.0.0.1 and the gateway as the recipe's
``host.docker.internal`` targets would), the rendered folders bind-mounted read-only.

The Prometheus folder is mounted whole (``--mount dir``, the default), so ``/-/reload`` sees each
atomically rewritten file; ``--mount file`` mounts ``prometheus.yml`` and ``rules.yml`` one by one,
as the recipe's box did, and roost then restarts the container on every change
(:mod:`roost.monitor.sync`). Data lives in named volumes that ``down`` keeps.

Alertmanager gets the rendered ``alertmanager/`` folder at ``/etc/alertmanager`` and runs in it (it
opens ``api_url_file`` relative to its working directory: :mod:`roost.monitor.alerting`), with
clustering off (one instance; no gossip port opened on the host network).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import SecretStr

from roost.errors import RoostError, UserError
from roost.monitor import scrape
from roost.monitor.alertmanager import AlertmanagerAPI, AlertmanagerError
from roost.monitor.grafana import DASHBOARDS_PATH
from roost.monitor.prometheus import PrometheusAPI, PrometheusError
from roost.monitor.render import ALERTMANAGER_DIR, PROMETHEUS_DIR, render
from roost.monitor.state import MonitorState, save_state
from roost.settings import ROOST_GRAFANA_ADMIN_PASSWORD, environment

PROMETHEUS_IMAGE = "prom/prometheus:v3.5.0"
GRAFANA_IMAGE = "grafana/grafana:11.6.0"
ALERTMANAGER_IMAGE = "prom/alertmanager:v0.28.1"
"""Every configuration field roost renders exists since 0.22; the tests check it with Debian's 0.25."""
ALERTMANAGER_NAME = "roost-alertmanager"
PROMETHEUS_NAME = "roost-prometheus"
GRAFANA_NAME = "roost-grafana"
LABEL = "ai.roost.monitor"
ADMIN_PASSWORD_ENV = ROOST_GRAFANA_ADMIN_PASSWORD
VOLUMES = ("roost-prometheus-data", "roost-alertmanager-data", "roost-grafana-data")
"""The containers' data (kept by ``down``; ``roost install --uninstall --purge`` removes them)."""

Mount = Literal["dir", "file"]


@dataclass(frozen=True)
class UpOptions:
    prometheus_image: str = PROMETHEUS_IMAGE
    grafana_image: str = GRAFANA_IMAGE
    grafana: bool = True
    alertmanager_image: str = ALERTMANAGER_IMAGE
    alertmanager: bool = True
    mount: Mount = "dir"
    prometheus_listen: str = "127.0.0.1:9090"
    grafana_port: int = 3000
    retention: str = "30d"


def engine(url: str) -> Any:
    """A client for the Docker engine at ``url``, checked with a ping."""
    import docker

    try:
        client = docker.DockerClient(base_url=url, version="auto", timeout=120)
        client.ping()
    except docker.errors.DockerException:
        raise UserError(f"no Docker engine answers at {url}: start it, or pass --docker-url") from None
    return client


def _image(client: Any, ref: str, flag: str) -> None:
    import docker

    try:
        client.images.get(ref)
        return
    except docker.errors.ImageNotFound:
        pass
    try:
        client.images.pull(ref)
    except docker.errors.DockerException as exc:
        raise UserError(f"cannot pull {ref} ({' '.join(str(exc).split())[:160]}): pass {flag} with an image this "
                        "engine has") from None


def _replace(client: Any, name: str) -> None:
    import docker

    try:
        old = client.containers.get(name)
    except docker.errors.NotFound:
        return
    if old.labels.get(LABEL) is None:
        raise UserError(f"a container named {name} exists and roost did not start it: remove or rename it first")
    old.remove(force=True)


def prometheus_volumes(out: Path, mount: Mount) -> dict[str, dict[str, str]]:
    """The rendered Prometheus folder at ``/etc/prometheus``, or its files one by one (the gateway's
    metrics token file too when there is one: ``prometheus.yml`` names it relative to itself)."""
    folder = (out / PROMETHEUS_DIR).resolve()
    if mount == "dir":
        return {str(folder): {"bind": "/etc/prometheus", "mode": "ro"}}
    names = [scrape.CONFIG_FILE, scrape.RULES_FILE]
    if (folder / scrape.GATEWAY_TOKEN_FILE).is_file():
        names.append(scrape.GATEWAY_TOKEN_FILE)
    return {str(folder / name): {"bind": f"/etc/prometheus/{name}", "mode": "ro"} for name in names}


def up(client: Any, state: MonitorState, options: UpOptions, timeout_s: float = 90.0,
       slack_secret: SecretStr | None = None) -> MonitorState:
    """Render (writing ``slack_secret``, the Slack receiver's, when given), (re)start the containers and
    wait for Prometheus; returns the state saved."""
    out = Path(state.out)
    state.prometheus_url = f"http://{options.prometheus_listen.replace('0.0.0.0', '127.0.0.1')}"
    render(out, state.options(slack_secret))
    _image(client, options.prometheus_image, "--prometheus-image")
    if options.alertmanager:
        _image(client, options.alertmanager_image, "--alertmanager-image")
    if options.grafana:
        _image(client, options.grafana_image, "--grafana-image")
    if options.alertmanager:
        _run_alertmanager(client, state, options, timeout_s)
    else:
        state.alertmanager_container, state.alertmanager_url = "", ""
    _replace(client, PROMETHEUS_NAME)
    prom = client.containers.run(
        options.prometheus_image, name=PROMETHEUS_NAME, detach=True, network_mode="host",
        entrypoint=["/bin/prometheus"],
        command=[f"--config.file=/etc/prometheus/{scrape.CONFIG_FILE}", "--storage.tsdb.path=/prometheus",
                 f"--storage.tsdb.retention.time={options.retention}", "--web.enable-lifecycle",
                 f"--web.listen-address={options.prometheus_listen}"],
        volumes={**prometheus_volumes(out, options.mount), VOLUMES[0]: {"bind": "/prometheus", "mode": "rw"}},
        labels={LABEL: "prometheus"}, restart_policy={"Name": "unless-stopped"})
    state.prometheus_container = PROMETHEUS_NAME
    _wait_ready(prom, PrometheusAPI(state.prometheus_url, timeout_s=2.0).ready, "Prometheus", PrometheusError,
                timeout_s)
    if options.grafana:
        _replace(client, GRAFANA_NAME)
        env = {"GF_SERVER_HTTP_PORT": str(options.grafana_port)}
        if password := environment().roost_grafana_admin_password:
            env["GF_SECURITY_ADMIN_PASSWORD"] = password
        client.containers.run(
            options.grafana_image, name=GRAFANA_NAME, detach=True, network_mode="host", environment=env,
            volumes={str((out / "grafana" / "provisioning").resolve()): {"bind": "/etc/grafana/provisioning", "mode": "ro"},
                     str((out / "grafana" / "dashboards").resolve()): {"bind": DASHBOARDS_PATH, "mode": "ro"},
                     VOLUMES[2]: {"bind": "/var/lib/grafana", "mode": "rw"}},
            labels={LABEL: "grafana"}, restart_policy={"Name": "unless-stopped"})
        state.grafana_container = GRAFANA_NAME
        state.grafana_url = f"http://127.0.0.1:{options.grafana_port}"
    else:
        state.grafana_container, state.grafana_url = "", ""
    save_state(state)
    return state


def _run_alertmanager(client: Any, state: MonitorState, options: UpOptions, timeout_s: float) -> None:
    """(Re)start Alertmanager listening on ``state.alertmanager`` and wait until it is ready."""
    _replace(client, ALERTMANAGER_NAME)
    am = client.containers.run(
        options.alertmanager_image, name=ALERTMANAGER_NAME, detach=True, network_mode="host",
        entrypoint=["/bin/alertmanager"], working_dir="/etc/alertmanager",
        command=["--config.file=/etc/alertmanager/alertmanager.yml", "--storage.path=/alertmanager",
                 f"--web.listen-address={state.alertmanager}", "--cluster.listen-address="],
        volumes={str((Path(state.out) / ALERTMANAGER_DIR).resolve()): {"bind": "/etc/alertmanager", "mode": "ro"},
                 VOLUMES[1]: {"bind": "/alertmanager", "mode": "rw"}},
        labels={LABEL: "alertmanager"}, restart_policy={"Name": "unless-stopped"})
    state.alertmanager_container = ALERTMANAGER_NAME
    state.alertmanager_url = f"http://{state.alertmanager.replace('0.0.0.0', '127.0.0.1')}"
    _wait_ready(am, AlertmanagerAPI(state.alertmanager_url, timeout_s=2.0).ready, "Alertmanager", AlertmanagerError,
                timeout_s, stopped=("exited", "dead", "restarting"))  # restarting: it crashed


def _wait_ready(container: Any, ready: Callable[[], bool], what: str, error: type[RoostError], timeout_s: float,
                stopped: tuple[str, ...] = ("exited", "dead")) -> None:
    """Until ``ready()``: ``error`` with the container's last log line once its status is one of
    ``stopped`` or ``timeout_s`` has passed."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        container.reload()
        if container.status in stopped or time.monotonic() > deadline:
            tail = container.logs(tail=5).decode(errors="replace").strip().splitlines()
            raise error(f"{what} did not become ready ({container.status}): {tail[-1] if tail else 'no log'}")
        time.sleep(0.5)


def down(client: Any, state: MonitorState) -> list[str]:
    """Stop and remove roost's monitoring containers (their data volumes stay); returns their names."""
    import docker

    gone = []
    for name in (state.prometheus_container, state.alertmanager_container, state.grafana_container):
        if not name:
            continue
        try:
            client.containers.get(name).remove(force=True)
            gone.append(name)
        except docker.errors.NotFound:
            pass
    state.prometheus_container = state.grafana_container = state.alertmanager_container = ""
    state.prometheus_url = state.grafana_url = state.alertmanager_url = ""
    save_state(state)
    return gone


def running_as(client: Any, options: UpOptions, alertmanager: str) -> bool:
    """Whether each container ``options`` asks for runs the image asked for, listening where asked
    (Alertmanager at ``alertmanager``), and none runs that it does not ask for: ``up`` would change nothing."""
    import docker

    want: dict[str, tuple[str, str]] = {
        PROMETHEUS_NAME: (options.prometheus_image, f"--web.listen-address={options.prometheus_listen}")}
    if options.alertmanager:
        want[ALERTMANAGER_NAME] = (options.alertmanager_image, f"--web.listen-address={alertmanager}")
    if options.grafana:
        want[GRAFANA_NAME] = (options.grafana_image, f"GF_SERVER_HTTP_PORT={options.grafana_port}")
    for name in (PROMETHEUS_NAME, ALERTMANAGER_NAME, GRAFANA_NAME):
        try:
            container = client.containers.get(name)
        except docker.errors.NotFound:
            container = None
        if name not in want or container is None:
            if (name in want) != (container is not None):
                return False
            continue
        config = container.attrs.get("Config") or {}
        image, setting = want[name]
        if (container.status != "running" or config.get("Image") != image
                or setting not in [*(config.get("Cmd") or []), *(config.get("Env") or [])]):
            return False
    return True


def any_running(client: Any) -> bool:
    """Whether any container ``up`` started exists (running or not)."""
    return bool(client.containers.list(all=True, filters={"label": LABEL}))


def remove_volumes(client: Any) -> list[str]:
    """Remove the containers' data volumes (after ``down``); returns the names removed."""
    import docker

    gone = []
    for name in VOLUMES:
        try:
            client.volumes.get(name).remove(force=True)
            gone.append(name)
        except docker.errors.NotFound:
            pass
    return gone
