"""The real ``openai`` client through the gateway in front of the session's real vLLM CPU server:
streamed and whole answers of both endpoints, and the usage the gateway stores equals the usage vLLM
reported for the same requests, key by key. A client leaving mid-stream makes vLLM abort the request."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx
import pytest
from support.gateway import GatewayProcess, add_key, usage_rows, wait_row, wait_rows
from support.wait import poll

from roost.vllm import server_metrics as prometheus

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vllm_gateway(vllm_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    where = tmp_path_factory.mktemp("gateway-vllm")
    gw = GatewayProcess(f"sqlite:///{where / 'usage.db'}", [vllm_server.base_url], log_path=where / "gateway.log",
                        env={"VLLM_API_KEY": vllm_server.api_key}).start()
    try:
        yield gw
    finally:
        gw.stop()


def test_openai_client_usage_equals_vllms_per_key(vllm_gateway: GatewayProcess, vllm_server: Any) -> None:
    from openai import OpenAI

    gw = vllm_gateway
    keys = {"ana": add_key(gw.db_url, "ana", "user"), "ci-bot": add_key(gw.db_url, "ci-bot", "app")}
    before = len(usage_rows(gw.db_url))
    reported: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for name, key in keys.items():
        client = OpenAI(base_url=f"{gw.url}/v1", api_key=key, max_retries=0)
        assert [m.id for m in client.models.list().data] == ["tiny"]
        for i in range(2):
            words = "count the words in this sentence " * (i + 1)
            whole = client.chat.completions.create(model="tiny", messages=[{"role": "user", "content": words}],
                                                   max_tokens=6 + i, temperature=0,
                                                   extra_body={"ignore_eos": True})
            assert whole.usage is not None and whole.choices[0].message.content is not None
            reported[name].append((whole.usage.prompt_tokens, whole.usage.completion_tokens))
            text = ""
            usage = None
            for chunk in client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": words}], max_tokens=8 + i, temperature=0,
                    extra_body={"ignore_eos": True}, stream=True, stream_options={"include_usage": True}):
                if chunk.choices:
                    text += chunk.choices[0].delta.content or ""
                if chunk.usage is not None:
                    usage = chunk.usage
            assert usage is not None and text
            reported[name].append((usage.prompt_tokens, usage.completion_tokens))
            plain = client.completions.create(model="tiny", prompt=words, max_tokens=5, temperature=0,
                                           extra_body={"ignore_eos": True})
            assert plain.usage is not None
            reported[name].append((plain.usage.prompt_tokens, plain.usage.completion_tokens))
            streamed = 0
            for chunk in client.completions.create(model="tiny", prompt=words, max_tokens=7, temperature=0,
                                                   extra_body={"ignore_eos": True}, stream=True):  # no usage asked: the gateway meters anyway
                assert chunk.usage is None  # and does not send what was not asked for
                streamed += bool(chunk.choices and chunk.choices[0].text)
            assert streamed > 0
    # the client stops reading a stream at its [DONE] event, which the gateway sends before it commits the
    # row and ends the response: the last streamed request's row may land a moment after the client is done
    rows = wait_rows(gw.db_url, before + 16)
    stored: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for r in rows:
        assert r["status"] == "ok" and r["prompt_source"] == "usage" and r["completion_source"] == "usage", r
        stored[r["key_name"]].append((r["prompt_tokens"], r["completion_tokens"]))
    for name in keys:
        vllm_side = reported[name]
        # the last request of each round (streamed completions, no usage asked): 7 tokens, as vLLM counted
        assert [s for s, kind in zip(stored[name], range(8), strict=True) if kind % 4 != 3] == vllm_side
        assert [s[1] for s, kind in zip(stored[name], range(8), strict=True) if kind % 4 == 3] == [7, 7]
    text = gw.metrics()
    assert "roost_gateway_prompt_count_mismatch_total{" not in text  # /tokenize counted what vLLM counted
    for secret in (*keys.values(), vllm_server.api_key):
        assert secret not in text and secret not in gw.log()


class VllmCounts(NamedTuple):
    """From vLLM's ``/metrics``: requests running now, tokens generated so far, and requests finished at
    their length (an aborted request is not counted finished: its tokens stop where it was aborted)."""

    running: float
    generated: float
    finished_at_length: float


def _vllm_counts(base_url: str, key: str) -> VllmCounts:
    text = httpx.get(f"{base_url}/metrics", headers={"Authorization": f"Bearer {key}"}, timeout=10).text
    samples = prometheus.parse_text(text)
    totals = prometheus.totals(samples)
    length = sum(s.value for s in samples
                 if s.name == "vllm:request_success_total" and s.labels.get("finished_reason") == "length")
    return VllmCounts(totals.get("vllm:num_requests_running", 0.0), totals.get("vllm:generation_tokens_total", 0.0),
                      length)


# vLLM decodes one answer of the tiny model's 1900 tokens in about two seconds; a loaded two-core machine
# can leave the gateway unscheduled for seconds (ten, once, with eight other test sessions beside it), time
# in which vLLM decodes on. Thirty-two choices of it take vLLM twenty seconds or more, as a big model's one
# answer would on a Spark; an abort stops it long before, whatever the load.
CHOICES, MAX_TOKENS, CHUNKS = 32, 1900, 20
LEAVE_TRIES = 3  # a try in which vLLM had decoded every choice before the client left proves nothing


def _leave_mid_stream(gw: GatewayProcess, key: str, vllm: Any) -> tuple[dict[str, Any], int, VllmCounts]:
    """Stream ``CHOICES`` long answers, leave once ``CHUNKS`` chunks with text are read: the usage row of that
    request, the completion tokens the client saw counted (vLLM's usage on a chunk is its choice's), and
    vLLM's counts the moment after the client left."""
    before = len(usage_rows(gw.db_url))
    body = {"model": "tiny", "messages": [{"role": "user", "content": "write a long story"}], "n": CHOICES,
            "max_tokens": MAX_TOKENS, "temperature": 1, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    got, seen = 0, {}
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body, timeout=120,
                      headers={"Authorization": f"Bearer {key}"}) as resp:
        for line in resp.iter_lines():  # vLLM's first chunk of a choice names the role, with no text
            if not line.startswith("data: {"):
                continue
            obj = json.loads(line[6:])
            for c in obj["choices"]:
                if obj.get("usage"):  # not on the first chunk of a choice
                    seen[c["index"]] = obj["usage"]["completion_tokens"]
                got += bool(c["delta"].get("content"))
            if got >= CHUNKS:
                break
    after = _vllm_counts(vllm.base_url, vllm.api_key)
    row = next(r for r in wait_rows(gw.db_url, before + 1)[before:] if r["key_name"] == "leaver")
    return row, sum(seen.values()), after


