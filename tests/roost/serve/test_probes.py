"""The capability probes without a vLLM: their requests, their verdicts on answers shaped as vLLM 0.24 / 0.32
send them (and as no server should), which probes a server gets, and the runner against a FAKE server on
loopback (:class:`FakeChatServer`, below) for the faults a real vLLM does not make: a body that is not JSON,
too large, endless, compressed, too deep, an error echoing the Authorization header, no answer in time. The
probes against real vLLM CPU servers are in ``test_probes_vllm.py``."""

from __future__ import annotations

import gzip
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from roost.errors import UserError
from roost.records import ProbeResult
from roost.serve import probes as P
from roost.vllm.client import VllmClient, run_sync

KEY = "probe-key-0123456789abcdef"


def completion(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    """A non-streamed chat completion as vLLM sends it."""
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", **message}, "finish_reason": finish}],
            "usage": {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32}}


def tool_call(name: str, arguments: Any) -> dict[str, Any]:
    return {"id": "chatcmpl-tool-1", "type": "function", "function": {"name": name, "arguments": arguments}}


# --- requests ----------------------------------------------------------------------------------------


def test_reasoning_request_is_short_greedy_and_thinking() -> None:
    body = P.reasoning_request("tiny")
    assert body["model"] == "tiny" and body["max_tokens"] == 32 and body["temperature"] == 0
    assert body["stream"] is False and body["chat_template_kwargs"] == {"enable_thinking": True}
    assert "tools" not in body and "response_format" not in body
    assert [m["role"] for m in body["messages"]] == ["user"]


def test_tool_request_names_a_strict_tool_with_a_required_property() -> None:
    body = P.tool_request("tiny")
    [tool] = body["tools"]
    fn = tool["function"]
    assert tool["type"] == "function" and fn["name"] == P.TOOL_NAME and fn["strict"] is True
    assert fn["parameters"]["type"] == "object" and fn["parameters"]["required"] == ["path"]
    assert body["tool_choice"] == {"type": "function", "function": {"name": P.TOOL_NAME}}
    # thinking off: with a reasoning parser, vLLM holds the grammar back until </think>
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    auto = P.tool_request("tiny", auto=True)
    assert auto["tool_choice"] == "auto" and "strict" not in auto["tools"][0]["function"]
    assert auto["tools"][0]["function"]["parameters"] == P.TOOL_PARAMETERS


def test_structured_request_sends_a_json_schema_response_format() -> None:
    body = P.structured_request("tiny", max_tokens=64)
    fmt = body["response_format"]
    assert fmt == {"type": "json_schema", "json_schema": {"name": "verdict", "schema": P.STRUCTURED_SCHEMA}}
    assert body["max_tokens"] == 64 and body["chat_template_kwargs"] == {"enable_thinking": False}


@pytest.mark.parametrize("name", P.PROBE_NAMES)
def test_every_request_is_strict_json(name: str) -> None:
    body = P.PROBES[name].request("tiny")
    assert json.loads(json.dumps(body, allow_nan=False)) == body


# --- schema validation -------------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "problem"), [
    ({"path": "README.md"}, ""),
    ({"path": "pyproject.toml"}, ""),
    ({}, "'path' is a required property"),
    ({"path": "/etc/passwd"}, "path: '/etc/passwd' is not one of"),
    ({"path": 3}, "path: 3 is not"),
    ({"path": "README.md", "mode": "r"}, "Additional properties are not allowed ('mode' was unexpected)"),
    (["README.md"], "['README.md'] is not of type 'object'"),
])
def test_tool_arguments_are_validated_against_the_tool_schema(args: Any, problem: str) -> None:
    got = P.schema_error(args, P.TOOL_PARAMETERS)
    assert (got.startswith(problem) if problem else got == ""), got


