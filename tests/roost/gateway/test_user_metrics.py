"""The gateway's per-user metric labels (``roost/gateway/metrics.py``), without a process: the first
``metrics_users`` distinct forwarded users labelled by name, later ones as ``other``, 0 labelling none;
hostile values (huge, control and format characters) sanitized, in the exposition too; key names kept;
``--metrics-users`` / ``ROOST_GATEWAY_METRICS_USERS`` read by ``roost gateway serve``."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from support.cli import run_roost

from roost.commands.gateway import _metrics_users
from roost.errors import UserError
from roost.gateway.config import GatewayConfig
from roost.gateway.keys import forwarded_user
from roost.gateway.metrics import (
    MAX_USER_LABEL,
    OTHER,
    USER_REQUESTS_TOTAL,
    GatewayMetrics,
    UserLabels,
    sanitized,
)


def test_past_the_limit_forwarded_users_are_folded_into_other() -> None:
    users = UserLabels(2)
    assert users.label("open-webui", "ana@example.org") == "ana@example.org"
    assert users.label("open-webui", "bo@example.org") == "bo@example.org"
    assert users.label("open-webui", "cy@example.org") == OTHER  # the third distinct user
    assert users.label("open-webui", "ana@example.org") == "ana@example.org"  # the first two keep theirs
    assert users.label("other-app", "bo@example.org") == "bo@example.org"  # per process, whichever key
    assert users.label("open-webui", "dee@example.org") == OTHER
    assert users.named == {"ana@example.org", "bo@example.org"}
    # a key without a forwarded user is its key's name (a user key's person, a device), never folded
    assert users.label("laptop", None) == "laptop" and users.label("ana", None) == "ana"


def test_zero_labels_no_forwarded_user() -> None:
    users = UserLabels(0)
    assert {users.label("open-webui", f"u{i}@example.org") for i in range(5)} == {OTHER}
    assert users.named == set() and users.label("laptop", None) == "laptop"
    with pytest.raises(ValueError):
        UserLabels(-1)


def test_hostile_values_are_sanitized_and_bounded() -> None:
    assert sanitized("\x1b[31mevil\x1b[0m\n@example.org\r\x00") == "[31mevil[0m@example.org"
    assert sanitized("a\u202eb\u200bc\u2028d\ud800") == "abcd"  # bidi override, zero width, separator, surrogate
    huge_a, huge_b = "a" * 100_000 + "x", "a" * 100_000 + "y"
    la, lb = sanitized(huge_a), sanitized(huge_b)
    assert len(la) == len(lb) == MAX_USER_LABEL and la != lb  # bounded, and two long values stay apart
    assert sanitized("\x00\x01\u200b") == ""
    users = UserLabels(10)
    assert users.label("open-webui", "\u200b\x7f") == OTHER  # nothing printable: no empty label, no slot taken
    assert users.named == set()
    # what the trusted header gives (forwarded_user already drops C0 controls) is bounded again here
    header = forwarded_user(("z" * 5000 + "\u202e@evil").encode())
    assert header is not None and len(users.label("open-webui", header)) == MAX_USER_LABEL


def test_the_exposition_carries_sanitized_users_and_folds_past_the_limit() -> None:
    metrics = GatewayMetrics(2)
    hostile = 'ev"il\\\n\u202e' + "q" * 500
    sent = [("open-webui", "app", hostile), ("open-webui", "app", "ana@example.org"),
            ("open-webui", "app", "bo@example.org"), ("open-webui", "app", "bo@example.org"),
            ("laptop", "device", None)]
    for key, kind, forwarded in sent:
        metrics.user_requests.labels(metrics.users.label(key, forwarded), kind, "m").inc()
    text = metrics.exposition().decode()
    counts = {s.labels["user"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
              if s.name == USER_REQUESTS_TOTAL}
    first = sanitized(hostile)
    assert counts == {first: 1.0, "ana@example.org": 1.0, OTHER: 2.0, "laptop": 1.0}
    assert first.startswith('ev"il\\q') and "\n" not in first and "\u202e" not in first
    assert "roost_gateway_user_labels 2.0" in text
    assert GatewayMetrics(0).users.limit == 0 and GatewayConfig().metrics_users == 50


def test_serve_reads_the_flag_then_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ROOST_GATEWAY_METRICS_USERS", raising=False)
    assert _metrics_users(None) == 50
    monkeypatch.setenv("ROOST_GATEWAY_METRICS_USERS", " 7 ")
    assert _metrics_users(None) == 7 and _metrics_users(0) == 0
    for bad in ("-1", "1e3", "many", "\u00b2", "1000001"):
        monkeypatch.setenv("ROOST_GATEWAY_METRICS_USERS", bad)
        with pytest.raises(UserError, match="ROOST_GATEWAY_METRICS_USERS"):
            _metrics_users(None)


def test_serve_gives_the_gateway_its_limit(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    """``roost gateway serve``'s flag and variable reach the gateway's metrics (the server is not run)."""
    import roost.gateway.server as server
    from roost.gateway.app import Gateway

    built: list[Gateway] = []
    monkeypatch.setattr(server, "serve", lambda gw, *_a, **_k: built.append(gw))
    args = ("gateway", "serve", "--no-registry", "--backend", "http://127.0.0.1:9", "--db", f"sqlite:///{tmp_path / 'u.db'}")
    monkeypatch.setenv("ROOST_GATEWAY_METRICS_USERS", "3")
    assert run_roost(capsys, monkeypatch, *args)[0] == 0
    assert run_roost(capsys, monkeypatch, *args, "--metrics-users", "0")[0] == 0
    assert [gw.metrics.users.limit for gw in built] == [3, 0]
    monkeypatch.setenv("ROOST_GATEWAY_METRICS_USERS", "lots")
    code, _, err = run_roost(capsys, monkeypatch, *args)
    assert code == 2 and "ROOST_GATEWAY_METRICS_USERS='lots'" in err and len(built) == 2