def test_a_client_leaving_mid_stream_aborts_vllms_request(vllm_gateway: GatewayProcess, vllm_server: Any,
                                                          tmp_path: Path) -> None:
    """The client leaves mid-answer: the gateway bills what it forwarded, every choice's tokens, as
    ``client_disconnected``, and vLLM aborts the request instead of decoding the rest: by vLLM's own
    account no choice finished, and it generated fewer tokens than the whole answer."""
    gw = vllm_gateway
    key = add_key(gw.db_url, "leaver", "device")
    base, vkey = vllm_server.base_url, vllm_server.api_key
    whole = CHOICES * MAX_TOKENS
    # the account can tell: an answer read to its end moves vLLM's count of choices finished at their length
    before = _vllm_counts(base, vkey)
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", timeout=60, headers={"Authorization": f"Bearer {key}"},
                      json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "n": 2, "max_tokens": 4,
                            "temperature": 1, "ignore_eos": True, "stream": True}) as resp:
        assert resp.status_code == 200
        assert [line for line in resp.iter_lines() if line.startswith("data: ")][-1] == "data: [DONE]"
    finished = poll(lambda: _vllm_counts(base, vkey), lambda c: c.running <= 0, timeout_s=30, every_s=0.2)
    assert finished.finished_at_length - before.finished_at_length == 2, (before, finished)
    for _ in range(LEAVE_TRIES):
        start = _vllm_counts(base, vkey)
        row, client_saw, left = _leave_mid_stream(gw, key, vllm_server)
        t_left = time.monotonic()
        end = poll(lambda: _vllm_counts(base, vkey), lambda c: c.running <= 0, timeout_s=120, every_s=0.2)
        idle_s = time.monotonic() - t_left
        if left.generated - start.generated < whole:
            break
    else:
        raise AssertionError(f"{LEAVE_TRIES} times vLLM had decoded the whole answer before the client left")
    assert row["status"] == "client_disconnected", row["status"]
    assert row["completion_source"] == "usage"  # vLLM's own counts, on the last chunk of each choice forwarded
    assert max(client_saw, CHUNKS) <= row["completion_tokens"] < whole  # every choice's tokens, not one chunk's
    said = (f"vLLM: {left.generated - start.generated:.0f} tokens when the client left, "
            f"{end.generated - start.generated:.0f} of {whole} when it went idle {idle_s:.1f} s later; "
            f"{end.finished_at_length - start.finished_at_length:.0f} choices finished at their length; row {row}")
    # aborted, not decoding on: no choice finished, and vLLM stopped short of the whole answer
    assert end.running == 0 and end.finished_at_length == start.finished_at_length, said
    assert end.generated - start.generated < whole, said