@pytest.mark.parametrize(("value", "valid"), [
    ({"answer": "yes", "sure": True}, True),
    ({"answer": "no", "sure": False}, True),
    ({"answer": "maybe", "sure": True}, False),
    ({"answer": "yes"}, False),
    ({"answer": "yes", "sure": "true"}, False),
    ({"answer": "yes", "sure": True, "why": "sky"}, False),
    ("yes", False),
    (None, False),
])
def test_structured_answers_are_validated_against_the_schema(value: Any, valid: bool) -> None:
    assert (P.schema_error(value, P.STRUCTURED_SCHEMA) == "") is valid


# --- verdicts ----------------------------------------------------------------------------------------


def test_reasoning_passes_with_a_parser_and_fails_without() -> None:
    # vLLM with --reasoning-parser qwen3: a model that never closes </think> leaves content null
    ok = P.judge_reasoning(completion({"content": None, "reasoning": "17 plus 25 is"}, "length"))
    assert ok.ok and ok.detail == "reasoning 13 chars, content 0 chars, cut at max_tokens"
    assert P.judge_reasoning(completion({"content": "42", "reasoning_content": "add them"})).ok  # older vLLM
    # no parser: the thinking stays in content, no reasoning key
    no_parser = P.judge_reasoning(completion({"content": "17 plus 25 is 42"}))
    assert not no_parser.ok and "no reasoning parser" in no_parser.error and "16 characters" in no_parser.error
    tags = P.judge_reasoning(completion({"content": "<think>hmm</think>42", "reasoning": "x"}))
    assert not tags.ok and "<think> and </think>" in tags.error
    assert not P.judge_reasoning(completion({"content": None, "reasoning": "   "})).ok
    assert not P.judge_reasoning(completion({"content": None})).ok


def test_a_named_tool_call_passes_only_with_arguments_that_fit_the_schema() -> None:
    ok = P.judge_tool(completion({"content": "", "tool_calls": [tool_call("read_file", '{"path": "README.md"}')]},
                                 "tool_calls"))
    assert ok == P.Verdict(True, "", "read_file(path) of 1 call(s)")
    # what vLLM returns when the grammar let a random-weight model write whitespace until max_tokens
    cut = P.judge_tool(completion({"content": "", "tool_calls": [tool_call("read_file", "{}")]}, "length"))
    assert not cut.ok
    assert cut.error == ("the read_file call's arguments do not fit its schema: 'path' is a required property "
                         '(cut at max_tokens: finish_reason "length")')
    off = P.judge_tool(completion({"tool_calls": [tool_call("read_file", '{"path": "x"}')]}))
    assert not off.ok and "'x' is not one of" in off.error
    assert "not JSON" in P.judge_tool(completion({"tool_calls": [tool_call("read_file", '{"path": ')]})).error
    assert "a JSON dict, not a JSON string" in P.judge_tool(
        completion({"tool_calls": [tool_call("read_file", {"path": "README.md"})]})).error
    assert "a JSON list, not an object" in P.judge_tool(
        completion({"tool_calls": [tool_call("read_file", '["README.md"]')]})).error
    other = P.judge_tool(completion({"tool_calls": [tool_call("rm_rf", "{}")]}))
    assert not other.ok and other.error == "tool calls of rm_rf, none of read_file"
    none = P.judge_tool(completion({"content": "I will read it.", "tool_calls": []}, "stop"))
    assert not none.ok and none.error == "no tool call in the answer (content 15 chars, reasoning 0 chars)"


def test_the_auto_probe_takes_any_parsed_call_of_the_tool() -> None:
    answer = completion({"content": None, "tool_calls": [tool_call("read_file", '{"path": "./README.md"}')]})
    assert not P.judge_tool(answer).ok
    auto = P.judge_tool_auto(answer)
    assert auto.ok and auto.detail.startswith("read_file(path) of 1 call(s); arguments off-schema:")
    assert not P.judge_tool_auto(completion({"content": "no call"})).ok


