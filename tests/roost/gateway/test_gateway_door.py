"""roost's own way through the gateway (``roost.gateway.door``, ``roost.gateway.bench_key``) against a real
``roost gateway serve`` in front of the synthetic server: the run's key is issued in the gateway's
database and works at once, a sweep through it is metered exactly as the benchmark counted it (prompts
sized and ``/metrics`` read at the server itself), the key is revoked at the end (refused within the
key refresh), a crashed run's key is replaced by the next run's, and every reason there is no door is
one line: no gateway, a gateway on another database, a model it does not route."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from bench_synthetic import Synthetic
from support.gateway import UPSTREAM_KEY, GatewayProcess, usage_rows
from support.wait import poll

from roost.bench.gateway_hop import counted_usage, hop_points, summarize
from roost.bench.settings import BenchSettings
from roost.bench.sweep import run_benchmark
from roost.errors import UserError
from roost.gateway import bench_key
from roost.gateway.door import Door, close_door, gateway_url, open_door
from roost.net import free_port

pytestmark = pytest.mark.slow

SETTINGS = BenchSettings.model_validate({"prompt_lengths": [64], "output_tokens": 16, "concurrency": [2],
                                         "repeats": 1, "warmup": 1, "metrics_poll_s": 0.2, "requests_per_user": 1,
                                         "concurrency_prompt_tokens": 64})


@pytest.fixture
def on_gateway_db(gateway: GatewayProcess, monkeypatch: pytest.MonkeyPatch) -> Iterator[GatewayProcess]:
    monkeypatch.setenv("ROOST_GATEWAY_DB", gateway.db_url)
    monkeypatch.delenv("ROOST_GATEWAY_URL", raising=False)
    yield gateway


def _refused(gw: GatewayProcess, key: str) -> bool:
    answer = httpx.get(f"{gw.url}/v1/models", headers={"Authorization": f"Bearer {key}"}, timeout=10)
    return answer.status_code == 401


def test_a_sweep_through_the_door_is_metered_as_the_benchmark_counted_it(
        on_gateway_db: GatewayProcess, backend: Synthetic) -> None:
    gw = on_gateway_db
    backend.control(tokens_per_s=400.0, ttft_s=0.01, faults=[], reset_stats=True)
    door = open_door(gw.url, "cpu", backend.model, wait_s=10)
    assert isinstance(door, Door), door
    assert door.key_name == "roost-benchmark-cpu" and door.display == gw.url
    assert door.key.get_secret_value() not in repr(door)  # the key never shows
    direct = run_benchmark(backend.base_url, backend.model, SETTINGS, api_key=backend.api_key)
    via = run_benchmark(door.url, backend.model, SETTINGS, api_key=door.key.get_secret_value(),
                        server_url=backend.base_url, server_key=backend.api_key)
    assert direct.status == via.status == "completed", (direct.errors, via.errors)
    # prompts sized at the server's /tokenize (the gateway has none) and its /metrics read directly
    assert [p.prompt_tokens for p in via.points] == [p.prompt_tokens for p in direct.points] == [64, 64]
    assert all(p.metrics_delta.get("generation_tokens") == p.requests * 16 for p in via.points)
    counted = counted_usage(via.request_rows())
    assert counted.requests == 1 + 1 + 2  # warm-up, the prompt point, two users at concurrency 2
    assert counted.completion_tokens == 16 * counted.requests
    metered = bench_key.metered(gw.db_url, door.key_name, since=door.opened_at - 1, requests=counted.requests)
    assert metered == counted
    rows = [r for r in usage_rows(gw.db_url) if r["key_name"] == door.key_name]
    assert {(r["kind"], r["status"]) for r in rows} == {("app", "ok")}
    hops = hop_points(direct.points, via.points)
    assert [(h.kind, h.prompt_tokens, h.concurrency) for h in hops] == [("prompt_length", 64, 1), ("concurrency", 64, 2)]
    assert summarize(hops).points == 2 and all(h.throughput_ratio is not None for h in hops)
    close_door(door)
    assert poll(lambda: _refused(gw, door.key.get_secret_value()), timeout_s=10), "the revoked key still works"


def test_a_key_left_by_a_crashed_run_is_replaced_by_the_next_runs(on_gateway_db: GatewayProcess,
                                                                  backend: Synthetic) -> None:
    gw = on_gateway_db
    crashed = open_door(gw.url, "crashy", backend.model, wait_s=10)
    assert isinstance(crashed, Door)  # never closed
    again = open_door(gw.url, "crashy", backend.model, wait_s=10)
    assert isinstance(again, Door) and again.key_name == crashed.key_name
    assert poll(lambda: _refused(gw, crashed.key.get_secret_value()), timeout_s=10), "the crashed run's key works"
    assert not _refused(gw, again.key.get_secret_value())
    close_door(again)


def test_every_reason_for_no_door_is_one_line(on_gateway_db: GatewayProcess, backend: Synthetic,
                                              monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    gw = on_gateway_db
    nobody = f"http://127.0.0.1:{free_port()}"
    why = open_door(nobody, "cpu", backend.model, wait_s=1)
    assert isinstance(why, str) and why.startswith(f"no gateway answers at {nobody}") and "\n" not in why
    unknown = open_door(gw.url, "cpu", "not-served", wait_s=1)
    assert isinstance(unknown, str) and "does not route 'not-served'" in unknown
    monkeypatch.setenv("ROOST_GATEWAY_DB", f"sqlite:///{tmp_path / 'elsewhere.db'}")
    other_db = open_door(gw.url, "cpu", backend.model, wait_s=1)
    assert isinstance(other_db, str) and "different databases" in other_db and "ROOST_GATEWAY_DB" in other_db
    monkeypatch.setenv("ROOST_GATEWAY_URL", "")  # the worker says: no gateway
    assert open_door(gw.url, "cpu", backend.model) == ("no gateway configured (gateway_url on the host profile, "
                                                        "or ROOST_GATEWAY_URL)")
    monkeypatch.setenv("ROOST_GATEWAY_URL", "ftp://x")
    with pytest.raises(UserError, match=r"^ROOST_GATEWAY_URL 'ftp://x': give the gateway's URL"):
        gateway_url("")
    assert open_door(gw.url, "cpu", backend.model) == ("ROOST_GATEWAY_URL 'ftp://x': give the gateway's URL, "
                                                        "e.g. http://127.0.0.1:8080")
    assert UPSTREAM_KEY not in why + unknown + other_db
