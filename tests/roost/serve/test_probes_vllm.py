"""The capability probes against real vLLM CPU servers of the tiny random-weight Qwen3: 0.32 without parsers,
0.24.0 (the recipes' release) with them.

The session's server (``vllm_server``: no reasoning parser, no tool parser) fails what it is not set up for,
each for vLLM's own reason: no ``message.reasoning``; a named or ``"auto"`` ``tool_choice`` refused with
HTTP 400 (vLLM needs ``--tool-call-parser`` for both, and ``--enable-auto-tool-choice`` for ``"auto"``). Its
structured request is accepted, but under vLLM's default JSON grammar (any whitespace between tokens) the
random-weight model writes whitespace until ``max_tokens``: the answer is cut and the probe fails, saying so.

The session's vLLM 0.24.0 server (``vllm024_server``), with the recipe's ``--reasoning-parser qwen3
--enable-auto-tool-choice --tool-call-parser qwen3_coder``, passes the reasoning, named tool and structured probes. Two settings make a
random-weight model's grammar-constrained output complete in a few tokens; a real model needs neither:

- ``--structured-outputs-config {"backend": "xgrammar", "disable_any_whitespace": true}``: compact JSON, so
  the enum-valued schemas leave exactly one token path (the structured answer is ``{"answer":"yes",...}``);
- ``VLLM_ENFORCE_STRICT_TOOL_CALLING=0``: vLLM (0.24 and 0.32) otherwise constrains a ``qwen3_coder`` call to
  Qwen's XML envelope (an xgrammar structural tag) whose whitespace is unbounded and not affected by the
  setting above; the random model then writes whitespace after ``<function=read_file>`` until ``max_tokens``
  and vLLM returns ``arguments: "{}"``, which the probe rightly fails. With the variable off, the named call
  is the JSON-schema grammar and vLLM wraps the JSON into ``tool_calls``: the answer the probe reads is the
  same shape either way.

``tool-auto`` is accepted there and makes no call (random weights). The accuracy runner reads the reasoning
that server returns (``message.reasoning``) through its own request path.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Sequence
from typing import Any

import httpx
import pytest
from support.flow_logs import run_log_messages

from roost.profiles import LOCAL
from roost.records import ProbeResult
from roost.serve import probes as P
from roost.vllm.client import VllmClient, run_sync

pytestmark = pytest.mark.slow

PARSER_ARGS = ["--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder"]
RANDOM_WEIGHT_ARGS = [a for a in LOCAL.vllm_overrides if a.startswith("--structured-outputs-config")]
"""The demo profile's compact-JSON setting (with its ``server_env``: plain-JSON named tool calls)."""


class Served:
    def __init__(self, base_url: str, model: str, api_key: str, vllm_args: list[str]) -> None:
        self.base_url, self.model, self.api_key, self.vllm_args = base_url, model, api_key, vllm_args


def run(server: Any, names: Sequence[str]) -> list[ProbeResult]:
    async def go() -> list[ProbeResult]:
        async with VllmClient(server.base_url, server.model, api_key=server.api_key) as client:
            return await P.run_probes(client, names, timeout_s=300)

    return run_sync(go)


@pytest.fixture(scope="module")
def parser_server(vllm024_server: Any) -> Served:
    """The session's vLLM 0.24.0 server (the recipes' release): the recipe's parsers, prefix caching, chunked
    prefill, and the demo profile's two random-weight settings above (``tests/conftest.py``)."""
    return Served(vllm024_server.base_url, "tiny", vllm024_server.api_key, list(vllm024_server.spec.vllm_args))


# --- the session's server: no parsers ------------------------------------------------------------------