def test_structured_output_must_be_schema_valid_json_in_content() -> None:
    ok = P.judge_structured(completion({"content": '{"answer":"yes","sure":true}', "reasoning": None}))
    assert ok.ok and ok.detail == "{answer, sure} in 28 chars"
    assert P.judge_structured(completion({"content": '{\n  "answer": "no",\n  "sure": false\n}'})).ok
    # thinking on with a reasoning parser: the grammar waited for </think>, everything went to reasoning
    held = P.judge_structured(completion({"content": None, "reasoning": "subclass supp abc"}, "length"))
    assert not held.ok and "17 characters of output are in message.reasoning" in held.error
    assert "cut at max_tokens" in held.error
    ws = P.judge_structured(completion({"content": "{\n   \n         \n"}, "length"))
    assert not ws.ok and ws.error.startswith("message.content is not JSON (16 chars, 15 of them whitespace)")
    assert "cut at max_tokens" in ws.error
    bad = P.judge_structured(completion({"content": '{"answer": "maybe", "sure": true}'}))
    assert not bad.ok and "answer: 'maybe' is not one of ['yes', 'no']" in bad.error
    assert not P.judge_structured(completion({"content": 42})).ok


HOSTILE: list[Any] = [
    None, 0, "choices", [], [{"choices": []}], {}, {"choices": None}, {"choices": {}}, {"choices": []},
    {"choices": [None]}, {"choices": ["x"]}, {"choices": [{}]}, {"choices": [{"message": None}]},
    {"choices": [{"message": "hello"}]}, {"choices": [{"message": []}]},
    {"choices": [{"message": {"content": ["a"], "reasoning": {"x": 1}}}]},
    {"choices": [{"message": {"content": None, "reasoning": 5}, "finish_reason": 7}]},
    {"choices": [{"message": {"tool_calls": "read_file"}}]},
    {"choices": [{"message": {"tool_calls": [None, 1, "x", {"function": None}, {"function": {"name": 5}}]}}]},
    {"choices": [{"message": {"tool_calls": [{"function": {"name": "read_file", "arguments": None}}]}}]},
    {"choices": [{"message": {"tool_calls": [{"function": {"name": "read_file", "arguments": "[" * 5000}}]}}]},
    {"choices": [{"message": {"tool_calls": [{"function": {"name": "read_file", "arguments": "1e999"}}]}}]},
    {"choices": [{"message": {"content": "[" * 5000 + "]" * 5000}}]},
    {"choices": [{"message": {"content": "NaN"}}]},
]


@pytest.mark.parametrize("name", P.PROBE_NAMES)
@pytest.mark.parametrize("answer", HOSTILE, ids=[f"hostile{i}" for i in range(len(HOSTILE))])
def test_hostile_answers_fail_the_probe_and_never_raise(name: str, answer: Any) -> None:
    verdict = P.PROBES[name].judge(answer)
    assert verdict.ok is False and verdict.error and len(verdict.error) < 400


# --- which probes, and the failure ------------------------------------------------------------------


@pytest.mark.parametrize(("args", "tool_auto", "expected"), [
    ([], False, ["structured"]),
    (["--reasoning-parser", "qwen3"], False, ["reasoning", "structured"]),
    (["--reasoning_parser=qwen3", "--max-model-len", "4096"], False, ["reasoning", "structured"]),
    (["--reasoning-parser", "--max-model-len", "4096"], False, ["structured"]),  # no parser named
    (["--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"], False, ["tool", "structured"]),
    (["--tool-call-parser=qwen3_coder"], True, ["tool", "tool-auto", "structured"]),
    (["--enable-auto-tool-choice"], False, ["tool", "structured"]),
    (["--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"], True,
     ["reasoning", "tool", "tool-auto", "structured"]),
    ([], True, ["tool-auto", "structured"]),
])
def test_which_probes_a_server_gets(args: list[str], tool_auto: bool, expected: list[str]) -> None:
    assert P.probes_for(args, tool_auto=tool_auto) == expected


