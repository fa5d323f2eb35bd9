"""``roost install``: the whole serving box on this machine as system services (``scripts/install-spark``
installs roost's environment, then runs this as root). The box's parts: :mod:`roost.install.layout`.

``roost install [--host spark] [--postgres] [--address ADDR] [--dry-run] [--uninstall [--purge]] [--force]
[--json]`` and the ports, monitoring images and ``--no-grafana`` of ``--help``:

1. ``roost doctor --host H``'s checks (all but the Prefect API, which this installs); a failed one stops the
   install (exit 1) unless ``--force``;
2. the steps of :mod:`roost.install.box`, one line each on stderr (``created``, ``updated``, ``unchanged``);
3. the final screen on stdout: the Prefect UI, gateway, Grafana, Prometheus and report URLs, the admin key
   when it was made now (only then), the next command and ``roost doctor``'s verdict against the box.

JSON (``--json``): ``host, address, user, changed, steps[{name, status, detail}], prefect_ui, prefect_api,
gateway, admin_key (null unless made now), grafana, prometheus, alertmanager, results_url, pool, next,
doctor{ok, failed[]}``; ``--dry-run --json``: ``files[{path, mode, text}]`` (secrets masked), ``commands``,
``containers``; ``--uninstall --json``: ``steps``, ``purge``. Exit 0 done, 1 a check or a step failed, 2
unusable input (one line: a bad flag, not root, ``--purge`` without ``--uninstall``).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from roost.commands._common import echo_json, user_errors
from roost.errors import UserError
from roost.install.layout import Box, Monitoring, Ports
from roost.settings import PREFECT_API_URL, PREFECT_UI_API_URL, ROOST_HOME, set_value

PRODUCTION_PROFILE = {"spark": "ornith-1.5-35b-a3b-nvfp4"}
"""The profile the final screen's next command lands on a host (the embedded ``local`` elsewhere)."""


def _address_port(flag: str, value: str) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"{flag} {value!r}: give HOST:PORT, e.g. 127.0.0.1:9090")
    return value


def _box(host: str, postgres: bool, address: str, env: Path | None, ports: Ports, monitoring: Monitoring) -> Box:
    from roost.hosts import get_host
    from roost.install import system
    from roost.settings import environment

    get_host(host)  # an unknown host: one line, exit 2
    env_dir = (env or Path(sys.prefix)).absolute()
    if not (env_dir / "bin" / "roost").is_file() or not (env_dir / "bin" / "prefect").is_file():
        raise UserError(f"--env {env_dir}: no bin/roost and bin/prefect there; give roost's installed environment")
    repo = Path(__file__).resolve().parents[2]
    if not (repo / "scripts" / "install-worker").is_file():
        raise UserError(f"{repo} is not a roost checkout (no scripts/install-worker): run scripts/install-spark from one")
    user = system.service_user()
    if address and not re.fullmatch(r"[A-Za-z0-9.:-]{1,253}", address):
        raise UserError(f"--address {address[:60]!r}: give an IP address or a host name the tailnet resolves")
    home = environment().roost_home
    roost_home = Path(home).expanduser() if home else system.home_of(user) / ".cache" / "roost"
    return Box(host=host, user=user, address=address or _installed_address() or system.address(), env_dir=env_dir,
               repo=repo,
               roost_home=roost_home, postgres=postgres, ports=ports, monitoring=monitoring)


def _installed_address() -> str:
    """The address an earlier install chose (a second run keeps it even when ``hostname -I`` reorders)."""
    from urllib.parse import urlsplit

    from roost.install import system
    from roost.install.layout import PREFECT_ENV

    url = system.env_values(PREFECT_ENV).get(PREFECT_UI_API_URL, "")
    return (urlsplit(url).hostname or "") if url else ""


