"""Alert delivery as rendered (no Prometheus, no Alertmanager process: fast):

- ``alertmanager/alertmanager.yml`` passes Debian's ``amtool check-config`` for a webhook, a bot token
  and no Slack at all; the secret is in none of the rendered configs, the JSON or the state, only in
  its own file, 0644 inside the output folder made 0700;
- a landing's re-render (the state's options: receiver, no secret) keeps the secret file; turning
  Slack off removes it; Prometheus's config sends to the Alertmanager address;
- a SlackNotifier block becomes the receiver it describes; bad ``--route``/``--alertmanager`` values
  are one line and exit 2;
- Debian's Alertmanager, given an alert on its API, posts it with the bot token read from its file,
  then the resolved message;
- Alertmanager's answers are read as hostile: an oversized, silent, non-list or deeply nested answer
  is an AlertmanagerError, never a hang or a traceback.
"""

from __future__ import annotations

import contextlib
import json
import stat
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from pydantic import SecretStr
from support.alertmanager import AlertmanagerProcess, check_config, have_alertmanager
from support.cli import run_roost
from support.hostile_servers import SilentServer
from support.slack import HOOK_SECRET, TOKEN, hook
from support.slack_receiver import SlackReceiver
from support.wait import wait_for

from blocks.slack import SlackNotifier
from roost.commands.monitor import _held, slack_settings
from roost.monitor import alertmanager as am
from roost.monitor.alerting import RouteSettings, SlackSettings
from roost.monitor.render import RenderOptions, render
from roost.monitor.state import MonitorState
from roost.monitor.targets import Targets
from roost.net import free_port

pytestmark = pytest.mark.skipif(not have_alertmanager(), reason="Debian's prometheus-alertmanager (scripts/test "
                                "installs it)")

HOOK = f"https://hooks.slack.com/services/T0TEST/B0TEST/{HOOK_SECRET}"
NO_TARGETS = Targets(vllm=[], gateway="127.0.0.1:8080", floors=[])


def _slack(kind: str) -> SlackSettings:
    if kind == "slack-webhook":
        return SlackSettings("slack-webhook", secret=SecretStr(HOOK))
    return SlackSettings("slack-bot", "C0ROOSTALERTS", "https://slack.com/api/chat.postMessage", SecretStr(TOKEN))


