"""The capability probes: one small chat request each, sent after the health-wait, that proves the server
does what the recipe's clients (agentic coding tools) ask of it, not only that it answers text.

- ``reasoning``: a short prompt with thinking on. Passes when ``message.reasoning`` (``reasoning_content``
  on older vLLM) is non-empty and ``content`` holds no ``<think>``/``</think>``: the server runs a reasoning
  parser that keeps the thinking out of the answer. Without ``--reasoning-parser`` vLLM leaves the
  thinking in ``content`` and sends no ``reasoning``.
- ``tool``: one tool (``read_file``, a JSON-schema ``parameters`` object with a required property, sent
  with ``"strict": true``) and a named ``tool_choice``. Passes when ``message.tool_calls`` has a call of
  that function whose ``arguments`` parse as JSON and validate against the tool's schema (``jsonschema``).
  vLLM 0.24 and 0.32 refuse a named ``tool_choice`` with HTTP 400 unless ``--tool-call-parser`` is set.
  With ``qwen3_coder`` they constrain the call to Qwen's XML envelope (an xgrammar structural tag); the
  arguments are held to the schema when the tool is ``strict`` (0.32 leaves a non-strict tool's
  arguments free; 0.24 constrains them unless ``strict`` is false), hence ``strict`` here.
- ``tool-auto`` (optional; a profile with a real model asks for it): the same tool with
  ``tool_choice: "auto"`` and no ``strict``, as agentic tools send it. Passes when the server accepts it
  and its tool-call parser returns a call of ``read_file`` with JSON-object arguments. A server without
  ``--enable-auto-tool-choice`` answers HTTP 400; a random-weight model never calls the tool.
- ``structured``: ``response_format`` ``json_schema``. Passes when ``content`` parses as JSON and
  validates against the schema.

**Thinking off for the grammar probes.** The tool and structured probes send
``chat_template_kwargs: {"enable_thinking": false}``. With a reasoning parser on and thinking on, vLLM
(0.24 and 0.32) applies the grammar only after the model closes ``</think>``: a real model would spend
the probe's few tokens thinking, and a random-weight model, which never writes ``</think>``, puts every
token in ``message.reasoning`` and leaves ``content`` null (seen on both). With thinking off the Qwen
templates open the turn with an empty ``<think></think>`` pair, the qwen3 parser treats all output as
content (0.24 and 0.32 read ``enable_thinking``), and the grammar applies from the first token. Without a
reasoning parser the flag changes nothing the probe reads. A template that ignores the flag and always
thinks can leave the answer in ``reasoning``: the verdict says so.

**Whitespace.** vLLM's JSON grammars allow any amount of whitespace between tokens (xgrammar's
``any_whitespace``; Qwen's XML tool-call envelope likewise), unless the server is started with
``--structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}'`` (JSON only). A
real model writes the object in a few tokens; a random-weight model may write whitespace until
``max_tokens``. A cut answer fails the probe, and the verdict says it was cut.

Network answers are hostile: a body is read up to :data:`MAX_ANSWER_BYTES` (uncompressed: the request
asks for ``identity``) within ``timeout_s``, parsed with bounded depth, and anything that is not the
expected shape fails the probe with a reason; no probe raises for what a server does. Errors are scrubbed
of the API key (:meth:`VllmClient.scrub`) and bounded to :data:`MAX_ERROR_CHARS`.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

import httpx
import jsonschema

from roost.errors import StageFailed, UserError
from roost.failures import FailureClass
from roost.inputs.jsondoc import parse_json
from roost.inputs.text import shown
from roost.records import ProbeResult
from roost.vllm.argv import VllmArgv
from roost.vllm.client import VllmClient, body_message

ProbeName = Literal["reasoning", "tool", "tool-auto", "structured"]
PROBE_NAMES: tuple[ProbeName, ...] = ("reasoning", "tool", "tool-auto", "structured")

CHAT_PATH = "/v1/chat/completions"
MAX_ANSWER_BYTES = 1 << 20
"""The largest answer a probe reads (a probe's answer is a few hundred bytes)."""
MAX_ERROR_CHARS = 500
MAX_DETAIL_CHARS = 200

REASONING_FAILED = FailureClass.REASONING_PROBE_FAILED
TOOL_FAILED = FailureClass.TOOL_CALL_PROBE_FAILED
STRUCTURED_FAILED = FailureClass.STRUCTURED_OUTPUT_PROBE_FAILED

REASONING_REMEDIATION = (
    "The server did not keep the reasoning apart from the answer (no message.reasoning, or <think> tags left "
    "in content): start vLLM with --reasoning-parser for the model's family (qwen3 for Qwen3 / Qwen3.5 / "
    "Qwen3-Coder checkpoints; deepseek_r1, glm45, ... for others) and keep the chat template's thinking on."
)
TOOL_REMEDIATION = (
    "A tool call failed. A named tool_choice needs --tool-call-parser (qwen3_coder for the Qwen3 / Qwen3.5 "
    "family) and a working structured-output backend (xgrammar: look for a grammar error in vLLM's log, and "
    "check that the image's xgrammar patch is applied); tool_choice \"auto\", which agentic coding tools "
    "send, needs --enable-auto-tool-choice --tool-call-parser qwen3_coder."
)
STRUCTURED_REMEDIATION = (
    "A JSON-schema response_format did not come back as valid JSON in message.content: check the "
    "structured-output backend (xgrammar; --structured-outputs-config; a grammar error in vLLM's log) and, "
    "with a reasoning parser, that the chat template honours enable_thinking=false (otherwise the grammar "
    "waits for </think> and the answer stays in message.reasoning)."
)

THINK_TAGS = ("<think>", "</think>")

REASONING_PROMPT = "What is 17 + 25? Think it through step by step, then answer."
TOOL_PROMPT = "Read the project's README.md with the read_file tool."
STRUCTURED_PROMPT = "Is Python a programming language? Answer in JSON."

TOOL_NAME = "read_file"
TOOL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        # an enum: a grammar leaves any model a few tokens to write, never an open-ended string
        "path": {"type": "string", "enum": ["README.md", "pyproject.toml"], "description": "The file to read."},
    },
    "required": ["path"],
    "additionalProperties": False,
}
STRUCTURED_NAME = "verdict"
STRUCTURED_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "answer": {"type": "string", "enum": ["yes", "no"]},
        "sure": {"type": "boolean"},
    },
    "required": ["answer", "sure"],
    "additionalProperties": False,
}