def test_a_failed_probe_fails_the_stage_with_its_class_and_remediation() -> None:
    result = ProbeResult(name="reasoning", ok=False, status_code=200, failure_class="reasoning_probe_failed",
                         error="message.reasoning is empty")
    err = P.ProbeFailed(result)
    assert err.failure_class == "reasoning_probe_failed" and "--reasoning-parser" in err.remediation
    assert "qwen3" in err.remediation and err.stage == "reasoning-probe" and err.result is result
    assert str(err) == "reasoning-probe: the reasoning probe failed: message.reasoning is empty"
    tool = P.ProbeFailed(ProbeResult(name="tool-auto", ok=False, failure_class="tool_call_probe_failed"))
    assert "--enable-auto-tool-choice --tool-call-parser qwen3_coder" in tool.remediation
    assert "xgrammar" in tool.remediation
    assert P.ProbeFailed(ProbeResult(name="structured", ok=False)).failure_class == "structured_output_probe_failed"
    passed = ProbeResult(name="structured", ok=True)
    P.check([passed])
    with pytest.raises(P.ProbeFailed) as info:
        P.check([passed, result])
    assert info.value.result is result


def test_an_unknown_probe_is_a_user_error() -> None:
    with pytest.raises(UserError, match="unknown probe 'vision'"):
        P.get_probe("vision")


# --- the runner against a FAKE server ---------------------------------------------------------------


class FakeChatServer:
    """A FAKE OpenAI-compatible chat endpoint (test-only; not vLLM) on 127.0.0.1: every
    ``POST /v1/chat/completions`` gets ``answer`` (a JSON value, sent as JSON) or, by ``mode``, one of the
    faults no real vLLM makes. Request bodies and headers are kept."""

    def __init__(self) -> None:
        self.answer: Any = completion({"content": '{"answer":"yes","sure":true}'})
        self.status = 200
        self.mode = "json"
        self.delay_s = 0.0
        self.requests: list[tuple[dict[str, str], Any]] = []
        self.sent = 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _send(self, status: int, body: bytes, **headers: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k.replace("_", "-"), v)
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.requests.append((dict(self.headers.items()), json.loads(raw)))
                time.sleep(owner.delay_s)
                mode = owner.mode
                if mode == "json":
                    self._send(owner.status, json.dumps(owner.answer).encode())
                elif mode == "echo-headers":
                    msg = f"bad request; you sent {dict(self.headers.items())}" + " padding" * 200
                    self._send(400, json.dumps({"error": {"message": msg}}).encode())
                elif mode == "html":
                    self._send(200, b"<html><body>gateway</body></html>")
                elif mode == "huge":
                    self._send(200, b'{"choices": [{"message": {"content": "' + b"a" * (2 << 20) + b'"}}]}')
                elif mode == "gzip":
                    self._send(200, gzip.compress(json.dumps(owner.answer).encode()), Content_Encoding="gzip")
                elif mode == "deep":
                    self._send(200, b'{"choices": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
                elif mode == "endless":
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    chunk = b"x" * 65536
                    try:
                        for _ in range(10_000):  # 640 MB if nobody hangs up
                            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                            owner.sent += len(chunk)
                    except OSError:
                        pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request: object, client_address: object) -> None:
                pass

        self._server = Server(("127.0.0.1", 0), Handler)
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def fake() -> Iterator[FakeChatServer]:
    server = FakeChatServer()
    yield server
    server.close()


def probe(base_url: str, name: str, timeout_s: float = 30.0, key: str = KEY) -> ProbeResult:
    async def go() -> ProbeResult:
        async with VllmClient(base_url, "m", api_key=key) as client:
            return await P.run_probe(client, name, timeout_s=timeout_s)

    return run_sync(go)


