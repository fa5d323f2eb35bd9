"""Parity of ``roost.gateway.request.read_request`` with vLLM's own request models.

A deterministic corpus of bodies for both endpoints (every spelling of ``stream`` crossed with every
``stream_options`` variant, the spellings of ``n``, the shapes of a completion's ``prompt``) goes through
vLLM's ``ChatCompletionRequest`` / ``CompletionRequest`` ``model_validate`` in one process of the vLLM
venv, and through roost's reader here. For every body both must refuse, or both accept and read the same
stream, choices, prompts and usage options (vLLM's ``should_include_usage``).

roost declares only the fields the gateway reads, so a body vLLM refuses for a field roost does not read
may be accepted by roost: vLLM's 400 is then relayed, nothing is billed. Those cases are listed below by
reason (:data:`ROOST_ONLY`) and must be exactly the ones found; the other direction, vLLM accepting what
roost refuses, and any disagreement on what both accept, must never occur. (``n`` below 1 is not one of
them: vLLM's model takes it, its ``SamplingParams`` refuses it later, and roost reads it as vLLM's model does.)

The vLLM side is one process: importing vLLM (torch with it) takes 15-23 s on a 2-core machine, the
bodies well under a second.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from roost.gateway.metering import Endpoint
from roost.gateway.request import InvalidRequest, read_request
from roost.settings import vllm_python

# Runs in the vLLM venv: reads [{"endpoint", "body"}] from stdin, writes one result per body to argv[1]
# (a file: vLLM's logger writes to stdout). The prompt count is vLLM's own: its renderer turns ``prompt``
# and ``prompt_embeds`` into the prompts it answers with ``prompt_to_seq`` (renderers/online_renderer.py,
# ``preprocess_completion``); ``n`` None is one choice (the protocol's ``to_sampling_params``).
VLLM_SIDE = r"""
import json, sys, time
t0 = time.perf_counter()
from pydantic import ValidationError
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.entrypoints.openai.completion.protocol import CompletionRequest
from vllm.entrypoints.serve.utils.api_utils import should_include_usage
from vllm.renderers.inputs.preprocess import prompt_to_seq
import_s = time.perf_counter() - t0
MODELS = {"chat": ChatCompletionRequest, "completions": CompletionRequest}
out = []
for case in json.load(sys.stdin):
    try:
        req = MODELS[case["endpoint"]].model_validate(case["body"])
    except ValidationError as exc:
        errs = exc.errors(include_url=False, include_input=False)
        out.append({"ok": False, "error": "; ".join(
            ".".join(map(str, e["loc"])) + ": " + str(e["msg"]) for e in errs)})
        continue
    except Exception as exc:  # VLLMValidationError, ValueError from a before-validator
        out.append({"ok": False, "error": f"{type(exc).__name__}: {exc}"})
        continue
    if case["endpoint"] == "completions":
        prompts = (len(prompt_to_seq(req.prompt_embeds)) if req.prompt_embeds is not None else 0) + (
            len(prompt_to_seq(req.prompt)) if req.prompt is not None else 0)
    else:
        prompts = 1
    include, continuous = should_include_usage(req.stream_options, False)
    out.append({"ok": True, "stream": bool(req.stream), "n": req.n if req.n is not None else 1,
                "prompts": prompts, "usage": [include, continuous]})
with open(sys.argv[1], "w") as f:
    json.dump({"import_s": import_s, "results": out}, f)