class Verdict(NamedTuple):
    """What a probe's answer shows: passed or not, why not, and a short note of what came back."""

    ok: bool
    error: str = ""
    detail: str = ""


# --- requests ----------------------------------------------------------------------------------------


def _chat(model: str, prompt: str, max_tokens: int, *, thinking: bool, **extra: Any) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": False,
        "chat_template_kwargs": {"enable_thinking": thinking},
        **extra,
    }


def tool_definition(*, strict: bool) -> dict[str, Any]:
    """The probe's one tool, as an OpenAI ``tools`` entry (``strict``: hold the arguments to the schema)."""
    function: dict[str, Any] = {"name": TOOL_NAME, "description": "Read one file of the repository.",
                                "parameters": TOOL_PARAMETERS}
    if strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def reasoning_request(model: str, *, max_tokens: int = 32) -> dict[str, Any]:
    """A short prompt with thinking on: a reasoning parser puts the output in ``message.reasoning``."""
    return _chat(model, REASONING_PROMPT, max_tokens, thinking=True)


def tool_request(model: str, *, auto: bool = False, max_tokens: int = 128) -> dict[str, Any]:
    """``read_file`` offered and named in ``tool_choice`` (strict), or offered with ``"auto"`` (not strict)."""
    choice: Any = "auto" if auto else {"type": "function", "function": {"name": TOOL_NAME}}
    return _chat(model, TOOL_PROMPT, max_tokens, thinking=False, tools=[tool_definition(strict=not auto)],
                 tool_choice=choice)


def structured_request(model: str, *, max_tokens: int = 128) -> dict[str, Any]:
    """A ``json_schema`` ``response_format`` (:data:`STRUCTURED_SCHEMA`), thinking off."""
    return _chat(model, STRUCTURED_PROMPT, max_tokens, thinking=False,
                 response_format={"type": "json_schema",
                                  "json_schema": {"name": STRUCTURED_NAME, "schema": STRUCTURED_SCHEMA}})


# --- verdicts ----------------------------------------------------------------------------------------


