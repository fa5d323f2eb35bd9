"""What ``roost monitor render`` writes, without a Prometheus: the dashboard against Grafana's own
schema models, the targets from the landing registry, the decode floor from a landing's record,
atomic and change-only writes, and the CLI's one-line refusals."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.cli import run_roost as roost
from support.errors import assert_one_line_error

from roost.gateway import registry
from roost.monitor import queries as q
from roost.monitor.dashboard import DATASOURCE_UID, PANELS, TITLE, dashboard, panel_queries
from roost.monitor.render import DASHBOARD_FILE, DATASOURCES_FILE, RenderOptions, render
from roost.monitor.sync import single_file_mount
from roost.monitor.targets import decode_floor
from roost.records import BenchPoint, Distribution, RunMeta, RunRecord


@pytest.fixture
def reg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    d = tmp_path / "backends"
    monkeypatch.setenv("ROOST_GATEWAY_BACKENDS_DIR", str(d))
    monkeypatch.setenv("ROOST_MONITOR_STATE", str(tmp_path / "monitor.json"))
    yield d


def test_dashboard_is_grafanas_schema_and_carries_every_panel_the_issue_names() -> None:
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import Dashboard

    doc = dashboard()
    # Grafana's schema models (generated from its dashboard kind) read the document back unchanged:
    # no field unknown to the schema, none of the wrong type
    again = json.loads(json.dumps(Dashboard.from_json(doc), cls=JSONEncoder))
    assert again == doc
    assert doc["title"] == TITLE and doc["schemaVersion"] >= 39
    titles = [p["title"] for p in doc["panels"] if p["type"] != "row"]
    assert titles == [p.title for p in PANELS]
    for needed in ("Throughput", "Time to first token", "Inter-token latency", "Running and waiting requests",
                   "KV cache usage", "Draft acceptance", "Tokens per key", "Tokens per kind", "Requests per user",
                   "Tokens per user", "Time to first token per user", "Requests per device", "Tokens per device",
                   "Time to first token per device"):
        assert needed in titles
    assert {p["type"] for p in doc["panels"]} == {"row", "timeseries"}
    assert [p["title"] for p in doc["panels"] if p["type"] == "row"] == ["Serving", "Gateway", "Users and devices"]
    for p in doc["panels"]:
        if p["type"] != "row":
            assert p["datasource"]["uid"] == DATASOURCE_UID
    (var,) = doc["templating"]["list"]
    assert var["name"] == "model_name" and var["includeAll"] and var["allValue"] == ".*"
    # vLLM panels key on model_name through the variable: a new model appears with no change
    for title, expr in panel_queries(doc):
        if "vllm:" in expr:
            assert q.MODEL in expr, (title, expr)


def test_render_targets_floors_and_provisioning(reg: Path, tmp_path: Path) -> None:
    registry.register("http://127.0.0.1:8004/v1", "ornith", "spark", "run-a", 52.5, 20)
    registry.register("http://127.0.0.1:8002", "qwen", "other-spark", "run-b")
    out = tmp_path / "files"
    done = render(out, RenderOptions(host="spark", gateway="127.0.0.1:8080"))
    assert [t.address for t in done.targets.vllm] == ["127.0.0.1:8004"]
    config = yaml.safe_load((out / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert set(jobs) == {"vllm", "llm-gateway"}
    assert jobs["vllm"]["static_configs"] == [{"targets": ["127.0.0.1:8004"],
                                              "labels": {"roost_host": "spark", "landing_run_id": "run-a"}}]
    rules = yaml.safe_load((out / "prometheus" / "rules.yml").read_text())["groups"][0]["rules"]
    (decode,) = [r for r in rules if r["alert"] == "DecodeSpeedDrop"]
    assert 'model_name="ornith"' in decode["expr"] and f"< {52.5 * 0.75:.6g}" in decode["expr"]
    ds = yaml.safe_load((out / DATASOURCES_FILE).read_text())["datasources"][0]
    assert ds["uid"] == DATASOURCE_UID and ds["type"] == "prometheus"
    assert json.loads((out / DASHBOARD_FILE).read_text())["title"] == TITLE
    everything = render(out, RenderOptions())  # all hosts now
    assert [t.address for t in everything.targets.vllm] == ["127.0.0.1:8002", "127.0.0.1:8004"]


def test_unchanged_files_are_left_alone_and_changes_land_as_new_files(reg: Path, tmp_path: Path) -> None:
    out = tmp_path / "files"
    first = render(out, RenderOptions())
    assert len(first.changed) == 6  # prometheus (2), grafana (3), alertmanager (1)
    config = out / "prometheus" / "prometheus.yml"
    inode = config.stat().st_ino
    assert render(out, RenderOptions()).changed == []
    assert config.stat().st_ino == inode
    registry.register("http://127.0.0.1:8004", "ornith", "spark", "run-a")
    again = render(out, RenderOptions())
    assert again.changed == ["prometheus/prometheus.yml"]  # no floor: the rules did not change
    # written whole under a new inode (temporary file renamed): why a single-file bind mount goes stale
    assert config.stat().st_ino != inode
    assert not [p for p in config.parent.iterdir() if p.name.startswith(".")]


def test_decode_floor_is_the_slowest_rate_at_the_highest_measured_concurrency() -> None:
    meta = RunMeta(run_id="r1", roost_version="0", profile="p", repo_id="a/b", revision="main", commit="c",
                   served_model_name="tiny", host="spark", backend="docker")

    def point(conc: int, tpot: float | None, errors: int = 0) -> BenchPoint:
        return BenchPoint(kind="concurrency", prompt_tokens=128, output_tokens=64, concurrency=conc, requests=4,
                          errors=errors, tpot_s=Distribution(count=4, mean=tpot))

    rec = RunRecord(meta=meta, points=[point(1, 0.01), point(16, 0.02), point(16, 0.025), point(32, 0.05, errors=4)])
    floor = decode_floor(rec)
    assert floor is not None
    assert (floor.concurrency, round(floor.tok_s, 6), floor.model_name, floor.run_id) == (16, 40.0, "tiny", "r1")
    assert decode_floor(RunRecord(meta=meta, points=[point(1, None)])) is None


def test_direct_traffic_marks_and_clears_the_registration(reg: Path) -> None:
    registry.register("http://127.0.0.1:8004", "ornith", "spark", "run-a")
    with registry.direct_traffic("http://127.0.0.1:8004") as marked:
        assert marked
        (entry,) = registry.registered()
        assert entry.direct_until > 0
    (entry,) = registry.registered()
    assert entry.direct_until == 0.0
    with registry.direct_traffic("http://127.0.0.1:9999") as marked:
        assert not marked


def test_single_file_mount_is_told_from_a_folder_mount(tmp_path: Path) -> None:
    f = tmp_path / "prometheus.yml"
    f.write_text("x")

    class C:
        def __init__(self, source: Path, dest: str) -> None:
            self.attrs = {"Mounts": [{"Type": "bind", "Source": str(source), "Destination": dest}]}

    assert single_file_mount(C(f, "/etc/prometheus/prometheus.yml"))
    assert not single_file_mount(C(tmp_path, "/etc/prometheus"))


@pytest.mark.parametrize("args, needle", [
    (["render", "--rule", "nope=1"], "--rule 'nope=1'"),
    (["render", "--rule", "kv_threshold=1.5"], "kv_threshold"),
    (["render", "--rule", "bypass_window=5 minutes"], "Prometheus duration"),
    (["render", "--scrape-interval", "fast"], "--scrape-interval"),
    (["render", "--gateway", "localhost"], "--gateway"),
    (["render", "--prometheus", "localhost:9090"], "--prometheus"),
    (["render", "--outt", "x"], "--outt"),
    (["up", "--mount", "bind"], "--mount"),
    (["status", "--prometheus", "nowhere"], "--prometheus"),
    (["sync"], "no monitoring set up"),
    (["down"], "has not started"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str, reg: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    code, _, err = roost(capsys, monkeypatch, "monitor", *args)
    assert_one_line_error(code, err, needle)


def test_render_into_a_file_is_refused(reg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    f = tmp_path / "file"
    f.write_text("")
    code, _, err = roost(capsys, monkeypatch, "monitor", "render", "--out", str(f))
    assert code == 2 and err.count("\n") == 1 and "is a file" in err


def test_render_command_records_the_folder_for_landings(reg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from roost.monitor.state import load_state

    registry.register("http://127.0.0.1:8004", "ornith", "spark", "run-a")
    code, out, err = roost(capsys, monkeypatch, "monitor", "render", "--out", str(tmp_path / "m"), "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["vllm_targets"] == ["127.0.0.1:8004"] and doc["reload"] == "none" and len(doc["changed"]) == 6
    state = load_state()
    assert state is not None and state.out == str((tmp_path / "m").resolve())
    code, out, _ = roost(capsys, monkeypatch, "monitor", "render", "--no-sync", "--out", str(tmp_path / "other"))
    assert code == 0 and "1 vLLM target(s) 127.0.0.1:8004" in out
    state = load_state()
    assert state is not None and state.out == str((tmp_path / "m").resolve())  # --no-sync leaves the record alone


# --- the gateway's metrics token -----------------------------------------------------------------

TOKEN = "mt-" + "7f3a9c" * 8


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}


def test_a_metrics_token_goes_to_its_own_file_never_into_the_config(reg: Path, tmp_path: Path) -> None:
    from pydantic import SecretStr

    from roost.monitor.scrape import GATEWAY_TOKEN_FILE

    out = tmp_path / "files"
    out.mkdir(mode=0o755)
    token_rel = f"prometheus/{GATEWAY_TOKEN_FILE}"
    done = render(out, RenderOptions(gateway_token=SecretStr(TOKEN)))
    assert token_rel in done.changed and len(done.changed) == 7
    assert done.to_json()["gateway_token"] is True and TOKEN not in json.dumps(done.to_json()) + repr(done)
    jobs = {j["job_name"]: j for j in yaml.safe_load((out / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]}
    # relative: Prometheus reads it beside prometheus.yml (/etc/prometheus in roost monitor up's container)
    assert jobs["llm-gateway"]["authorization"] == {"type": "Bearer", "credentials_file": GATEWAY_TOKEN_FILE}
    assert "authorization" not in jobs["vllm"]
    token_file = out / token_rel
    assert token_file.read_text() == TOKEN + "\n"
    # readable by the container's user (prom/prometheus runs as nobody) inside a folder only its owner enters
    assert token_file.stat().st_mode & 0o777 == 0o644 and out.stat().st_mode & 0o777 == 0o700
    assert [rel for rel, data in _files(out).items() if TOKEN.encode() in data] == [token_rel]
    assert not [p for p in (out / "prometheus").iterdir() if p.name.startswith(".")]
    assert render(out, RenderOptions(gateway_token=SecretStr(TOKEN))).changed == []
    # a landing's re-render (no token in its environment) keeps the file and the authorization
    kept = render(out, RenderOptions(keep_gateway_token=True))
    assert kept.changed == [] and kept.gateway_token and token_file.read_text() == TOKEN + "\n"
    rotated = render(out, RenderOptions(gateway_token=SecretStr(TOKEN[::-1])))
    assert rotated.changed == [token_rel] and token_file.read_text() == TOKEN[::-1] + "\n"
    # no token any more: the authorization goes, and the file after the config that read it
    dropped = render(out, RenderOptions())
    assert dropped.changed == ["prometheus/prometheus.yml", token_rel] and not dropped.gateway_token
    assert not token_file.exists()
    jobs = {j["job_name"]: j for j in yaml.safe_load((out / "prometheus" / "prometheus.yml").read_text())["scrape_configs"]}
    assert "authorization" not in jobs["llm-gateway"]


def test_render_command_takes_the_token_from_the_environment_and_landings_keep_it(
        reg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from roost.monitor.state import load_state, state_path
    from roost.monitor.sync import sync

    out = tmp_path / "m"
    token_file = out / "prometheus" / "gateway-metrics-token"
    monkeypatch.setenv("ROOST_GATEWAY_METRICS_TOKEN", TOKEN)
    code, stdout, err = roost(capsys, monkeypatch, "monitor", "render", "--out", str(out), "--json")
    assert code == 0, err
    assert json.loads(stdout)["gateway_token"] is True and TOKEN not in stdout + err
    state = load_state()
    assert state is not None and state.gateway_token and TOKEN not in state_path().read_text()
    # a landing: no token in its environment, a new server kept
    monkeypatch.delenv("ROOST_GATEWAY_METRICS_TOKEN")
    registry.register("http://127.0.0.1:8004", "ornith", "spark", "run-a")
    synced = sync()
    assert synced is not None and synced.rendered.gateway_token
    assert [t.address for t in synced.rendered.targets.vllm] == ["127.0.0.1:8004"]
    config = yaml.safe_load((out / "prometheus" / "prometheus.yml").read_text())
    assert [j.get("authorization") for j in config["scrape_configs"]] == [
        None, {"type": "Bearer", "credentials_file": "gateway-metrics-token"}]
    assert token_file.read_text() == TOKEN + "\n"
    # a user rendering again without it: the gateway is scraped without a token
    code, stdout, err = roost(capsys, monkeypatch, "monitor", "render", "--out", str(out))
    assert code == 0 and "metrics token" not in stdout, err
    state = load_state()
    assert state is not None and not state.gateway_token and not token_file.exists()
    assert not [r for r in caplog.records if TOKEN in r.getMessage()]


def test_render_refuses_an_unusable_token_naming_the_variable_only(
        reg: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOST_GATEWAY_METRICS_TOKEN", "has a space in it")
    code, stdout, err = roost(capsys, monkeypatch, "monitor", "render", "--out", str(tmp_path / "m"))
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "ROOST_GATEWAY_METRICS_TOKEN" in lines[0], err
    assert "has a space" not in stdout + err and not (tmp_path / "m").exists()


def test_a_single_file_mount_mounts_the_token_file_too(reg: Path, tmp_path: Path) -> None:
    from pydantic import SecretStr

    from roost.monitor.containers import prometheus_volumes

    out = tmp_path / "files"
    render(out, RenderOptions())
    assert sorted(v["bind"] for v in prometheus_volumes(out, "file").values()) == [
        "/etc/prometheus/prometheus.yml", "/etc/prometheus/rules.yml"]
    render(out, RenderOptions(gateway_token=SecretStr(TOKEN)))
    volumes = prometheus_volumes(out, "file")
    assert volumes[str((out / "prometheus" / "gateway-metrics-token").resolve())] == {
        "bind": "/etc/prometheus/gateway-metrics-token", "mode": "ro"}
    assert list(prometheus_volumes(out, "dir").values()) == [{"bind": "/etc/prometheus", "mode": "ro"}]