def test_several_choices_and_prompts_are_billed_whole(vllm_gateway: GatewayProcess, vllm_server: Any) -> None:
    """Streamed ``n`` choices, and a list of prompts: the row holds vLLM's own totals, as its unstreamed
    answer to the same request counts them (its usage per chunk is one choice's, one prompt's)."""
    gw = vllm_gateway
    key = add_key(gw.db_url, "chooser", "device")
    requests = [("chat/completions", {"messages": [{"role": "user", "content": "name three birds"}], "n": 3}),
                ("completions", {"prompt": ["one two", "three four five six", "seven"], "n": 2})]
    for path, extra in requests:
        body = {"model": "tiny", "max_tokens": 5, "temperature": 1, "seed": 7, "ignore_eos": True, **extra}  # n > 1: not greedy
        plain = httpx.post(f"{vllm_server.base_url}/v1/{path}", json=body, timeout=60,
                           headers={"Authorization": f"Bearer {vllm_server.api_key}"}).json()["usage"]
        before = len(usage_rows(gw.db_url))
        with httpx.stream("POST", f"{gw.url}/v1/{path}", json={**body, "stream": True}, timeout=60,
                          headers={"Authorization": f"Bearer {key}"}) as resp:
            assert resp.status_code == 200
            assert [line for line in resp.iter_lines() if line.startswith("data: ")][-1] == "data: [DONE]"
        row = next(r for r in wait_rows(gw.db_url, before + 1)[before:] if r["key_name"] == "chooser")
        assert (row["status"], row["prompt_source"], row["completion_source"]) == ("ok", "usage", "usage"), row
        assert (row["prompt_tokens"], row["completion_tokens"]) == (plain["prompt_tokens"],
                                                                   plain["completion_tokens"]), (path, row, plain)
    assert "roost_gateway_prompt_count_mismatch_total{" not in gw.metrics()