def schema_error(instance: Any, schema: dict[str, Any]) -> str:
    """'' when ``instance`` validates against ``schema`` (JSON Schema 2020-12), else the most relevant reason."""
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(instance))
    if error is None:
        return ""
    where = "/".join(str(p) for p in error.absolute_path)
    return shown(f"{where + ': ' if where else ''}{error.message}", 200)


def _message(answer: Any) -> tuple[dict[str, Any] | None, str | None, str]:
    """(``choices[0].message``, its ``finish_reason``, why there is none) of a chat completion."""
    if not isinstance(answer, dict):
        return None, None, f"the answer is a JSON {type(answer).__name__}, not a chat completion"
    choices = answer.get("choices")
    if not isinstance(choices, list) or not choices:
        return None, None, "the chat completion has no choices"
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        return None, None, "the chat completion has no choices[0].message"
    finish = choice.get("finish_reason")
    return choice["message"], finish if isinstance(finish, str) else None, ""


def _text(message: dict[str, Any], *keys: str) -> str | None:
    """The first of ``keys`` that is a string in ``message`` (None when none is)."""
    for key in keys:
        value = message.get(key)
        if isinstance(value, str):
            return value
    return None


def _cut(finish: str | None) -> str:
    return " (cut at max_tokens: finish_reason \"length\")" if finish == "length" else ""


def judge_reasoning(answer: Any) -> Verdict:
    """Non-empty ``message.reasoning`` (or ``reasoning_content``) and no think tags in ``content``."""
    message, finish, problem = _message(answer)
    if message is None:
        return Verdict(False, problem)
    reasoning = message.get("reasoning") or message.get("reasoning_content")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return Verdict(False, f"message.content is a JSON {type(content).__name__}, not text")
    if reasoning is not None and not isinstance(reasoning, str):
        return Verdict(False, f"message.reasoning is a JSON {type(reasoning).__name__}, not text")
    tags = [t for t in THINK_TAGS if t in (content or "")]
    if tags:
        return Verdict(False, f"message.content carries {' and '.join(tags)}: the reasoning was not split from "
                              "the answer")
    if not reasoning or not reasoning.strip():
        where = f"all {len(content)} characters of output are in message.content" if content else "no output"
        return Verdict(False, f"message.reasoning is empty ({where}): the server runs no reasoning parser")
    return Verdict(True, detail=f"reasoning {len(reasoning)} chars, content {len(content or '')} chars"
                                f"{', cut at max_tokens' if finish == 'length' else ''}")


def _tool_calls(message: dict[str, Any]) -> list[dict[str, Any]]:
    calls = message.get("tool_calls")
    if not isinstance(calls, list):
        return []
    return [c for c in calls if isinstance(c, dict) and isinstance(c.get("function"), dict)]


def judge_tool(answer: Any, *, auto: bool = False) -> Verdict:
    """A call of ``read_file`` in ``message.tool_calls`` whose ``arguments`` are a JSON object (and, for a
    named ``tool_choice``, validate against :data:`TOOL_PARAMETERS`)."""
    message, finish, problem = _message(answer)
    if message is None:
        return Verdict(False, problem)
    calls = _tool_calls(message)
    names = [c["function"].get("name") for c in calls]
    mine = [c["function"] for c in calls if c["function"].get("name") == TOOL_NAME]
    if not mine:
        if calls:
            others = ", ".join(shown(n, 40) if isinstance(n, str) else repr(type(n).__name__) for n in names)
            return Verdict(False, f"tool calls of {others}, none of {TOOL_NAME}")
        content = _text(message, "content") or ""
        reasoning = _text(message, "reasoning", "reasoning_content") or ""
        return Verdict(False, f"no tool call in the answer (content {len(content)} chars, reasoning "
                              f"{len(reasoning)} chars){_cut(finish)}")
    raw = mine[0].get("arguments")
    if not isinstance(raw, str):
        return Verdict(False, f"the {TOOL_NAME} call's arguments are a JSON {type(raw).__name__}, not a JSON string")
    try:
        args = parse_json(raw, "arguments", "")
    except UserError:
        return Verdict(False, f"the {TOOL_NAME} call's arguments are not JSON: {shown(raw, 80)!r}{_cut(finish)}")
    if not isinstance(args, dict):
        return Verdict(False, f"the {TOOL_NAME} call's arguments are a JSON {type(args).__name__}, not an object")
    problem = schema_error(args, TOOL_PARAMETERS)
    keys = ", ".join(shown(k, 40) for k in sorted(args))
    if problem and not auto:
        return Verdict(False, f"the {TOOL_NAME} call's arguments do not fit its schema: {problem}{_cut(finish)}")
    note = f"; arguments off-schema: {problem}" if problem else ""
    return Verdict(True, detail=f"{TOOL_NAME}({keys}) of {len(calls)} call(s){note}")