def test_a_passing_probe_records_status_latency_and_detail(fake: FakeChatServer) -> None:
    result = probe(fake.base_url, "structured")
    assert result.ok and result.status_code == 200 and result.failure_class == "" and result.error == ""
    assert result.detail == "{answer, sure} in 28 chars"
    assert result.latency_s is not None and 0 < result.latency_s < 10
    [(headers, body)] = fake.requests
    assert headers["Authorization"] == f"Bearer {KEY}" and headers["Accept-Encoding"] == "identity"
    assert body == P.structured_request("m")


def test_run_probes_keeps_the_order_and_checks_names_first(fake: FakeChatServer) -> None:
    fake.answer = completion({"content": None, "reasoning": "thinking",
                              "tool_calls": [tool_call("read_file", '{"path":"README.md"}')]})

    async def go(names: list[str]) -> list[ProbeResult]:
        async with VllmClient(fake.base_url, "m", api_key=KEY) as client:
            return await P.run_probes(client, names)

    results = run_sync(lambda: go(["reasoning", "tool", "structured"]))
    assert [(r.name, r.ok, r.failure_class) for r in results] == [
        ("reasoning", True, ""), ("tool", True, ""), ("structured", False, "structured_output_probe_failed")]
    with pytest.raises(UserError):
        run_sync(lambda: go(["reasoning", "nope"]))
    assert len(fake.requests) == 3


def test_an_error_echoing_the_key_is_scrubbed_and_bounded(fake: FakeChatServer) -> None:
    fake.mode = "echo-headers"
    result = probe(fake.base_url, "tool-auto")
    assert not result.ok and result.status_code == 400 and result.failure_class == "tool_call_probe_failed"
    assert result.error.startswith("HTTP 400: bad request; you sent") and len(result.error) <= 500
    assert KEY not in result.error and KEY not in result.model_dump_json()


@pytest.mark.parametrize(("mode", "error"), [
    ("html", "HTTP 200 but the body is not JSON (33 bytes)"),
    ("huge", "HTTP 200 with a body over 1,048,576 bytes"),
    ("gzip", "HTTP 200 with a gzip-encoded body (identity asked)"),
    ("deep", "HTTP 200 but the body is not JSON (200,013 bytes)"),
])
def test_bodies_no_vllm_sends_fail_the_probe(fake: FakeChatServer, mode: str, error: str) -> None:
    fake.mode = mode
    result = probe(fake.base_url, "reasoning")
    assert not result.ok and result.error == error and result.failure_class == "reasoning_probe_failed"


def test_an_endless_body_is_read_no_further_than_the_bound(fake: FakeChatServer) -> None:
    fake.mode = "endless"
    t0 = time.perf_counter()
    result = probe(fake.base_url, "structured")
    assert not result.ok and result.error == "HTTP 200 with a body over 1,048,576 bytes"
    assert time.perf_counter() - t0 < 10
    time.sleep(0.2)
    assert fake.sent < 64 << 20  # the server was hung up on, not read to the end


def test_a_server_that_does_not_answer_in_time(fake: FakeChatServer) -> None:
    fake.delay_s = 3.0
    result = probe(fake.base_url, "tool", timeout_s=0.5)
    assert not result.ok and result.error == "no answer within 0.5 s"
    assert result.latency_s is not None and result.latency_s < 2.5 and result.status_code is None


def test_no_server_at_all() -> None:
    from roost.net import free_port

    result = probe(f"http://127.0.0.1:{free_port()}", "structured")
    assert not result.ok and result.status_code is None and result.error.startswith("ConnectError")
    assert result.failure_class == "structured_output_probe_failed"


def test_which_probes_reads_the_arguments_as_vllm_does() -> None:
    # an abbreviation vLLM expands is the flag; --no-enable-auto-tool-choice turns it off (roost.vllm.argv)
    assert P.probes_for(["--tool-c", "qwen3_coder"]) == ["tool", "structured"]
    assert P.probes_for(["--enable-auto-tool-choice", "--no-enable-auto-tool-choice"]) == ["structured"]