def install_command(
    host: Annotated[str, typer.Option("--host", help="The host profile this machine serves as (its work queue).")] = "spark",
    postgres: Annotated[bool, typer.Option("--postgres", help="The Prefect server's database in Debian's PostgreSQL "
                                           "(installed when missing) instead of SQLite.")] = False,
    address: Annotated[str, typer.Option("--address", help="The address browsers and clients reach this machine at "
                                         "(default: `tailscale ip -4`, else the first of `hostname -I`).")] = "",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print every unit, environment file (secrets masked), "
                                          "command and container; change nothing.")] = False,
    uninstall: Annotated[bool, typer.Option("--uninstall", help="Stop and remove the services, units and monitoring "
                                            "containers (settings, keys, databases and results stay).")] = False,
    purge: Annotated[bool, typer.Option("--purge", help="With --uninstall: remove the settings, keys, databases, "
                                        "results and monitoring data too.")] = False,
    force: Annotated[bool, typer.Option("--force", help="Install despite failed doctor checks.")] = False,
    demo: Annotated[bool, typer.Option("--demo", help="The environment has the demo extra (scripts/install-spark "
                                       "--demo installs it; it does for a CPU host by itself, whose land deployment "
                                       "runs the embedded local profile).")] = False,
    env: Annotated[Path | None, typer.Option("--env", help="roost's installed environment the services run from "
                                             "(default: this command's).")] = None,
    prefect_port: Annotated[int, typer.Option("--prefect-port", min=1, max=65535)] = 4200,
    gateway_port: Annotated[int, typer.Option("--gateway-port", min=1, max=65535)] = 8080,
    results_port: Annotated[int, typer.Option("--results-port", min=1, max=65535)] = 8765,
    prometheus_listen: Annotated[str, typer.Option("--prometheus-listen", help="Prometheus's HOST:PORT.")] = "127.0.0.1:9090",
    alertmanager: Annotated[str, typer.Option("--alertmanager", help="Alertmanager's HOST:PORT.")] = "127.0.0.1:9093",
    grafana_port: Annotated[int, typer.Option("--grafana-port", min=1, max=65535)] = 3000,
    no_grafana: Annotated[bool, typer.Option("--no-grafana", help="Do not start Grafana.")] = False,
    prometheus_image: Annotated[str, typer.Option("--prometheus-image", help="Default: the official image.")] = "",
    alertmanager_image: Annotated[str, typer.Option("--alertmanager-image", help="Default: the official image.")] = "",
    grafana_image: Annotated[str, typer.Option("--grafana-image", help="Default: the official image.")] = "",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    check_args: Annotated[bool, typer.Option("--check-args", hidden=True, help="Check the flags, print `demo` when "
                                             "the host needs the demo extra, and stop (scripts/install-spark, "
                                             "before it installs the environment).")] = False,
) -> None:
    """Install (or remove) the whole serving box on this machine: Prefect server, worker, gateway, report server
    and monitoring, as services that start at boot."""
    if purge and not uninstall:
        raise UserError("--purge goes with --uninstall: it removes the settings, keys, databases and results too")
    if uninstall and dry_run:
        raise UserError("--dry-run shows an install; --uninstall removes only what an install made")
    ports = Ports(prefect=prefect_port, gateway=gateway_port, results=results_port,
                  prometheus=_address_port("--prometheus-listen", prometheus_listen),
                  alertmanager=_address_port("--alertmanager", alertmanager), grafana=grafana_port)
    if len({prefect_port, gateway_port, results_port, grafana_port}) < 4:
        raise UserError("--prefect-port, --gateway-port, --results-port and --grafana-port must differ")
    monitoring = Monitoring(grafana=not no_grafana, prometheus_image=prometheus_image,
                            alertmanager_image=alertmanager_image, grafana_image=grafana_image)
    box = _box(host, postgres, address, env, ports, monitoring)
    if check_args:  # the flags only: the environment is installed (with the demo extra a CPU host needs) after this
        if needs_demo(box.host):
            typer.echo("demo")
        return
    if not uninstall:
        _check_demo(box, demo)
    if not dry_run and os.geteuid() != 0:
        raise UserError("installing system services needs root: run `sudo scripts/install-spark` "
                        "(--dry-run shows what it would do without)")
    set_value(ROOST_HOME, str(box.roost_home))  # the monitoring state and the doctor's disk are the user's
    if dry_run:
        from roost.commands.install_show import dry_run as show

        show(box, as_json=as_json)
        return
    if uninstall:
        _uninstall(box, purge=purge, as_json=as_json)
        return
    from roost.install.box import require_systemd

    require_systemd()
    _preflight(box, force=force, quiet=as_json)
    _install(box, as_json=as_json)


def needs_demo(host: str) -> bool:
    """A CPU host lands the embedded ``local`` profile, whose model and Hub mirror come with the demo extra."""
    from roost.hosts import get_host

    return get_host(host).accelerator == "cpu"


def _check_demo(box: Box, demo: bool) -> None:
    has_demo = (box.env_dir / "bin" / "olah-cli").exists() or any(box.env_dir.glob("lib/python*/site-packages/olah"))
    if needs_demo(box.host) and not has_demo:
        raise UserError(f"host {box.host} lands the embedded local profile (a tiny model from a local Hub mirror), "
                        f"which needs the demo extra: run scripts/install-spark --host {box.host}, which installs it")
    if demo and not has_demo:
        raise UserError(f"--demo: {box.env_dir} has no demo extra; scripts/install-spark --demo installs it")
    if has_demo and needs_demo(box.host) and shutil.which("git") is None:
        raise UserError("the local profile's Hub mirror publishes its demo model with git, which is not installed "
                        "here: apt-get install git")


def _step_line(step: Any) -> None:
    typer.echo(f"{step.status:<10} {step.name:<16} {step.detail}", err=True)


def _uninstall(box: Box, *, purge: bool, as_json: bool) -> None:
    from roost.install.box import uninstall

    outcome = uninstall(box, _step_line, purge=purge)
    if as_json:
        echo_json({"steps": [vars(s) for s in outcome.steps], "purge": purge})
        return
    typer.echo("roost box removed: no roost service runs here now" + ("" if purge else
               f"; kept {box.etc} and {box.data} (--uninstall --purge removes them)"))