def judge_tool_auto(answer: Any) -> Verdict:
    return judge_tool(answer, auto=True)


def judge_structured(answer: Any) -> Verdict:
    """``message.content`` parses as JSON and validates against :data:`STRUCTURED_SCHEMA`."""
    message, finish, problem = _message(answer)
    if message is None:
        return Verdict(False, problem)
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        return Verdict(False, f"message.content is a JSON {type(content).__name__}, not text")
    if not content or not content.strip():
        reasoning = _text(message, "reasoning", "reasoning_content") or ""
        where = (f"; the {len(reasoning)} characters of output are in message.reasoning (the grammar waits for "
                 "</think> while the model thinks)") if reasoning else ""
        return Verdict(False, f"message.content is empty{where}{_cut(finish)}")
    try:
        value = parse_json(content, "content", "")
    except UserError:
        blank = sum(c.isspace() for c in content)
        what = f"{blank} of them whitespace" if blank * 2 > len(content) else f"{shown(content.strip(), 60)!r}"
        return Verdict(False, f"message.content is not JSON ({len(content)} chars, {what}){_cut(finish)}")
    problem = schema_error(value, STRUCTURED_SCHEMA)
    if problem:
        return Verdict(False, f"message.content does not fit the schema: {problem}")
    return Verdict(True, detail=f"{{{', '.join(shown(k, 40) for k in value)}}} in {len(content)} chars")


# --- the probes --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """One probe: its request, how its answer is judged, and what its failure is called."""

    name: ProbeName
    failure_class: str
    remediation: str
    request: Callable[[str], dict[str, Any]]
    judge: Callable[[Any], Verdict]


PROBES: dict[str, Probe] = {p.name: p for p in (
    Probe("reasoning", REASONING_FAILED, REASONING_REMEDIATION, reasoning_request, judge_reasoning),
    Probe("tool", TOOL_FAILED, TOOL_REMEDIATION, tool_request, judge_tool),
    Probe("tool-auto", TOOL_FAILED, TOOL_REMEDIATION, lambda m: tool_request(m, auto=True), judge_tool_auto),
    Probe("structured", STRUCTURED_FAILED, STRUCTURED_REMEDIATION, structured_request, judge_structured),
)}


def get_probe(name: str) -> Probe:
    try:
        return PROBES[name]
    except KeyError:
        raise UserError(f"unknown probe {shown(name, 40)!r}: choose from {', '.join(PROBES)}") from None


class ProbeFailed(StageFailed):
    """A probe failed: the landing fails with the probe's failure class and remediation."""

    failure_class: str = FailureClass.PROBE_FAILED

    def __init__(self, result: ProbeResult) -> None:
        probe = PROBES.get(result.name)
        super().__init__(f"{result.name}-probe", f"the {result.name} probe failed: {result.error}")
        self.failure_class = result.failure_class or (probe.failure_class if probe else type(self).failure_class)
        self.remediation = probe.remediation if probe else ""
        self.result = result


def check(results: Sequence[ProbeResult]) -> None:
    """Raise :class:`ProbeFailed` for the first failed probe."""
    for result in results:
        if not result.ok:
            raise ProbeFailed(result)


async def _exchange(client: VllmClient, body: dict[str, Any], timeout_s: float) -> tuple[int, bytes]:
    """POST ``body``; (status, at most :data:`MAX_ANSWER_BYTES` of the body). Raises ``httpx.HTTPError``,
    ``TimeoutError`` and ``ValueError`` (a body too large or compressed)."""
    content = json.dumps(body, separators=(",", ":"), allow_nan=False).encode()
    timeout = httpx.Timeout(connect=client.connect_timeout_s, read=timeout_s, write=60.0, pool=timeout_s)
    async with asyncio.timeout(timeout_s):
        resp = await client.send(CHAT_PATH, content, timeout=timeout, headers={"Accept-Encoding": "identity"})
        try:
            encoding = resp.headers.get("content-encoding", "identity").strip().lower()
            if encoding not in ("", "identity"):
                raise ValueError(f"HTTP {resp.status_code} with a {shown(encoding, 20)}-encoded body (identity asked)")
            data = bytearray()
            async for chunk in resp.aiter_raw():
                data += chunk
                if len(data) > MAX_ANSWER_BYTES:
                    raise ValueError(f"HTTP {resp.status_code} with a body over {MAX_ANSWER_BYTES:,} bytes")
            return resp.status_code, bytes(data)
        finally:
            await resp.aclose()


