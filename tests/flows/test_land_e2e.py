"""The main job end to end, as the README runs it: `roost run` on the embedded default.

Real parts only: the tiny checkpoint is generated, published to a local git repo, served by a real
olah Hub mirror, downloaded with huggingface_hub, audited, served by a real vLLM CPU server,
benchmarked over streaming chat completions, reported to files and to a real Prefect server.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import ROOST
from support.errors import assert_one_line_error
from support.processes import vllm_processes
from support.samples import check_decode_records
from support.slack import HOOK_SECRET, TOKEN, assert_no_secret, bot
from support.slack_receiver import SlackReceiver

from roost.catalogue import fmt_value

pytestmark = pytest.mark.slow


def _run_roost(*args: str, timeout: int = 1200, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([ROOST, *args], capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ) | (env or {}))


@pytest.fixture(scope="module", autouse=True)
def own_results(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """This module's own results store: earlier landings of the session (the deployment tests land the
    same checkpoint with the same vLLM arguments, hence comparable runs) must not decide the verdicts
    these runs are checked for (the first establishes the baseline, the second has too few to judge)."""
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("results")
        mp.setenv("ROOST_RESULTS_DIR", str(path))
        yield path


@pytest.fixture(scope="module")
def results_url(own_results: Path) -> Iterator[str]:
    """``roost results serve`` on loopback over the session's reports: the first run's ROOST_RESULTS_URL."""
    from support.browser import results_server

    with results_server(Path(os.environ["ROOST_RESULTS_DIR"]) / "reports") as url:
        yield url


@pytest.fixture(scope="module")
def slack(prefect_api: str) -> Iterator[SlackReceiver]:
    """The local Slack receiver (it enforces Block Kit's limits) and a SlackNotifier block saved under
    the name the notify stage loads, posting every run there; removed after this module."""
    from blocks.slack import SlackNotifier
    from tasks.notify import DEFAULT_BLOCK

    receiver = SlackReceiver(token=TOKEN, webhook_secret=HOOK_SECRET)
    bot(receiver, notify_on=["every_run", "regression", "failure"]).save(DEFAULT_BLOCK, overwrite=True)
    try:
        yield receiver
    finally:
        SlackNotifier.delete(DEFAULT_BLOCK)
        receiver.close()


@pytest.fixture(scope="module")
def first_run(prefect_api: str, results_url: str, slack: SlackReceiver) -> dict[str, Any]:
    """`roost run` as the README runs it, notifying: Slack is configured by a saved notifier block. On the
    session's compile cache (``VLLM_CACHE_ROOT``, tests/conftest.py): an earlier landing of this checkpoint
    with these arguments (the deployment tests') compiled it already."""
    res = _run_roost("run", "--json", env={"ROOST_RESULTS_URL": results_url})
    assert res.returncode == 0, res.stderr[-4000:]
    start = res.stdout.index("{")
    record: dict[str, Any] = json.loads(res.stdout[start:])
    return record


def test_the_run_is_sent_to_slack_through_the_saved_notifier_block(first_run: dict[str, Any],
                                                                     slack: SlackReceiver) -> None:
    """The flow's own Slack message, through slack-sdk to the receiver, which refuses blocks Slack would."""
    posts = [c for c in slack.calls("chat.postMessage") if first_run["meta"]["run_id"] in json.dumps(c.json())]
    assert len(posts) == 1, [c.json() for c in slack.calls("chat.postMessage")]
    body = posts[0].json()
    assert body["channel"] == "C0ROOSTALERTS" and body["blocks"]
    text = json.dumps(body)
    assert "local" in text and "baseline" in text  # the profile, and what the verdict rests on
    assert_no_secret(text, *(c.body.decode(errors="replace") for c in slack.calls("chat.postMessage")))


def test_the_servers_capabilities_are_probed_after_the_health_wait(first_run: dict[str, Any]) -> None:
    """The demo serves as the production profile does (reasoning parser, tool-call parser): the reasoning
    split, a named tool call validated against its schema and JSON-schema output each pass, with latency."""
    probes = first_run["probes"]
    assert [p["name"] for p in probes] == ["reasoning", "tool", "structured"]
    assert all(p["ok"] and p["status_code"] == 200 and p["latency_s"] > 0 for p in probes), probes


def test_measures_real_ttft_and_records_every_decode_timing_exactly(first_run: dict[str, Any]) -> None:
    """TTFT, prefill and aggregate rates are measured at every point. Decode timings are checked as exact
    records (``check_decode_records``): counted, or counted unmeasurable with the reason. That any decode was
    timed is not claimed here: a busy CPU can deliver every request of a point in one burst and a landing
    is not run again; the local profile's decode timing is proven where it is re-measured until judged
    (``tests/roost/bench/test_bench_vs_vllm.py``, the local-profile test)."""
    points = first_run["points"]
    kinds = {(p["kind"], p["prompt_tokens"] if p["kind"] == "prompt_length" else p["concurrency"]) for p in points}
    assert {("prompt_length", 128), ("prompt_length", 1024), ("concurrency", 1), ("concurrency", 4)} <= kinds
    for p in points:
        assert p["errors"] == 0 and p["requests"] > 0
        for metric in ("ttft_s", "prefill_tok_s", "output_tok_s"):
            value = p[metric]["median"]
            assert value is not None and math.isfinite(value) and value > 0, (metric, p)
        check_decode_records(p)  # a request a busy CPU flushed in one burst is counted unmeasurable, not timed
    # Whether 4 users' aggregate throughput beats one user's is a speed figure, the benchmarks' to measure:
    # on two cores shared with another test's vLLM cold start either point can be the slower (CI and here:
    # 61 tok/s at 4 users, 71 at 1). That the 4 users ran at once is vLLM's own account, below
    # (test_the_cap_reaches_vllm_and_requests_queue_past_it: two ran and two queued).


def test_token_counts_and_decode_records_agree_with_vllms_own_counters(first_run: dict[str, Any]) -> None:
    """Checked against vLLM, not against roost's own formula: the engine's generated-token counter and
    its per-request TPOT histogram (``/metrics`` scraped before and after each point) count exactly the
    requests and tokens roost's records do, and roost's TPOT holds exactly the requests it could time.

    Whether roost's TPOT *agrees* with vLLM's is a timing figure: a busy CPU delays the API server's
    delivery (a point's arrival window shortened, or every token of a request in one burst), and a
    landing cannot be measured again. It is judged by the local profile's benchmark against the same
    histogram where a run is repeated until enough points are judged (``tests/roost/bench/
    test_bench_vs_vllm.py::test_prompts_are_exact_and_the_local_profile_agrees_with_vllms_own_account``)."""
    import pandas as pd

    results = Path(os.environ["ROOST_RESULTS_DIR"])
    reqs = pd.read_parquet(results / "requests")
    reqs = reqs[(reqs["run_id"] == first_run["meta"]["run_id"]) & (reqs["phase"] != "warmup")]
    assert (reqs["completion_tokens"] == 64).all() and (reqs["error"].isna() | (reqs["error"] == "")).all()
    for i, p in enumerate(first_run["points"]):
        delta = p["metrics_delta"]
        rows = reqs[reqs["point"] == i]
        assert len(rows) == p["requests"] == delta["request_tpot_count"], p
        assert delta["generation_tokens"] == rows["completion_tokens"].sum() == p["requests"] * 64, p
        # roost's TPOT: exactly the rows it could time (the others counted unmeasurable, with the reason)
        timed = rows[rows["unmeasurable_reason"] == ""]
        assert p["tpot_s"]["count"] == len(timed) == p["requests"] - p["unmeasurable"], p
        # and its mean is those rows' own TPOT (the same requests and formula; none when none could be timed)
        assert p["tpot_s"]["mean"] == (pytest.approx(timed["tpot_s"].mean(), rel=1e-9) if len(timed) else None), p


def test_the_cap_reaches_vllm_and_requests_queue_past_it(first_run: dict[str, Any]) -> None:
    """The local profile's --max-num-seqs 2 is the server's: at 4 users, two run and two wait (vLLM's own
    queue-time histogram and running gauge say so); at the cap, nobody waits for long."""
    args = first_run["meta"]["vllm_args"]
    assert args[args.index("--max-num-seqs") + 1] == "2" and first_run["plan"]["max_num_seqs"] == 2
    by_conc = {p["concurrency"]: p for p in first_run["points"] if p["kind"] == "concurrency"}
    assert sorted(by_conc) == [1, 2, 4]  # the cap is a benchmark level
    four, one = by_conc[4]["metrics_delta"], by_conc[1]["metrics_delta"]
    assert four["request_queue_count"] == by_conc[4]["requests"]
    assert four["request_queue_time_s_mean"] > max(0.02, 10 * one["request_queue_time_s_mean"]), (four, one)
    assert four.get("num_requests_running_max", 2) <= 2


def test_plan_matches_what_vllm_logged(first_run: dict[str, Any]) -> None:
    serve = first_run["serve"]
    assert serve["logged_kv_cache_tokens"] and serve["logged_kv_cache_tokens"] > 0
    assert serve["predicted_kv_cache_tokens"] == serve["logged_kv_cache_tokens"]
    assert serve["attempts"][-1]["ok"] is True
    assert "--api-key" not in " ".join(first_run["meta"]["vllm_args"])
    assert first_run["meta"]["vllm_args"].count("--served-model-name") == 1
    assert first_run["meta"]["vllm_version"] == "0.32.0"  # as the running server reports it (GET /version)


def test_report_written_with_measured_numbers(first_run: dict[str, Any]) -> None:
    report = Path(first_run["report_path"])
    text = report.read_text()
    for p in (p for p in first_run["points"] if p["kind"] == "prompt_length"):
        assert fmt_value(p["ttft_s"]["median"]) in text, p
        if p["decode_tok_s"]["median"] is not None:
            assert fmt_value(p["decode_tok_s"]["median"]) in text, p
        else:  # every request of the point came in a burst (a busy CPU): the table says so, no rate is made up
            assert p["unmeasurable"] == p["requests"] and f"({p['unmeasurable']} unmeasurable)" in text, p
    assert first_run["meta"]["commit"][:12] in text


def test_the_local_profile_evaluates_accuracy_after_the_benchmark(first_run: dict[str, Any],
                                                                   slack: SlackReceiver) -> None:
    """The demo's GSM8K-format set, read through huggingface_hub from the demo's own Hub mirror before the
    server starts, asked of the served model after the benchmark: scores in the record, every answer in
    the store's per-question table, an Accuracy section in the report and in the Slack message."""
    import pandas as pd

    (ev,) = first_run["evals"]
    assert ev["task"] == "gsm8k" and ev["status"] == "completed"
    assert ev["dataset"]["source"] == "roost-demo/gsm8k-mini" and re.fullmatch(r"[0-9a-f]{40}", ev["dataset"]["revision"])
    s = ev["summary"]
    assert s["n"] == 12 and s["correct"] + s["wrong"] + s["unparsed"] + s["truncated"] == 12
    assert 0 < s["mean_output_tokens"] <= 48
    order = [st["stage"] for st in first_run["stages"]]
    assert order.index("download") < order.index("eval-datasets") < order.index("serve")
    assert order.index("benchmark") < order.index("evaluate") < order.index("report")
    answers = pd.read_parquet(Path(os.environ["ROOST_RESULTS_DIR"]) / "eval_answers")
    mine = answers[answers["run_id"] == first_run["meta"]["run_id"]]
    assert len(mine) == 12 and mine["question_id"].is_unique and set(mine["verdict"]) <= {
        "correct", "wrong", "unparsed", "truncated"}
    assert int(mine["output_tokens"].sum()) == round(s["mean_output_tokens"] * 12)
    text = Path(first_run["report_path"]).read_text()
    assert "## Accuracy" in text and "GSM8K" in text and "accuracy_gsm8k.png" in text
    post = next(c.json() for c in slack.calls("chat.postMessage") if first_run["meta"]["run_id"] in json.dumps(c.json()))
    assert "*Accuracy*" in json.dumps(post) and "GSM8K: " in json.dumps(post)


def test_artifacts_are_in_the_prefect_api(first_run: dict[str, Any]) -> None:
    import asyncio
    from uuid import UUID

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    async def artifacts() -> list[Any]:
        async with get_client() as client:
            run_id = UUID(first_run["meta"]["prefect_flow_run_id"])
            flow_run = await client.read_flow_run(run_id)
            assert flow_run.state is not None and flow_run.state.is_completed()
            return await client.read_artifacts(
                artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id])))

    found = asyncio.run(artifacts())
    types = {a.type for a in found}
    assert {"markdown", "table", "progress"} <= types, types
    assert any(a.key and a.key.startswith("roost-report") for a in found)
    assert {"roost-eval-gsm8k-local-cpu", "roost-eval-progress-gsm8k-local-cpu"} <= {a.key for a in found}


