"""The ``rebenchmark`` flow against a real running vLLM server (the session's) on a host that
exists only as a ``roost-host`` block document, with a profile that exists only as a
``model-profile`` block document."""

from __future__ import annotations

import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.samples import check_decode_records

from roost.errors import UserError
from roost.hosts import CPU
from roost.profiles import LOCAL
from roost.records import RunMeta, RunRecord, StageTiming, new_run_id

pytestmark = pytest.mark.slow

HOST = "test-session"  # the host name the session's vllm_server fixture records its state under
PROFILE = "rebench-tiny"


@pytest.fixture(scope="module")
def blocks(prefect_api: str) -> Iterator[None]:
    from blocks.hosts import HostBlock
    from blocks.profiles import ModelProfileBlock

    HostBlock.from_profile(CPU.model_copy(update={"name": HOST})).save(HOST, overwrite=True)
    quick = {"prompt_lengths": [128], "output_tokens": 16, "concurrency": [2], "repeats": 1, "warmup": 1}
    ModelProfileBlock.from_profile(LOCAL.model_copy(update={"name": PROFILE, "host": HOST, "bench": quick})).save(
        PROFILE, overwrite=True)
    yield
    from prefect.client.orchestration import get_client

    with get_client(sync_client=True) as client:
        for slug, name in (("roost-host", HOST), ("model-profile", PROFILE)):
            doc = client.read_block_document_by_name(name=name, block_type_slug=slug)
            assert doc.id is not None
            client.delete_block_document(doc.id)


@pytest.fixture
def earlier_land(vllm_server: Any) -> RunRecord:
    """A stored land run of this model on this host, from before the server started (real store)."""
    from roost.store import append_run

    rec = RunRecord(meta=RunMeta(
        started_at=dt.datetime.now(dt.UTC) - dt.timedelta(days=1), roost_version="0", profile=PROFILE,
        repo_id=LOCAL.repo_id, revision="main", commit="c0ffee" * 6 + "abcd", served_model_name="tiny", host=HOST,
        backend="process", vllm_args=["--dtype", "bfloat16"]), plan={"kv_cache_tokens": 1234},
        decode_ceiling_tok_s=99.0)
    append_run(rec)
    return rec


@pytest.fixture
def earlier_rebenchmark(earlier_land: RunRecord, vllm_server: Any) -> RunRecord:
    """A stored rebenchmark of the same server after the land run (as a nightly run leaves), one that found
    no land run to inherit from: no commit. It started nothing, so it is not the server's identity."""
    from roost.store import append_run

    rec = RunRecord(meta=earlier_land.meta.model_copy(update={
        "run_id": new_run_id(), "started_at": dt.datetime.now(dt.UTC), "commit": "",
        "vllm_args": []}), stages=[StageTiming(stage="serve", seconds=0.0, status="skipped", note="already serving")])
    append_run(rec)
    return rec


def test_benchmarks_what_the_host_serves(blocks: None, vllm_server: Any, earlier_land: RunRecord,
                                         earlier_rebenchmark: RunRecord, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
    from flows.rebenchmark import rebenchmark
    from roost.gateway import registry

    monkeypatch.setenv("VLLM_API_KEY", vllm_server.api_key)
    # kept and registered for the gateway: while roost measures it directly, the registration says so
    # (the gateway exports it and the bypass alert stays quiet)
    monkeypatch.setenv("ROOST_GATEWAY_BACKENDS_DIR", str(tmp_path / "backends"))
    registry.register(vllm_server.base_url, "tiny", HOST, earlier_land.meta.run_id)
    marks: list[float] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            marks.extend(r.direct_until for r in registry.registered())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        record = rebenchmark(host=HOST, notify=False)
    finally:
        done.set()
        watcher.join()
    assert max(marks) > time.time()  # marked during the run ...
    assert [r.direct_until for r in registry.registered()] == [0.0]  # ... and cleared after it
    assert record["status"] == "completed"
    assert record["meta"]["profile"] == PROFILE  # found by served model name, the host's own profile first
    assert record["meta"]["served_model_name"] == "tiny" and record["meta"]["host"] == HOST
    assert record["meta"]["vllm_version"] == "0.32.0"  # asked of the running server
    # the identity of the land run that started the server, so the regression check compares like with like
    # (not of the later rebenchmark, which found the server serving)
    assert record["meta"]["commit"] == earlier_land.meta.commit
    assert record["meta"]["vllm_args"] == ["--dtype", "bfloat16"]
    assert record["plan"] == {"kv_cache_tokens": 1234} and record["decode_ceiling_tok_s"] == 99.0
    assert record["meta"]["run_id"] != earlier_land.meta.run_id
    stages = {s["stage"]: s for s in record["stages"]}
    assert stages["serve"]["status"] == "skipped" and "already serving" in stages["serve"]["note"]
    assert stages["benchmark"]["status"] == "completed"
    points = record["points"]
    assert {(p["kind"], p["prompt_tokens"], p["concurrency"]) for p in points} >= {("prompt_length", 128, 1)}
    for p in points:
        assert p["errors"] == 0 and p["ttft_s"]["median"] > 0
        check_decode_records(p)
    assert record["report_path"]


def test_unknown_key_is_a_clear_error(blocks: None, vllm_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from flows.rebenchmark import rebenchmark

    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    with pytest.raises(UserError, match=r"requires an API key roost does not know.*roost-vllm-api-key"):
        rebenchmark(host=HOST, notify=False)
    # still a run: reported and stored as failed at "connect" (so a nightly run's Slack alert goes out)
    from roost.store import load_records

    last = load_records(model=LOCAL.repo_id, host=HOST)[-1]
    assert (last.status, last.failed_stage, last.failure_class) == ("failed", "connect", "connect_failed")
    assert "requires an API key" in last.failure_message and last.report_path


def test_a_profile_other_than_what_runs_benchmarks_what_runs(blocks: None, vllm_server: Any, earlier_land: RunRecord,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The nightly schedule passes the host's default profile; the host may serve another model since."""
    from flows.rebenchmark import rebenchmark

    monkeypatch.setenv("VLLM_API_KEY", vllm_server.api_key)
    record = rebenchmark(host=HOST, profile="ornith-9b", notify=False)
    assert record["status"] == "completed" and record["meta"]["profile"] == PROFILE
    serve = next(s for s in record["stages"] if s["stage"] == "serve")
    assert f"profile ornith-9b was asked for, {PROFILE} runs" in serve["note"]
