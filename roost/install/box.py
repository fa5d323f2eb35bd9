"""The box's steps in order: ``install`` (each step ``created``, ``updated`` or ``unchanged``, so that a second
run says it changed nothing) and ``uninstall`` (services and units gone; data and keys kept unless ``purge``).

The Prefect side (reading the Secret block, recording URLs on the host block) is the caller's
(:class:`PrefectSide`): this module is the machine's side and imports no Prefect.
"""

from __future__ import annotations

import json
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from roost.errors import RoostError, UserError
from roost.install import system
from roost.install.layout import (
    ADMIN_KEY_NAME,
    GATEWAY_UNIT,
    PREFECT_UNIT,
    RESULTS_UNIT,
    WORKER_TEMPLATE,
    Box,
    BoxFile,
    gateway_files,
    monitor_up_args,
    prefect_server_files,
    results_files,
    warm_unit,
    worker_command,
    worker_unit,
)
from roost.install.system import InstallError, Postgres, Status
from roost.settings import (
    PREFECT_API_DATABASE_CONNECTION_URL,
    PREFECT_API_KEY,
    PREFECT_API_URL,
    ROOST_HOME,
    ROOST_RESULTS_DIR,
    ROOST_WORKER_ENV,
    VLLM_API_KEY,
    child_env,
)

PREFECT_START_TIMEOUT_S = 180.0
"""A first start migrates the database and builds the UI (about 20 s here, longer on PostgreSQL's first run)."""


@dataclass(frozen=True)
class Step:
    name: str
    status: str
    detail: str = ""


class PrefectSide(Protocol):
    def read_vllm_key(self, api_url: str) -> str | None:
        """The ``roost-vllm-api-key`` Secret block's value on the server at ``api_url``, or None."""

    def record_host_urls(self, api_url: str, host: str, results_url: str, gateway_url: str) -> Status:
        """Set the host block's ``results_url`` and ``gateway_url`` (``unchanged`` when they are already)."""


@dataclass
class Outcome:
    steps: list[Step] = field(default_factory=list)
    admin_key: str | None = None
    pool: str = ""

    @property
    def changed(self) -> bool:
        return any(s.status not in ("unchanged", "absent") for s in self.steps)


Report = Callable[[Step], None]


def service_env(box: Box, **extra: str) -> dict[str, str]:
    """The environment roost's commands run in for the box: its API, its home, its environment's bin first."""
    env = child_env(without=(VLLM_API_KEY, PREFECT_API_KEY))
    env.update({"PATH": f"{box.env_dir / 'bin'}:{env.get('PATH', '/usr/local/bin:/usr/bin:/bin')}",
                "HOME": str(system.home_of(box.user)), ROOST_HOME: str(box.roost_home),
                PREFECT_API_URL: box.prefect_api, ROOST_RESULTS_DIR: str(box.results_dir)})
    env.update(extra)
    return env


def _files_and_unit(files: list[BoxFile], unit: str) -> Status:
    """Write the unit's files; enable it, restarted when a file changed."""
    written = [system.write_file(f) for f in files]
    changed = any(s != "unchanged" for s in written)
    if changed:
        system.systemctl("daemon-reload")
    status = system.start_unit(unit, changed)
    if status == "unchanged" and changed:
        return "updated"
    return "created" if all(s == "created" for s in written) else status