def test_the_report_opens_from_the_prefect_ui_in_a_browser(
    first_run: dict[str, Any], results_url: str, prefect_api: str, tmp_path: Path
) -> None:
    """Headless Chromium on the UI's page of the flow run: the report artifact is the flow run's, its
    charts load from `roost results serve`, and its full-report link opens report.html over http."""
    from support.browser import check_report_artifact, chromium, prefect_ui

    with prefect_ui(prefect_api, tmp_path / "ui") as ui, chromium(tmp_path / "chromium-profile") as browser:
        check_report_artifact(browser, ui, first_run["meta"]["prefect_flow_run_id"], results_url, tmp_path)


def test_no_server_left_running(first_run: dict[str, Any]) -> None:
    assert vllm_processes() == []


def _leave_half_written(entry: Path) -> None:
    """A compiled entry as a server killed mid-compile leaves it (what CI met: every later start of that
    configuration loaded a 0-byte ``.main.so`` and died "Engine core initialization failed"): no AOT
    artifact, no AOT-autograd entries, 0-byte kernel libraries."""
    for artifact in entry.glob("rank_*/model"):
        artifact.unlink()
    shutil.rmtree(entry / "inductor_cache" / "aotautograd", ignore_errors=True)
    for lib in entry.rglob("*.main.so"):
        lib.unlink()
        lib.write_bytes(b"")