@pytest.mark.parametrize("kind", ["slack-webhook", "slack-bot"])
def test_rendered_config_passes_amtool_and_the_secret_is_in_a_private_folder(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "files"
    out.mkdir(mode=0o755)
    options = RenderOptions(slack=_slack(kind), alertmanager="127.0.0.1:19093",
                            route=RouteSettings(group_wait="10s", group_interval="1m", repeat_interval="2h"))
    done = render(out, options, targets=NO_TARGETS)
    config = out / "alertmanager" / "alertmanager.yml"
    checked = check_config(config)
    assert checked.returncode == 0 and "SUCCESS" in checked.stdout, checked.stdout + checked.stderr
    secret_file = out / "alertmanager" / ("slack-webhook-url" if kind == "slack-webhook" else "slack-bot-token")
    assert secret_file.read_text().strip() == (HOOK if kind == "slack-webhook" else TOKEN)
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o644 and stat.S_IMODE(out.stat().st_mode) == 0o700
    doc = yaml.safe_load(config.read_text())
    assert doc["route"] == {"receiver": "slack", "group_by": ["alertname", "model_name", "instance"],
                            "group_wait": "10s", "group_interval": "1m", "repeat_interval": "2h"}
    (slack,) = doc["receivers"][0]["slack_configs"]
    assert slack["send_resolved"] is True and "RESOLVED" in slack["title"] and "FIRING" in slack["title"]
    assert ".Annotations.summary" in slack["text"] and ".Annotations.description" in slack["text"]
    if kind == "slack-bot":
        assert slack["channel"] == "C0ROOSTALERTS" and slack["api_url"] == "https://slack.com/api/chat.postMessage"
        assert slack["http_config"]["authorization"]["credentials_file"] == "slack-bot-token"
    else:
        assert slack["api_url_file"] == "slack-webhook-url"
    prom = yaml.safe_load((out / "prometheus" / "prometheus.yml").read_text())
    assert prom["alerting"] == {"alertmanagers": [{"static_configs": [{"targets": ["127.0.0.1:19093"]}]}]}
    state = MonitorState(out=str(out), alert_receiver=kind, slack_channel=options.slack.channel,  # type: ignore[arg-type]
                         slack_api_url=options.slack.api_url, route=options.route.differing(),
                         alertmanager="127.0.0.1:19093")
    for text in (config.read_text(), (out / "prometheus" / "prometheus.yml").read_text(), json.dumps(done.to_json()),
                 repr(done), repr(options), state.model_dump_json()):
        assert HOOK_SECRET not in text and TOKEN not in text
    assert done.to_json()["alert_receiver"] == kind

    # a landing's re-render (receiver from the state, no secret) keeps the file and the config
    again = render(out, state.options(), targets=NO_TARGETS)
    assert again.changed == [] and again.alert_receiver == kind and secret_file.is_file()
    # Slack turned off: a receiver that sends nothing, and the secret file goes
    off = render(out, RenderOptions(alertmanager="127.0.0.1:19093"), targets=NO_TARGETS)
    assert off.alert_receiver == "none" and not secret_file.exists()
    assert f"alertmanager/{secret_file.name}" in off.changed
    assert yaml.safe_load(config.read_text())["receivers"] == [{"name": "null"}]
    assert check_config(config).returncode == 0


def test_switching_receivers_leaves_only_the_new_secret(tmp_path: Path) -> None:
    out = tmp_path / "files"
    render(out, RenderOptions(slack=_slack("slack-webhook")), targets=NO_TARGETS)
    render(out, RenderOptions(slack=_slack("slack-bot")), targets=NO_TARGETS)
    assert sorted(p.name for p in (out / "alertmanager").iterdir()) == ["alertmanager.yml", "slack-bot-token"]


def test_a_slack_block_becomes_its_receiver() -> None:
    with_bot = slack_settings(SlackNotifier(bot_token=TOKEN, channel=" C0ROOSTALERTS ",  # type: ignore[arg-type]
                                            base_url="http://127.0.0.1:9/api/"))
    assert (with_bot.receiver, with_bot.channel, with_bot.api_url) == ("slack-bot", "C0ROOSTALERTS",
                                                                      "http://127.0.0.1:9/api/chat.postMessage")
    assert with_bot.secret is not None and with_bot.secret.get_secret_value() == TOKEN
    with_hook = slack_settings(hook(HOOK))
    assert with_hook.receiver == "slack-webhook" and with_hook.secret is not None
    assert with_hook.secret.get_secret_value() == HOOK and TOKEN not in repr(with_bot)


@pytest.mark.parametrize(("args", "expected"), [
    (["--route", "group_delay=1s"], "--route 'group_delay=1s': use NAME=VALUE"),
    (["--route", "group_interval=0s"], "give a duration above zero"),
    (["--route", "repeat_interval=soon"], "is not a Prometheus duration"),
    (["--alertmanager", "http://x:9093"], "--alertmanager 'http://x:9093': give HOST:PORT"),
])
def test_bad_alerting_flags_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str) -> None:
    monkeypatch.setenv("ROOST_MONITOR_STATE", str(tmp_path / "monitor.json"))
    code, _, err = run_roost(capsys, monkeypatch, "monitor", "render", "--out", str(tmp_path / "f"), "--no-slack",
                             "--no-sync", *args)
    assert code == 2 and err.count("\n") == 1 and expected in err, err