async def run_probe(client: VllmClient, name: str, *, timeout_s: float = 120.0) -> ProbeResult:
    """Send probe ``name`` to ``client``'s server and model and judge the answer; never raises for what
    the server does."""
    probe = get_probe(name)
    body = probe.request(client.model)

    def result(ok: bool, latency: float, status: int | None = None, error: str = "", detail: str = "") -> ProbeResult:
        return ProbeResult(name=probe.name, ok=ok, latency_s=round(latency, 4), status_code=status,
                           failure_class="" if ok else probe.failure_class,
                           error=shown(client.scrub(error), MAX_ERROR_CHARS) if error else "",
                           detail=shown(client.scrub(detail), MAX_DETAIL_CHARS) if detail else "")

    t0 = time.perf_counter()
    try:
        status, raw = await _exchange(client, body, timeout_s)
    except TimeoutError:
        return result(False, time.perf_counter() - t0, error=f"no answer within {timeout_s:g} s")
    except httpx.HTTPError as exc:
        return result(False, time.perf_counter() - t0, error=f"{type(exc).__name__}: {exc}")
    except ValueError as exc:
        return result(False, time.perf_counter() - t0, error=str(exc))
    latency = time.perf_counter() - t0
    if status != 200:
        return result(False, latency, status, f"HTTP {status}: {body_message(raw)}")
    try:
        answer = parse_json(raw, "answer", "")
    except UserError:
        return result(False, latency, status, f"HTTP 200 but the body is not JSON ({len(raw):,} bytes)")
    verdict = probe.judge(answer)
    return result(verdict.ok, latency, status, verdict.error, verdict.detail)


async def run_probes(client: VllmClient, names: Sequence[str], *, timeout_s: float = 120.0) -> list[ProbeResult]:
    """Every probe in ``names``, one after another (each is a few tokens; the order is kept)."""
    for name in names:
        get_probe(name)  # an unknown name fails before any request
    return [await run_probe(client, name, timeout_s=timeout_s) for name in names]


def probes_for(vllm_args: Sequence[str], *, tool_auto: bool = False) -> list[ProbeName]:
    """The probes a server started with ``vllm_args`` gets.

    - ``reasoning`` when ``--reasoning-parser`` names a parser (without one there is nothing to split);
    - ``tool`` when ``--tool-call-parser`` or ``--enable-auto-tool-choice`` is given (vLLM refuses a named
      ``tool_choice`` without a parser: a server not set up for tools is not probed for them);
    - ``tool-auto`` when the profile asks (a real model is needed for the model to call the tool);
    - ``structured`` always: JSON-schema output is vLLM's default grammar path (xgrammar, which the
      recipe's image patches), there for every server.
    """
    argv = VllmArgv(vllm_args)  # read as vLLM reads them: ``_`` spellings, ``--f=v``, the last value wins
    names: list[ProbeName] = []
    if (argv.get("--reasoning-parser") or "").strip():
        names.append("reasoning")
    if (argv.get("--tool-call-parser") or "").strip() or argv.enabled("--enable-auto-tool-choice"):
        names.append("tool")
    if tool_auto:
        names.append("tool-auto")
    names.append("structured")
    return names


__all__ = [
    "MAX_ANSWER_BYTES", "PROBES", "PROBE_NAMES", "REASONING_FAILED", "STRUCTURED_FAILED", "STRUCTURED_SCHEMA",
    "TOOL_FAILED", "TOOL_NAME", "TOOL_PARAMETERS", "Probe", "ProbeFailed", "ProbeName", "Verdict", "check",
    "get_probe", "judge_reasoning", "judge_structured", "judge_tool", "judge_tool_auto", "probes_for",
    "reasoning_request", "run_probe", "run_probes", "schema_error", "structured_request", "tool_definition",
    "tool_request",
]