_AOT_ENTRY = re.compile(r"(?:Directly load AOT compilation from path|saved AOT compiled function to) "
                        r"(/\S+/torch_compile_cache/torch_aot_compile/[0-9a-f]+)/rank_\d+_\d+/model")


def _compiled_entry(record: dict[str, Any]) -> Path:
    """The compile-cache entry the run's healthy server loaded or saved, as its vLLM log names it (the
    process backend's log, ``$ROOST_HOME/servers/<host>-<name>-<port>.log``, appended to per port)."""
    from roost.settings import roost_home

    port = record["serve"]["attempts"][-1]["port"]
    (log,) = (roost_home() / "servers").glob(f"*-{record['meta']['served_model_name']}-{port}.log")
    entries = _AOT_ENTRY.findall(log.read_text(errors="replace"))
    assert entries, f"{log}: vLLM named no AOT compile-cache entry"
    return Path(entries[-1])


def _flow_run(flow_run_id: str) -> Any:
    from prefect.client.orchestration import get_client

    async def read() -> Any:
        async with get_client() as client:
            return await client.read_flow_run(flow_run_id)

    return asyncio.run(read())


def test_the_first_run_is_named_and_tagged_as_the_baseline(first_run: dict[str, Any]) -> None:
    meta = first_run["meta"]
    fr = _flow_run(meta["prefect_flow_run_id"])
    assert re.fullmatch(rf"land · local · {meta['host']} · {meta['commit'][:7]} · \d\d-\d\d \d\d:\d\d:\d\d UTC",
                        fr.name), fr.name
    assert "verdict:baseline" in fr.tags and fr.state.is_completed(), (fr.tags, fr.state)