def _doctor(box: Box, with_prefect: bool) -> tuple[bool, list[str], Any]:
    from roost.commands.doctor import gather
    from roost.doctor import run_checks
    from roost.hosts import get_host

    profile = get_host(box.host)
    if with_prefect:
        set_value(PREFECT_API_URL, box.prefect_api)
    else:
        set_value(PREFECT_API_URL, None)
    report = run_checks(profile, gather(profile, None))
    checks = [c for c in report.checks if with_prefect or c.name != "prefect-api"]
    failed = [c.name for c in checks if c.status == "fail"]
    return not failed, failed, checks


def _preflight(box: Box, *, force: bool, quiet: bool) -> None:
    from roost.errors import RoostError
    from roost.install import system

    if box.user != "root" and box.user not in system.docker_group_members():
        raise RoostError(f"{box.user} (the services' user) is not in the docker group, so its worker and "
                         f"monitoring cannot reach Docker: sudo usermod -aG docker {box.user}, then run again")
    ok, failed, checks = _doctor(box, with_prefect=False)
    if ok:
        if not quiet:
            typer.echo(f"doctor: host {box.host} ready (the Prefect API is checked once installed)", err=True)
        return
    why = "; ".join(f"{c.name}: {c.detail}" for c in checks if c.status == "fail")
    if not force:
        raise RoostError(f"doctor: {len(failed)} check(s) failed ({why}): fix them and run again (roost doctor "
                         f"--host {box.host} shows each fix; --force installs anyway)")
    typer.echo(f"--force: installing despite failed checks ({why})", err=True)


def next_command(box: Box) -> str:
    profile = PRODUCTION_PROFILE.get(box.host, "local")
    return (f"in the Prefect UI, Deployments > land/{box.host} > Run; or from a shell: "
            f"PREFECT_API_URL={box.prefect_ui_api} roost run --profile {profile} --host {box.host} --keep-serving")


def _install(box: Box, *, as_json: bool) -> None:
    from blocks.box import PrefectBlocks
    from roost.install.box import Outcome, install

    outcome = Outcome()
    try:
        install(box, PrefectBlocks(), _step_line, outcome)
    except BaseException:
        if outcome.admin_key:  # made before the step that failed: shown now or never
            typer.echo(f"the gateway's admin key (shown only now: keep it): {outcome.admin_key}")
        raise
    ok, failed, _ = _doctor(box, with_prefect=True)
    doc = {"host": box.host, "address": box.address, "user": box.user, "changed": outcome.changed,
           "steps": [vars(s) for s in outcome.steps], "prefect_ui": box.prefect_ui, "prefect_api": box.prefect_ui_api,
           "gateway": box.gateway_url, "admin_key": outcome.admin_key, "grafana": box.grafana_url,
           "prometheus": f"http://{box.ports.prometheus}", "alertmanager": f"http://{box.ports.alertmanager}",
           "results_url": box.results_url, "pool": outcome.pool, "next": next_command(box),
           "doctor": {"ok": ok, "failed": failed}}
    if as_json:
        echo_json(doc)
    else:
        _screen(box, doc)
    if not ok:
        raise typer.Exit(1)


def _screen(box: Box, doc: dict[str, Any]) -> None:
    key = doc["admin_key"]
    lines = [
        f"roost box on {box.host} ({box.address}): " + ("installed and running" if doc["changed"]
                                                       else "nothing changed: every service was already as installed"),
        f"  Prefect UI   {box.prefect_ui}   (PREFECT_API_URL={box.prefect_ui_api})",
        f"  gateway      {box.gateway_url}   (OpenAI-compatible; a key per user: roost gateway key add NAME)",
        f"  admin key    {key}   (shown only now: keep it)" if key else
        "  admin key    made by the first install, shown then only (roost gateway key add NAME for another)",
        f"  Grafana      {box.grafana_url}   (first login admin / admin, then a password of your own)"
        if box.grafana_url else "  Grafana      not started (--no-grafana)",
        f"  Prometheus   {doc['prometheus']}   Alertmanager {doc['alertmanager']}",
        f"  reports      {box.results_url}",
        f"next: {doc['next']}",
        "doctor: " + (f"host {box.host} ready (every check ok or not applicable)" if doc["doctor"]["ok"] else
                      f"{len(doc['doctor']['failed'])} check(s) failed ({', '.join(doc['doctor']['failed'])}): "
                      f"roost doctor --host {box.host}"),
    ]
    typer.echo("\n".join(lines))


def register(app: typer.Typer) -> None:
    app.command("install", help="Install the whole serving box on this machine as system services: Prefect server, "
                "worker, gateway, report server, monitoring (sudo scripts/install-spark runs it; --dry-run shows "
                "everything, --uninstall removes it).")(user_errors(install_command))