class Installer:
    def __init__(self, box: Box, side: PrefectSide, report: Report) -> None:
        self.box, self.side, self.report = box, side, report
        self.outcome = Outcome()

    def done(self, name: str, status: str, detail: str = "") -> None:
        step = Step(name, status, detail)
        self.outcome.steps.append(step)
        self.report(step)

    def roost(self, *args: str, timeout_s: float = 600, extra: dict[str, str] | None = None) -> Any:
        """``roost ARGS --json`` as the service user, in the box's environment (plus ``extra``); its JSON answer."""
        proc = system.run([self.box.exe("roost"), *args], env=service_env(self.box, **(extra or {})), user=self.box.user,
                          timeout_s=timeout_s, what=f"roost {' '.join(args[:2])}")
        return json.loads(proc.stdout) if proc.stdout.strip() else None

    # --- the steps, in order ----------------------------------------------------------------------
    def run(self) -> Outcome:
        """Every step; a failure of any kind is one ``InstallError`` line naming the step it stopped after."""
        try:
            self.steps()
        except RoostError:
            raise
        except Exception as exc:  # a Docker, Prefect, HTTP or file error: one line, exit 1, never a traceback
            last = self.outcome.steps[-1].name if self.outcome.steps else "the start"
            raise InstallError(f"the install stopped after {last}: {type(exc).__name__}: "
                               f"{system.one_line(str(exc), 200)}") from exc
        return self.outcome

    def steps(self) -> None:
        box = self.box
        statuses = [system.make_dir(d, box.user) for d in (box.data, box.results_dir, box.results_dir / "reports",
                                                             box.roost_home)]
        statuses += [system.make_dir(d, box.user, 0o700) for d in (box.prefect_home, box.data / "gateway")]
        statuses.append(system.make_dir(box.etc, "root"))
        self.done("directories", "created" if "created" in statuses else "unchanged",
                  f"{box.etc} (settings, keys), {box.data} (databases, results)")
        password = self.postgres() if box.postgres else ""
        status = _files_and_unit(prefect_server_files(box, password), PREFECT_UNIT)
        system.wait_http(f"{box.prefect_api}/health", PREFECT_START_TIMEOUT_S, PREFECT_UNIT)
        self.done("prefect-server", status, f"{box.prefect_ui} ({'PostgreSQL' if box.postgres else 'SQLite'})")
        key, key_status = self.vllm_key()
        setup = self.roost("setup", "--hosts", box.host, "--store-vllm-api-key", "--json", extra={VLLM_API_KEY: key})
        self.outcome.pool = str(setup["pool"])
        self.done("roost setup", "updated" if setup.get("changed") else "unchanged",
                  f"work pool {self.outcome.pool}, deployments land/{box.host}, rebenchmark/{box.host}, "
                  f"audit/{box.host}")
        self.done("vllm-api-key", key_status, "Secret block roost-vllm-api-key and the gateway's environment "
                  "file (mode 600); never printed")
        self.done("host block", self.side.record_host_urls(box.prefect_api, box.host, box.results_url,
                                                           box.gateway_local),
                  f"{box.host}: results_url {box.results_url}, gateway_url {box.gateway_local}")
        self.worker()
        self.gateway(key)
        status = _files_and_unit(results_files(box), RESULTS_UNIT)
        system.wait_http(f"http://127.0.0.1:{box.ports.results}/", 60, RESULTS_UNIT, any_answer=True)
        self.done("report server", status, f"{box.results_url} (the reports in {box.results_dir / 'reports'})")
        self.monitoring()

    def postgres(self) -> str:
        pg = Postgres()
        installed_now = not pg.installed()
        if installed_now:
            pg.install()
        system.start_unit(pg.service, False)
        pg.ready()
        url = system.env_values(self.box.prefect_env).get(PREFECT_API_DATABASE_CONNECTION_URL, "")
        kept = url.partition("://")[2].partition("@")[0].partition(":")[2]
        password = kept or secrets.token_urlsafe(24)
        status = pg.ensure(password, new_password=not kept)
        self.done("postgresql", "created" if installed_now else status,
                  "Debian's PostgreSQL: database and role roost_prefect (the password in the server's environment "
                  "file)")
        return password

    def vllm_key(self) -> tuple[str, str]:
        """The upstream key: the gateway's environment file's, else the Secret block's, else a new one."""
        key = system.env_values(self.box.gateway_env).get(VLLM_API_KEY, "")
        if key:
            return key, "unchanged"
        key = self.side.read_vllm_key(self.box.prefect_api) or ""
        if key:
            return key, "unchanged"
        return secrets.token_urlsafe(32), "created"

    def worker(self) -> None:
        box = self.box
        unit = worker_unit(box.host)
        paths = [box.unit_dir / WORKER_TEMPLATE, box.worker_env]
        before, active = system.fingerprint(paths), system.unit_active(unit)
        system.run(worker_command(box, self.outcome.pool), env=service_env(box, **{ROOST_WORKER_ENV: str(box.env_dir)}),
                   what="scripts/install-worker", timeout_s=900)
        changed = system.fingerprint(paths) != before
        if changed and active:
            system.systemctl("restart", unit)
        status = "unchanged" if active and not changed else ("updated" if active else "created")
        self.done("worker", status, f"{unit}: work pool {self.outcome.pool}, queue {box.host}")

    def gateway(self, key: str) -> None:
        box = self.box
        keys = self.roost("gateway", "key", "list", "--json", "--db", box.gateway_db) or []
        if not any(k.get("name") == ADMIN_KEY_NAME and not k.get("revoked") for k in keys):
            made = self.roost("gateway", "key", "add", ADMIN_KEY_NAME, "--kind", "user", "--note",
                              "the box's first key (roost install)", "--json", "--db", box.gateway_db)
            self.outcome.admin_key = str(made["key"])
        status = _files_and_unit(gateway_files(box, key), GATEWAY_UNIT)
        system.wait_http(f"{box.gateway_local}/health", 60, GATEWAY_UNIT)
        self.done("gateway", status, f"{box.gateway_url} (routes to every server a landing keeps on {box.host})")
        self.done("admin key", "created" if self.outcome.admin_key else "unchanged",
                  "shown below, once" if self.outcome.admin_key else
                  f"key {ADMIN_KEY_NAME!r} exists (shown only when it was made)")

    def monitoring(self) -> None:
        from roost.monitor import containers

        box = self.box
        options = up_options(box)
        try:
            client = _engine()
        except UserError as exc:
            raise InstallError(f"monitoring runs as containers: {exc}") from None
        if containers.running_as(client, options, box.ports.alertmanager) and _rendered_for(box):
            self.done("monitoring", "unchanged", _monitor_detail(box))
            return
        existed = containers.any_running(client)
        self.roost(*monitor_up_args(box), timeout_s=900)
        self.done("monitoring", "updated" if existed else "created", _monitor_detail(box))