def test_the_run_log_keeps_vllms_levels_apart_and_each_progress_line_once(first_run: dict[str, Any]) -> None:
    """The first run's log as the Prefect UI has it: vLLM's lines under its own logger at its own level,
    its banner, route listing and shutdown noise below INFO, none filed under a task run that had
    finished when it was logged; each benchmark progress line once (``support.run_log``)."""
    from support.run_log import check_run_log

    print(check_run_log(first_run["meta"]["prefect_flow_run_id"]))


def test_second_run_reuses_cached_stages_and_repairs_a_half_written_compile_cache(
    first_run: dict[str, Any], slack: SlackReceiver, tmp_path: Path
) -> None:
    """The same landing again, on the compile-cache entry the first run used, broken as a kill mid-compile
    leaves it: download and audit come from the cache; the cold load names the broken entry
    ``compile_cache_corrupt``, removes it, and its second attempt compiles afresh. With one earlier
    run there is no verdict yet: "insufficient baseline", in the run's state, tags and Slack message.
    The entry broken is a copy in a compile cache of this run's own: the session's stays whole."""
    used = _compiled_entry(first_run)
    root = tmp_path / "vllm-cache"
    entry = root / used.relative_to(Path(os.environ["VLLM_CACHE_ROOT"]))
    shutil.copytree(used, entry)
    assert list(entry.rglob("*.main.so")), f"the first run's server used no kernel library in {used}"
    _leave_half_written(entry)

    res = _run_roost("run", "--json", env={"VLLM_CACHE_ROOT": str(root)})
    assert res.returncode == 0, res.stderr[-4000:]
    record = json.loads(res.stdout[res.stdout.index("{"):])
    stages = {s["stage"]: s for s in record["stages"]}
    assert stages["download"]["cached"] is True
    assert stages["audit"]["cached"] is True
    assert record["meta"]["commit"] == first_run["meta"]["commit"]
    assert "cached" in res.stdout + res.stderr
    first, second = record["serve"]["attempts"]
    assert (first["failure_class"], first["action"]) == ("compile_cache_corrupt", "clear the compile cache"), first
    assert first["evidence"].endswith(".main.so: file too short"), first["evidence"]
    assert second["ok"], second
    assert list(entry.glob("rank_*/model")) and all(lib.stat().st_size > 0 for lib in entry.rglob("*.main.so"))
    assert vllm_processes() == []

    (ev,) = record["evals"]  # the same questions as the first run's, paired with them (McNemar)
    assert ev["baseline_run_id"] == first_run["meta"]["run_id"]
    assert ev["comparison"]["pairs"] == 12 and ev["comparison"]["significant"] is False

    fr = _flow_run(record["meta"]["prefect_flow_run_id"])
    assert "verdict:insufficient" in fr.tags and "insufficient baseline" in (fr.state.message or ""), (fr.tags, fr.state)
    post = next(c.json() for c in slack.calls("chat.postMessage") if record["meta"]["run_id"] in json.dumps(c.json()))
    assert "insufficient baseline" in json.dumps(post)