"""

_ABSENT = object()
STREAMS: list[Any] = [_ABSENT, True, False, "true", "false", "yes", "no", "on", "off", "1", "0", "t", "f", "y", "n",
                      "TRUE", "maybe", "", 1, 0, 2, 1.0, 0.5, None, [], {}]
_USAGE_VALUES: list[Any] = [True, False, "yes", "false", 1, 0, "x"]
STREAM_OPTIONS: list[Any] = [
    _ABSENT, None, {},
    *({"include_usage": x} for x in _USAGE_VALUES),
    *({"continuous_usage_stats": y} for y in _USAGE_VALUES),
    *({"include_usage": x, "continuous_usage_stats": y} for x in _USAGE_VALUES for y in _USAGE_VALUES),
]
NS: list[Any] = [_ABSENT, 1, 2, "3", 0, -1, True, None, "x", 2.0, 2.5]
_EMBED = "AAAAAA=="  # bytes as vLLM's model reads them (pydantic takes a str for bytes)
PROMPTS: list[dict[str, Any]] = [
    {"prompt": "abc"}, {"prompt": ""}, {"prompt": ["a", "b"]}, {"prompt": [1, 2]}, {"prompt": [[1, 2], [3]]},
    {"prompt": [1, -2]}, {"prompt": []}, {"prompt": ["a", [1]]}, {"prompt": None}, {},
    {"prompt": None, "prompt_embeds": [_EMBED, _EMBED]}, {"prompt": None, "prompt_embeds": _EMBED},
    {"prompt": None, "prompt_embeds": []}, {"prompt": "", "prompt_embeds": [_EMBED]},
]
BASES: dict[Endpoint, dict[str, Any]] = {
    "chat": {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
    "completions": {"model": "tiny", "prompt": "abc"},
}
# bodies vLLM refuses on a field roost does not read (checked against vLLM's own message)
MESSAGES_CASES: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": 5}]},
    {"messages": "hi"},
]

_NEED_PROMPT = "Either prompt or prompt_embeds must be provided and non-empty."
# reason (a text vLLM's refusal contains) -> the cases roost accepts and vLLM refuses for it
ROOST_ONLY: dict[str, set[str]] = {
    _NEED_PROMPT: {
        'completions {"prompt": ""}',
        'completions {"prompt": "", "stream": "on"}',
        'completions {"prompt": "", "stream": "1", "n": "2", "stream_options": {"include_usage": true}}',
        'completions {"prompt": null}',
        'completions {"prompt": null, "stream": "on"}',
        'completions {"prompt": null, "stream": "1", "n": "2", "stream_options": {"include_usage": true}}',
        "completions {}",
        'completions {"stream": "on"}',
        'completions {"stream": "1", "n": "2", "stream_options": {"include_usage": true}}',
        'completions {"prompt": null, "prompt_embeds": []}',
        'completions {"prompt": null, "prompt_embeds": [], "stream": "on"}',
        'completions {"prompt": null, "prompt_embeds": [], "stream": "1", "n": "2", "stream_options": {"include_usage": true}}',
    },
    "messages": {  # the chat messages' content: roost does not read it
        'chat {"messages": [{"role": "user", "content": 5}]}',
        'chat {"messages": "hi"}',
    },
}


def _body(endpoint: Endpoint, **fields: Any) -> tuple[str, dict[str, Any]]:
    """The case's name and its body: the endpoint's base with ``fields`` (an ``_ABSENT`` field removed;
    ``prompt_shape``: the completion's prompt fields, replacing the base's). The name is the body as JSON
    without ``model`` and the chat's usual ``messages``."""
    varied = {k: v for k, v in fields.items() if v is not _ABSENT}
    body = dict(BASES[endpoint])
    if "prompt_shape" in varied:
        body.pop("prompt")
        body.update(varied.pop("prompt_shape"))
    body.update(varied)
    shown = {k: v for k, v in body.items() if k != "model" and not (k == "messages" and v == BASES["chat"][k])}
    return f"{endpoint} {json.dumps(shown)}", body


def corpus() -> dict[str, tuple[Endpoint, dict[str, Any]]]:
    """Case name -> (endpoint, body), deterministic, without duplicates."""
    cases: dict[str, tuple[Endpoint, dict[str, Any]]] = {}

    def add(endpoint: Endpoint, **fields: Any) -> None:
        name, body = _body(endpoint, **fields)
        cases.setdefault(name, (endpoint, body))

    for endpoint in BASES:
        for stream in STREAMS:
            for opts in STREAM_OPTIONS:
                add(endpoint, stream=stream, stream_options=opts)
        for n in NS:
            for stream in (_ABSENT, True, "yes"):
                add(endpoint, n=n, stream=stream)
    for shape in PROMPTS:
        for stream in (_ABSENT, "on"):
            add("completions", prompt_shape=shape, stream=stream)
        add("completions", prompt_shape=shape, stream="1", n="2", stream_options={"include_usage": True})
    for fields in MESSAGES_CASES:
        add("chat", **fields)
    return cases