def up_options(box: Box) -> Any:
    from roost.monitor import containers

    m = box.monitoring
    return containers.UpOptions(
        prometheus_image=m.prometheus_image or containers.PROMETHEUS_IMAGE,
        grafana_image=m.grafana_image or containers.GRAFANA_IMAGE, grafana=m.grafana,
        alertmanager_image=m.alertmanager_image or containers.ALERTMANAGER_IMAGE,
        prometheus_listen=box.ports.prometheus, grafana_port=box.ports.grafana)


def _rendered_for(box: Box) -> bool:
    """Whether the recorded monitoring files scrape this box's host and gateway."""
    from roost.monitor.state import load_state

    try:
        state = load_state()
    except RoostError:
        return False
    return state is not None and state.host == box.host and state.gateway == f"127.0.0.1:{box.ports.gateway}"


def _monitor_detail(box: Box) -> str:
    parts = [f"Prometheus http://{box.ports.prometheus}", f"Alertmanager http://{box.ports.alertmanager}"]
    parts.append(f"Grafana {box.grafana_url}" if box.grafana_url else "no Grafana")
    return ", ".join(parts) + " (containers, restart unless-stopped)"


def require_systemd() -> None:
    if not system.systemd_running():
        raise InstallError("systemd is not running here (/run/systemd/system is missing): the box's services are "
                           "systemd units; run roost install on the machine itself (--dry-run shows what it writes)")


def install(box: Box, side: PrefectSide, report: Report, outcome: Outcome | None = None) -> Outcome:
    """Install the box; ``outcome`` (when given) is filled step by step, so that a caller still has what was
    done (a new admin key) when a later step fails."""
    require_systemd()
    installer = Installer(box, side, report)
    if outcome is not None:
        installer.outcome = outcome
    return installer.run()


def uninstall(box: Box, report: Report, *, purge: bool) -> Outcome:
    """Stop and remove the services, their units, the servers landings kept on this host and the monitoring
    containers; with ``purge``, the settings, keys, databases, results and monitoring data too."""
    outcome = Outcome()

    def done(name: str, status: str, detail: str = "") -> None:
        outcome.steps.append(Step(name, status, detail))
        report(outcome.steps[-1])

    if system.systemd_running():
        for unit in [*reversed(box.units), warm_unit(box.host)]:
            done(unit, system.stop_unit(unit))
    removed = [p for p in box.unit_files if p.exists()]
    for p in removed:
        p.unlink()
    if removed and system.systemd_running():
        system.systemctl("daemon-reload")
    done("unit files", "removed" if removed else "absent", ", ".join(p.name for p in removed))
    _remove_containers(box, done)
    if not purge:
        done("data", "unchanged", f"kept: {box.etc} (settings, keys), {box.data} (databases, results), "
             "monitoring volumes; --purge removes them")
        return outcome
    pg = Postgres()
    done("postgresql", pg.drop() if pg.installed() else "absent", "database and role roost_prefect")
    for path in (box.etc, box.data):
        existed = path.exists()
        shutil.rmtree(path, ignore_errors=True)
        done(str(path), "removed" if existed else "absent")
    _purge_monitoring(done)
    return outcome


def _engine() -> Any:
    from roost.monitor import containers
    from roost.serve.docker.images import DEFAULT_DOCKER_URL

    return containers.engine(DEFAULT_DOCKER_URL)


def _remove_containers(box: Box, done: Callable[[str, str, str], None]) -> None:
    """The monitoring containers (found by their label, wherever their state file is) and the vLLM servers
    landings kept on this host (their restart policy would bring them back)."""
    import docker

    from roost.monitor import containers
    from roost.serve.docker.containers import LABEL_HOST

    try:
        client = _engine()
        for label, what in ((containers.LABEL, "monitoring"), (f"{LABEL_HOST}={box.host}", "kept servers")):
            found = client.containers.list(all=True, filters={"label": label})
            for c in found:
                c.remove(force=True)
            done(what, "removed" if found else "absent", ", ".join(str(c.name) for c in found))
    except (UserError, docker.errors.DockerException) as exc:
        done("containers", "absent", f"no Docker engine answers ({system.one_line(str(exc), 120)})")


def _purge_monitoring(done: Callable[[str, str, str], None]) -> None:
    import docker

    from roost.monitor import containers
    from roost.monitor.state import load_state, state_path

    try:
        gone = containers.remove_volumes(_engine())
        done("monitoring data", "removed" if gone else "absent", ", ".join(gone))
    except (UserError, docker.errors.DockerException) as exc:
        done("monitoring data", "kept", f"the engine refused ({system.one_line(str(exc), 120)})")
    try:
        state = load_state()
    except RoostError:
        state = None
    if state is not None:
        shutil.rmtree(state.out, ignore_errors=True)
        state_path().unlink(missing_ok=True)
        done("monitoring files", "removed", state.out)