def test_unknown_profile_is_one_line_exit_2() -> None:
    res = _run_roost("run", "--profile", "nope")
    line = assert_one_line_error(res.returncode, res.stderr)
    # with a Prefect server (PREFECT_API_URL), saved model-profile documents are offered too
    assert line.startswith("roost: error: unknown model profile 'nope': choose one of ")
    assert all(name in line for name in ("local", "ornith-1.5-35b-a3b-nvfp4", "ornith-35b", "ornith-9b"))


def test_port_in_use_is_one_line_exit_2() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        res = _run_roost("run", "--port", str(s.getsockname()[1]))
    assert_one_line_error(res.returncode, res.stderr, "already in use")


def _flow_run_count() -> int:
    """Flow runs the session's Prefect server holds that no deployment made (what ``roost run`` starts)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterDeploymentId

    with get_client(sync_client=True) as client:
        return client.count_flow_runs(flow_run_filter=FlowRunFilter(deployment_id=FlowRunFilterDeploymentId(is_null_=True)))


def test_a_kv_pool_too_small_is_refused_before_vllm_starts(prefect_api: str) -> None:
    """The Ornith 1.5 recipe's 4 GiB-pool lesson: the plan (with this run's overrides) refuses before
    anything starts — no Prefect run, no download, no cold load — exit 1 as `roost plan` says it.
    (A profile whose own settings the plan refuses is stopped at the flow's preflight: recorded.)"""
    from roost.profiles import LOCAL
    from roost.store import load_records

    before = len(load_records(model=LOCAL.repo_id))
    runs_before = _flow_run_count()
    res = _run_roost("run", "--no-notify", "--vllm-arg=--kv-cache-memory-bytes=1048576")
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback" not in res.stdout + res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert re.fullmatch(r"roost: error: --vllm-arg --kv-cache-memory-bytes=1048576: vLLM would not start local "
                        r"with it: a 1,048,576-byte KV pool cannot hold one [\d,]+-token request; use "
                        r"--kv-cache-memory-bytes \d+ or more", res.stderr.strip())
    assert _flow_run_count() == runs_before  # no flow run (Prefect, the demo's Hub) was even started
    assert vllm_processes() == []
    assert len(load_records(model=LOCAL.repo_id)) == before


def test_a_missing_revision_is_one_line_exit_2(prefect_api: str) -> None:
    res = _run_roost("run", "--no-notify", "--revision", "no-such-branch")
    assert res.returncode == 2, res.stderr[-3000:]
    assert "Traceback" not in res.stdout + res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("roost: error:") and "'no-such-branch'" in last and "--revision" in last


def test_a_secret_in_the_vllm_arguments_is_refused() -> None:
    res = _run_roost("run", "--vllm-arg=--api-key=sk-123")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        "roost: error: --vllm-arg: --api-key carries a secret, and vLLM arguments are stored with the run and "
        "logged; remove it: roost passes the API key through VLLM_API_KEY (or the roost-vllm-api-key Secret block) "
        "and the Hub token through HF_TOKEN (or a Prefect Secret block)"]
    assert "sk-123" not in res.stdout + res.stderr