def _vllm_readings(cases: dict[str, tuple[Endpoint, dict[str, Any]]], tmp_path: Path) -> tuple[list[dict[str, Any]], float]:
    py = vllm_python()
    if not py.exists():
        pytest.fail(f"no vLLM venv at {py} (ROOST_VLLM_PYTHON): run scripts/bootstrap, which makes it; "
                    "this parity test needs vLLM's own request models")
    out = tmp_path / "vllm.json"
    payload = json.dumps([{"endpoint": e, "body": b} for e, b in cases.values()])
    proc = subprocess.run([str(py), "-c", VLLM_SIDE, str(out)], input=payload, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0 and out.exists(), f"vLLM side failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    got = json.loads(out.read_text())
    return got["results"], got["import_s"]


def _roost_reading(endpoint: Endpoint, body: dict[str, Any]) -> dict[str, Any]:
    try:
        r = read_request(endpoint, json.loads(json.dumps(body)))
    except InvalidRequest as exc:
        return {"ok": False, "error": f"{exc.param}: {exc.message}"}
    return {"ok": True, "stream": r.stream, "n": r.n, "prompts": r.prompts,
            "usage": [r.include_usage, r.continuous_usage]}


def test_roost_reads_every_body_as_vllms_own_models_read_it(tmp_path: Path) -> None:
    cases = corpus()
    t0 = time.perf_counter()
    vllm, import_s = _vllm_readings(cases, tmp_path)
    vllm_s = time.perf_counter() - t0
    assert len(vllm) == len(cases)
    roost_only: dict[str, str] = {}  # case -> vLLM's refusal
    vllm_only: list[str] = []
    differ: list[str] = []
    agree = 0
    for (name, (endpoint, body)), theirs in zip(cases.items(), vllm, strict=True):
        ours = _roost_reading(endpoint, body)
        if ours["ok"] and not theirs["ok"]:
            roost_only[name] = theirs["error"]
        elif theirs["ok"] and not ours["ok"]:
            vllm_only.append(f"{name}: vLLM reads {theirs}, roost refuses ({ours['error']})")
        elif ours["ok"] and ours != theirs:
            differ.append(f"{name}: vLLM {theirs} != roost {ours}")
        else:
            agree += 1
    print(f"request parity: {len(cases)} bodies, {agree} agreements, {len(roost_only)} refused by vLLM only "
          f"(on fields roost does not read); vLLM side {vllm_s:.1f} s (import {import_s:.1f} s)")
    assert not vllm_only, "vLLM accepts, roost refuses:\n" + "\n".join(vllm_only)
    assert not differ, "both accept, readings differ:\n" + "\n".join(differ)
    expected = {name for names in ROOST_ONLY.values() for name in names}
    assert set(roost_only) == expected, (
        f"roost accepts, vLLM refuses: unexpected {sorted(set(roost_only) - expected)}, "
        f"no longer {sorted(expected - set(roost_only))}")
    for reason, names in ROOST_ONLY.items():
        for name in names:
            assert reason in roost_only[name], (name, roost_only[name])


def test_the_corpus_covers_what_it_names() -> None:
    cases = corpus()
    assert 3000 < len(cases) < 4000
    bodies = [b for _, b in cases.values()]
    for spelling in STREAMS[1:]:
        assert any(b.get("stream", _ABSENT) == spelling and type(b.get("stream")) is type(spelling) for b in bodies)
    assert any(b.get("prompt_embeds") == [_EMBED, _EMBED] and b["prompt"] is None for b in bodies)