def test_render_says_where_alerts_go(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOST_MONITOR_STATE", str(tmp_path / "monitor.json"))
    monkeypatch.setenv("ROOST_GATEWAY_BACKENDS_DIR", str(tmp_path / "backends"))
    code, out, err = run_roost(capsys, monkeypatch, "monitor", "render", "--out", str(tmp_path / "f"), "--no-slack",
                               "--route", "group_wait=5s", "--alertmanager", "127.0.0.1:19094", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["alert_receiver"] == "none" and doc["alertmanager_target"] == "127.0.0.1:19094", err
    assert doc["alertmanager_reload"] == "none"
    state = json.loads((tmp_path / "monitor.json").read_text())
    assert state["route"] == {"group_wait": "5s"} and state["alert_receiver"] == "none"
    assert yaml.safe_load((tmp_path / "f" / "alertmanager" / "alertmanager.yml").read_text())["route"]["group_wait"] == "5s"


class _Hostile:
    """A fake Alertmanager answering ``/api/v2/alerts`` with ``body`` (what no real one would)."""

    def __init__(self, body: bytes) -> None:
        class H(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                with contextlib.suppress(OSError):  # the client stops reading at its limit
                    self.wfile.write(body)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()


@pytest.fixture
def hostile() -> Iterator[list[_Hostile]]:
    made: list[_Hostile] = []
    yield made
    for h in made:
        h.server.shutdown()
        h.server.server_close()


@pytest.mark.parametrize(("body", "expected"), [
    (b"[" + b'{"labels": {"alertname": "X"}},' * 300_000 + b"{}]", "more than 4 MiB"),
    (b'{"alerts": []}', "a dict, not a list"),
    (b"[" * 100_000 + b"]" * 100_000, "no usable JSON"),
    (b"<html>", "no usable JSON"),
])
def test_hostile_alertmanager_answers_are_errors(hostile: list[_Hostile], body: bytes, expected: str) -> None:
    server = _Hostile(body)
    hostile.append(server)
    with pytest.raises(am.AlertmanagerError, match=expected):
        am.AlertmanagerAPI(server.url, timeout_s=5).alerts()


def test_odd_alert_entries_are_cut_down(hostile: list[_Hostile]) -> None:
    entries = [None, 5, {"labels": {"alertname": "A" * 5000, "n": 1}, "status": "x", "receivers": "r"},
               {"labels": {"alertname": "B"}, "status": {"state": "active"}, "annotations": {"summary": "s"},
                "receivers": [{"name": "slack"}], "startsAt": "2026-01-01T00:00:00Z"}]
    server = _Hostile(json.dumps(entries).encode())
    hostile.append(server)
    alerts = am.AlertmanagerAPI(server.url, timeout_s=5).alerts()
    assert [(a.name[:3], len(a.name), a.state, a.labels.get("n")) for a in alerts] == [("AAA", am.MAX_TEXT, "", ""),
                                                                                     ("B", 1, "active", None)]
    assert alerts[1].receivers == ["slack"] and alerts[1].summary == "s"


def test_a_silent_alertmanager_is_an_error_within_the_timeout() -> None:
    with SilentServer() as silent:
        started = time.monotonic()
        with pytest.raises(am.AlertmanagerError, match="not answering"):
            am.AlertmanagerAPI(silent.url, timeout_s=1).alerts()
        assert time.monotonic() - started < 5


def test_status_reports_an_alertmanager_that_does_not_answer() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    assert _held(url) == {"url": url, "alerts": [], "error": f"Alertmanager at {url} is not answering (ConnectError)"}


def test_a_real_alertmanager_posts_with_the_bot_token_from_its_file(tmp_path: Path) -> None:
    """Debian's Alertmanager, given an alert on its API (no Prometheus: fast), posts ``chat.postMessage`` to the
    local Slack receiver with the token read from ``slack-bot-token`` (resolved against the config's folder)
    and the channel, then the resolved message."""
    slack = SlackReceiver(token=TOKEN)
    out = tmp_path / "files"
    settings = SlackSettings("slack-bot", "C0ROOSTALERTS", slack.api_url + "chat.postMessage", SecretStr(TOKEN))
    render(out, RenderOptions(slack=settings, route=RouteSettings("0s", "1s", "1h")), targets=NO_TARGETS)
    proc = AlertmanagerProcess(out / "alertmanager" / "alertmanager.yml", tmp_path / "am-data")
    try:
        proc.start()
        alert = {"labels": {"alertname": "VllmServerDown", "instance": "127.0.0.1:8004", "severity": "critical"},
                 "annotations": {"summary": "vLLM server 127.0.0.1:8004 is down", "description": "cannot scrape"}}
        httpx.post(f"{proc.url}/api/v2/alerts", json=[alert], timeout=10).raise_for_status()
        (firing,) = wait_for("the firing message", lambda: slack.calls("chat.postMessage"), timeout_s=20, every_s=0.1)
        assert firing.headers["Authorization"] == f"Bearer {TOKEN}" and slack.rejected == []
        body = firing.json()
        assert body["channel"] == "C0ROOSTALERTS"
        assert body["attachments"][0]["title"] == "[FIRING:1] VllmServerDown (127.0.0.1:8004)"
        assert "*FIRING* vLLM server 127.0.0.1:8004 is down\ncannot scrape" in body["attachments"][0]["text"]
        ended = {**alert, "endsAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        httpx.post(f"{proc.url}/api/v2/alerts", json=[ended], timeout=10).raise_for_status()
        calls = wait_for("the resolved message", lambda: slack.calls("chat.postMessage")[1:], timeout_s=20, every_s=0.1)
        assert calls[0].json()["attachments"][0]["title"] == "[RESOLVED] VllmServerDown (127.0.0.1:8004)"
    finally:
        proc.stop()
        slack.close()
    assert TOKEN not in proc.log()


def test_slack_set_up_by_a_sync_reaches_the_running_alertmanager(tmp_path: Path) -> None:
    """``roost monitor render``/``up`` with a roost-slack block render once, with its secret: the files that
    change are reported as changed, so a running Alertmanager is reloaded onto the Slack receiver."""
    from roost.monitor.sync import sync

    state = MonitorState(out=str(tmp_path / "files"))  # no Slack yet, no Prometheus
    assert sync(state) is not None
    proc = AlertmanagerProcess(tmp_path / "files" / "alertmanager" / "alertmanager.yml", tmp_path / "am-data")
    try:
        proc.start()
        state.alertmanager_url, state.alert_receiver = proc.url, "slack-webhook"
        result = sync(state, slack_secret=SecretStr(HOOK))
        assert result is not None and result.alertmanager_reload == "reloaded"
        assert {"alertmanager/alertmanager.yml", "alertmanager/slack-webhook-url"} <= set(result.rendered.changed)
        loaded = httpx.get(f"{proc.url}/api/v2/status", timeout=10).json()["config"]["original"]
        assert "api_url_file: slack-webhook-url" in loaded and HOOK_SECRET not in loaded
        again = sync(state)  # a landing's re-render: the receiver and its file kept, nothing to reload
        assert again is not None and again.alertmanager_reload == "unchanged"
    finally:
        proc.stop()