def _direct_usage(vllm: Any, path: str, body: dict[str, Any]) -> dict[str, int]:
    """vLLM's usage for ``body`` sent straight to it, not streamed."""
    whole = {k: v for k, v in body.items() if k != "stream"}
    resp = httpx.post(f"{vllm.base_url}/v1/{path}", json=whole, timeout=60,
                      headers={"Authorization": f"Bearer {vllm.api_key}"})
    assert resp.status_code == 200, resp.text
    usage: dict[str, int] = resp.json()["usage"]
    return usage


@pytest.mark.parametrize(("path", "extra", "choices"), [
    ("chat/completions", {"stream": "true"}, 1),
    ("chat/completions", {"stream": 1}, 1),
    ("chat/completions", {"stream": "yes"}, 1),
    # two prompts, two choices each (n spelled as a string), sampled: n > 1 is not greedy
    ("completions", {"stream": "on", "n": "2", "temperature": 1, "seed": 7}, 4),
], ids=["chat-stream-'true'", "chat-stream-1", "chat-stream-'yes'", "completions-stream-'on'-n-'2'"])
def test_a_stream_spelled_as_vllm_reads_it_is_streamed_and_billed_whole(
        vllm_gateway: GatewayProcess, vllm_server: Any, path: str, extra: dict[str, Any], choices: int) -> None:
    """``"stream": "true"`` (or ``1``, ``"yes"``, ``"on"``) is a stream to vLLM: the client gets an event
    stream, and the gateway bills every token of it, as vLLM counts them, not 0."""
    gw = vllm_gateway
    key = add_key(gw.db_url, f"speller-{os.urandom(4).hex()}", "device")
    max_tokens = 5
    request = ({"messages": [{"role": "user", "content": "spell a stream"}]} if path == "chat/completions"
               else {"prompt": ["one two three", "four five"]})
    body = {"model": "tiny", **request, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, **extra}
    with httpx.stream("POST", f"{gw.url}/v1/{path}", json=body, timeout=60,
                      headers={"Authorization": f"Bearer {key}"}) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream"), resp.headers
        request_id = resp.headers["x-request-id"]
        data = [line for line in resp.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "data: [DONE]", data[-3:]
    chunks = [json.loads(line[6:]) for line in data[:-1]]
    assert chunks and all("usage" not in c for c in chunks), chunks[-1]  # the client did not ask for usage
    assert {c["index"] for chunk in chunks for c in chunk["choices"]} == set(range(choices))
    row = wait_row(gw.db_url, lambda r: r["request_id"] == request_id)
    direct = _direct_usage(vllm_server, path, body)
    assert direct["completion_tokens"] == max_tokens * choices  # ignore_eos: exactly max_tokens per choice
    assert (row["stream"], row["status"], row["completion_source"]) == (True, "ok", "usage"), row
    assert row["completion_tokens"] == max_tokens * choices, row
    assert row["prompt_tokens"] == direct["prompt_tokens"], (row, direct)


def test_a_stream_vllm_would_refuse_is_refused_and_not_forwarded(vllm_gateway: GatewayProcess) -> None:
    """``"stream": "maybe"``: vLLM would refuse it, so the gateway does, naming the field, and forwards
    nothing (no usage row)."""
    gw = vllm_gateway
    key = add_key(gw.db_url, "maybe", "device")
    headers = {"Authorization": f"Bearer {key}"}
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": "maybe"}
    before = len(usage_rows(gw.db_url))
    resp = httpx.post(f"{gw.url}/v1/chat/completions", json=body, timeout=60, headers=headers)
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == "stream" and "stream" in err["message"], err
    # a request after it, whose row is awaited: had the refused one been forwarded, its row would be there too
    after = httpx.post(f"{gw.url}/v1/chat/completions", json={**body, "stream": False}, timeout=60, headers=headers)
    assert after.status_code == 200, after.text
    wait_row(gw.db_url, lambda r: r["request_id"] == after.headers["x-request-id"])
    rows = usage_rows(gw.db_url)
    assert len(rows) == before + 1 and [r["key_name"] for r in rows[before:]] == ["maybe"], rows[before:]

