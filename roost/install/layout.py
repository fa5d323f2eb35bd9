"""What an installed serving box is made of, defined once: where each file goes, each unit's name, each port
and URL, and the unit and environment files themselves (pure: rendering only, nothing is written here).

The box on one machine (``roost install``, run by ``scripts/install-spark``):

- ``roost-prefect-server.service``: the Prefect server (API and UI) on ``:4200``, its database SQLite under
  ``/var/lib/roost/prefect`` or, with ``--postgres``, Debian's PostgreSQL (database and role
  ``roost_prefect``); ``PREFECT_UI_API_URL`` is the address the tailnet reaches.
- ``roost-worker@HOST.service``: the host's worker (``scripts/install-worker``'s unit), its runs' results in
  ``/var/lib/roost/results``.
- ``roost-gateway.service``: the metering gateway on ``:8080``, routing to every server a landing keeps on
  this host; its environment file holds the upstream vLLM key (mode 600).
- ``roost-results.service``: the report server on ``:8765``, the host block's ``results_url``.
- Prometheus, Alertmanager and Grafana: ``roost monitor up``'s containers (restart policy ``unless-stopped``).

Environment files live in ``/etc/roost`` (mode 600: the keys stay there and in Prefect's Secret block, never
on a command line or in a unit); data in ``/var/lib/roost``; units in ``/etc/systemd/system``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from pathlib import Path

from roost.gateway.install import env_text, unit_text
from roost.settings import (
    PREFECT_API_DATABASE_CONNECTION_URL,
    PREFECT_API_URL,
    PREFECT_HOME,
    PREFECT_SERVER_ANALYTICS_ENABLED,
    PREFECT_UI_API_URL,
    PREFECT_UI_ENABLED,
    ROOST_GATEWAY_DB,
    ROOST_HOME,
    VLLM_API_KEY,
)

ETC = Path("/etc/roost")
UNIT_DIR = Path("/etc/systemd/system")
DATA = Path("/var/lib/roost")
PREFECT_UNIT = "roost-prefect-server.service"
GATEWAY_UNIT = "roost-gateway.service"
RESULTS_UNIT = "roost-results.service"
WORKER_TEMPLATE = "roost-worker@.service"
WARM_TEMPLATE = "roost-warm@.service"
PG_DATABASE = "roost_prefect"
PG_ROLE = "roost_prefect"
ADMIN_KEY_NAME = "admin"
MASK = "********"


PREFECT_ENV = ETC / "prefect-server.env"
"""The Prefect server's environment file (a later run reads the address an earlier one chose there)."""


def worker_unit(host: str) -> str:
    return WORKER_TEMPLATE.replace("@", f"@{host}")


def warm_unit(host: str) -> str:
    """``install-worker --warm-fork``'s server for the host's runs."""
    return WARM_TEMPLATE.replace("@", f"@{host}")


@dataclass(frozen=True)
class Ports:
    prefect: int = 4200
    gateway: int = 8080
    results: int = 8765
    prometheus: str = "127.0.0.1:9090"
    alertmanager: str = "127.0.0.1:9093"
    grafana: int = 3000


@dataclass(frozen=True)
class Monitoring:
    """``roost monitor up``'s choices the box passes on (images: empty for the official ones)."""

    grafana: bool = True
    prometheus_image: str = ""
    alertmanager_image: str = ""
    grafana_image: str = ""


@dataclass(frozen=True)
class Box:
    """One machine's box: who runs it, where roost's environment is, the address the tailnet reaches."""

    host: str
    user: str
    address: str
    env_dir: Path
    repo: Path
    roost_home: Path
    postgres: bool = False
    ports: Ports = field(default_factory=Ports)
    monitoring: Monitoring = field(default_factory=Monitoring)
    etc: Path = ETC
    unit_dir: Path = UNIT_DIR
    data: Path = DATA

    # --- where things are ---------------------------------------------------------------------------
    @property
    def prefect_api(self) -> str:
        """The API as this machine's services reach it (loopback)."""
        return f"http://127.0.0.1:{self.ports.prefect}/api"

    @property
    def prefect_ui(self) -> str:
        return f"http://{_netloc(self.address, self.ports.prefect)}"

    @property
    def prefect_ui_api(self) -> str:
        """The API as a browser on the tailnet reaches it (``PREFECT_UI_API_URL``)."""
        return f"{self.prefect_ui}/api"

    @property
    def gateway_url(self) -> str:
        """The gateway's OpenAI base URL for clients on the tailnet."""
        return f"http://{_netloc(self.address, self.ports.gateway)}/v1"

    @property
    def gateway_local(self) -> str:
        """The gateway as the worker reaches it (the host block's ``gateway_url``)."""
        return f"http://127.0.0.1:{self.ports.gateway}"

    @property
    def results_url(self) -> str:
        return f"http://{_netloc(self.address, self.ports.results)}/"

    @property
    def grafana_url(self) -> str:
        return f"http://{_netloc(self.address, self.ports.grafana)}" if self.monitoring.grafana else ""

    @property
    def results_dir(self) -> Path:
        return self.data / "results"

    @property
    def prefect_home(self) -> Path:
        return self.data / "prefect"

    @property
    def gateway_db(self) -> str:
        return f"sqlite:///{self.data / 'gateway' / 'gateway.db'}"

    @property
    def prefect_env(self) -> Path:
        return self.etc / PREFECT_ENV.name

    @property
    def gateway_env(self) -> Path:
        return self.etc / "gateway.env"

    @property
    def worker_env(self) -> Path:
        """Written by ``scripts/install-worker``."""
        return self.etc / f"worker-{self.host}.env"

    @property
    def units(self) -> list[str]:
        """Every unit the box enables, in start order."""
        return [PREFECT_UNIT, worker_unit(self.host), GATEWAY_UNIT, RESULTS_UNIT]

    @property
    def unit_files(self) -> list[Path]:
        return [self.unit_dir / name for name in (PREFECT_UNIT, WORKER_TEMPLATE, WARM_TEMPLATE, GATEWAY_UNIT,
                                                  RESULTS_UNIT)]

    def database_url(self, password: str) -> str:
        return f"postgresql+asyncpg://{PG_ROLE}:{password}@127.0.0.1:5432/{PG_DATABASE}"

    def exe(self, name: str) -> str:
        return str(self.env_dir / "bin" / name)