def test_a_server_without_parsers_fails_reasoning_and_tools(vllm_server: Any) -> None:
    key = vllm_server.api_key
    assert P.probes_for(vllm_server.spec.vllm_args) == ["structured"]
    reasoning, tool, auto = run(vllm_server, ["reasoning", "tool", "tool-auto"])

    assert not reasoning.ok and reasoning.status_code == 200 and reasoning.failure_class == "reasoning_probe_failed"
    assert reasoning.error.startswith("message.reasoning is empty (all ") and "no reasoning parser" in reasoning.error

    # vLLM 0.32 refuses a named tool_choice without a tool parser: it is not the grammar alone
    assert not tool.ok and tool.status_code == 400 and tool.failure_class == "tool_call_probe_failed"
    assert tool.error == 'HTTP 400: tool_choice=function "read_file" requires --tool-call-parser to be set'
    assert not auto.ok and auto.status_code == 400 and auto.failure_class == "tool_call_probe_failed"
    assert auto.error == ('HTTP 400: "auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                          "to be set")
    for r in (reasoning, tool, auto):
        assert key not in r.model_dump_json() and r.latency_s is not None and r.latency_s < 120
    err = P.ProbeFailed(auto)
    assert err.failure_class == "tool_call_probe_failed" and "--enable-auto-tool-choice" in err.remediation


def test_structured_output_on_the_default_grammar_is_cut_for_random_weights(vllm_server: Any) -> None:
    """Accepted and grammar-constrained, but any whitespace is allowed: the random model writes ``{`` and then
    whitespace until max_tokens, so the JSON never closes (the parser server below, compact, passes)."""
    [result] = run(vllm_server, ["structured"])
    assert not result.ok and result.status_code == 200, result
    assert result.failure_class == "structured_output_probe_failed"
    assert result.error.startswith("message.content is not JSON (") and "of them whitespace)" in result.error
    assert result.error.endswith(
        'cut at max_tokens: finish_reason "length")')


# --- a server with the recipe's parsers ---------------------------------------------------------------


def test_the_recipes_parsers_pass_reasoning_tool_and_structured(parser_server: Served) -> None:
    names = P.probes_for(parser_server.vllm_args)
    assert names == ["reasoning", "tool", "structured"]
    results = run(parser_server, names)
    assert [(r.name, r.ok, r.status_code) for r in results] == [
        ("reasoning", True, 200), ("tool", True, 200), ("structured", True, 200)], results
    reasoning, tool, structured = results
    assert reasoning.detail.startswith("reasoning ") and reasoning.detail.endswith(
        "content 0 chars, cut at max_tokens")  # a model that never closes </think>: all of it is reasoning
    assert tool.detail == "read_file(path) of 1 call(s)"
    assert structured.detail.startswith("{answer, sure} in ")
    for r in results:
        assert r.failure_class == "" and r.error == "" and r.latency_s is not None and 0 < r.latency_s < 120
    P.check(results)


def test_the_answers_the_probes_judged(parser_server: Served) -> None:
    """What vLLM returned, read directly: the tool call's arguments are the compact JSON of the one valid
    path, the structured answer is in content (not reasoning), the reasoning probe's content is null."""
    headers = {"Authorization": f"Bearer {parser_server.api_key}"}

    def ask(body: dict[str, Any]) -> dict[str, Any]:
        resp = httpx.post(f"{parser_server.base_url}/v1/chat/completions", json=body, headers=headers, timeout=300)
        assert resp.status_code == 200, resp.text
        message: dict[str, Any] = resp.json()["choices"][0]["message"]
        return message

    tool = ask(P.tool_request("tiny"))
    [call] = tool["tool_calls"]
    assert call["function"]["name"] == "read_file" and json.loads(call["function"]["arguments"]) in (
        {"path": "README.md"}, {"path": "pyproject.toml"})  # 0.32 writes compact JSON, 0.24.0 a space after ':'
    structured = ask(P.structured_request("tiny"))
    assert structured["reasoning"] is None and P.schema_error(json.loads(structured["content"]), P.STRUCTURED_SCHEMA) == ""
    reasoning = ask(P.reasoning_request("tiny"))
    assert reasoning["content"] is None and reasoning["reasoning"]


def test_tool_auto_is_accepted_and_random_weights_make_no_call(parser_server: Served) -> None:
    [auto] = run(parser_server, ["tool-auto"])
    assert not auto.ok and auto.status_code == 200 and auto.failure_class == "tool_call_probe_failed"
    assert auto.error.startswith("no tool call in the answer (content ") and auto.error.endswith(
        'cut at max_tokens: finish_reason "length")')


def test_the_accuracy_runner_reads_message_reasoning(parser_server: Served) -> None:
    """One question through the eval code path (``ask_all`` -> ``chat_body`` -> ``score_response``): its
    recorded reasoning is the server's ``message.reasoning``, and no answer is read out of it."""
    from roost.eval.runner import ask_all, chat_body
    from roost.eval.suites import Question, Sampling, get_task

    task = get_task("gsm8k")
    q = Question(id="probe-q1", text="Tom has 3 apples and buys 4 more. How many now?", reference="7")
    sampling = Sampling(temperature=0.0, max_tokens=24, thinking=True, concurrency=1)

    async def go() -> Any:
        async with VllmClient(parser_server.base_url, "tiny", api_key=parser_server.api_key) as client:
            return await ask_all(client, task, [q], "tiny", sampling, 0, log=None, done={})

    answer = asyncio.run(go())["probe-q1"]
    direct = httpx.post(f"{parser_server.base_url}/v1/chat/completions", timeout=300,
                        json=chat_body(task, q, "tiny", sampling, 0),
                        headers={"Authorization": f"Bearer {parser_server.api_key}"}).json()
    message = direct["choices"][0]["message"]
    assert message["content"] is None and message["reasoning"]
    assert answer.reasoning == message["reasoning"].strip() and answer.answer == ""
    assert answer.verdict == "truncated" and answer.output_tokens == 24


def test_the_probes_task_logs_without_the_key(prefect_api: str, parser_server: Served) -> None:
    from prefect import flow
    from prefect.context import get_run_context
    from pydantic import SecretStr

    from tasks.probes import probes_task

    @flow
    def probe_flow() -> tuple[list[ProbeResult], str]:
        ctx = get_run_context()
        results = probes_task(parser_server.base_url, "tiny", SecretStr(parser_server.api_key),
                              ["reasoning", "tool-auto"])
        return results, str(ctx.flow_run.id)  # type: ignore[union-attr]

    results, run_id = probe_flow()
    assert [(r.name, r.ok) for r in results] == [("reasoning", True), ("tool-auto", False)]
    messages = run_log_messages(uuid.UUID(run_id), flush_s=5)
    assert any(m.startswith("reasoning probe passed in ") for m in messages), messages
    assert any(m.startswith("tool-auto probe failed after ") and "tool_call_probe_failed" in m for m in messages)
    assert all(parser_server.api_key not in m for m in messages)