def _netloc(address: str, port: int) -> str:
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


@dataclass(frozen=True)
class BoxFile:
    """A file the box writes; ``secrets`` are the values a dry run shows as ``********``."""

    path: Path
    text: str
    mode: int = 0o644
    secrets: tuple[str, ...] = ()

    def shown(self) -> str:
        text = self.text
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, MASK)
        return text


def _service_unit(description: str, user: str, exec_start: list[str], *, env_file: Path | None = None,
                  after: str = "network-online.target", extra: str = "") -> str:
    env_line = f"EnvironmentFile={env_file}\n" if env_file is not None else ""
    return f"""[Unit]
Description={description}
After={after}
Wants=network-online.target

[Service]
Type=simple
User={user}
{env_line}ExecStart={" ".join(shlex.quote(a) for a in exec_start)}
Restart=always
RestartSec=5
{extra}
[Install]
WantedBy=multi-user.target
"""


def prefect_server_files(box: Box, db_password: str = "") -> list[BoxFile]:
    """The Prefect server's unit and environment file (the database URL, with its password, in the latter)."""
    env = {PREFECT_HOME: str(box.prefect_home), PREFECT_UI_API_URL: box.prefect_ui_api,
           PREFECT_SERVER_ANALYTICS_ENABLED: "false", PREFECT_UI_ENABLED: "true"}
    if box.postgres:
        env[PREFECT_API_DATABASE_CONNECTION_URL] = box.database_url(db_password)
    unit = _service_unit(
        "roost's Prefect server (API and UI) for this box", box.user,
        [box.exe("prefect"), "server", "start", "--host", "0.0.0.0", "--port", str(box.ports.prefect)],
        env_file=box.prefect_env,
        after="network-online.target postgresql.service" if box.postgres else "network-online.target",
        extra="TimeoutStopSec=30\n")
    return [BoxFile(box.unit_dir / PREFECT_UNIT, unit),
            BoxFile(box.prefect_env, env_text(env), 0o600, (db_password,) if box.postgres else ())]


def gateway_files(box: Box, vllm_api_key: str) -> list[BoxFile]:
    """The gateway's system unit (``roost gateway serve`` on every address) and its environment file, which
    holds the upstream vLLM key the kept landings share (the Secret block ``roost-vllm-api-key`` holds it too)."""
    env = {VLLM_API_KEY: vllm_api_key, ROOST_GATEWAY_DB: box.gateway_db, ROOST_HOME: str(box.roost_home),
           PREFECT_API_URL: box.prefect_api}
    unit = unit_text(Path(box.exe("roost")), ["--host", "0.0.0.0", "--port", str(box.ports.gateway)],
                     box.gateway_env, user=box.user)
    return [BoxFile(box.unit_dir / GATEWAY_UNIT, unit),
            BoxFile(box.gateway_env, env_text(env), 0o600, (vllm_api_key,))]


def results_files(box: Box) -> list[BoxFile]:
    """The report server: the worker's reports, read-only, at the host block's ``results_url``."""
    unit = _service_unit(
        "roost report server (the charts and reports the Prefect UI's artifacts link to)", box.user,
        [box.exe("roost"), "results", "--dir", str(box.results_dir), "serve", "--bind", "0.0.0.0",
         "--port", str(box.ports.results)])
    return [BoxFile(box.unit_dir / RESULTS_UNIT, unit)]


def worker_command(box: Box, pool: str) -> list[str]:
    """``scripts/install-worker`` for this box (``ROOST_WORKER_ENV`` the box's environment, installed; the
    doctor already ran; the results where the report server reads them)."""
    return [str(box.repo / "scripts" / "install-worker"), "--host", box.host, "--pool", pool, "--skip-doctor",
            "--skip-env", "--results-dir", str(box.results_dir)]


def monitor_up_args(box: Box) -> list[str]:
    """``roost monitor up``'s arguments for this box (its gateway's port; the box's monitoring ports)."""
    m, p = box.monitoring, box.ports
    args = ["monitor", "up", "--host", box.host, "--gateway", f"127.0.0.1:{p.gateway}", "--listen", p.prometheus,
            "--alertmanager", p.alertmanager, "--grafana-port", str(p.grafana), "--json"]
    if not m.grafana:
        args.append("--no-grafana")
    for flag, image in (("--prometheus-image", m.prometheus_image), ("--alertmanager-image", m.alertmanager_image),
                        ("--grafana-image", m.grafana_image)):
        if image:
            args += [flag, image]
    return args
