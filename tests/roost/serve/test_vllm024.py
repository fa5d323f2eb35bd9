"""vLLM 0.24.0, the vLLM of NGC 26.07 (the image every recipe serves with), as a second serving venv.

The host ``cpu-vllm-0-24`` names the venv ``scripts/bootstrap`` builds (``HostProfile.vllm_venv``); the
``vllm024_server`` session fixture serves the tiny model from it with the recipes' serving settings. Proven
here on 0.24.0 itself: its own ``vllm serve`` parser accepts the argument list every built-in profile plans,
its registries know the parsers they name, roost reads its start-up log in its own wording, classifies its
refusal of a pool too small as it does 0.32's, and the process backend really runs it.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import replicas
from typer.testing import CliRunner

from roost.cli import app
from roost.errors import UserError
from roost.hosts import CPU, HOSTS, HostProfile, get_host
from roost.net import free_port
from roost.profiles import PROFILES
from roost.serve.backends import backend_for
from roost.serve.base import ServeSpec
from roost.serve.diagnose import diagnose
from roost.serve.health import MILESTONES, ServerExited, wait_until_ready
from roost.serve.phases import startup_phases
from roost.serve.process import ProcessBackend, vllm_command
from roost.serve.vllm_log import log_message, parse_vllm_log
from roost.settings import vllm_python, vllm_python_for

HOST = "cpu-vllm-0-24"
VERSION = "0.24.0"
LOGS = Path(__file__).parent / "logs"

# --- the host and its venv (pure) --------------------------------------------------------------------


def test_the_host_names_the_venv_bootstrap_builds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    host = get_host(HOST)
    assert HOSTS[HOST] is host and host.backend == "process" and host.vllm_venv == "vllm-venv-0.24.0"
    assert host.model_dump(exclude={"name", "description", "vllm_venv", "health_timeout_s"}) == CPU.model_dump(
        exclude={"name", "description", "vllm_venv", "health_timeout_s"})  # otherwise the CPU host
    monkeypatch.setenv("ROOST_VLLM_VENVS", str(tmp_path))
    assert vllm_python_for("vllm-venv-0.24.0") == tmp_path / "vllm-venv-0.24.0" / "bin" / "python"
    assert vllm_python_for("/opt/vllm-x") == Path("/opt/vllm-x/bin/python")
    assert vllm_python_for("") == vllm_python()  # ROOST_VLLM_PYTHON, else $ROOST_HOME/vllm-venv
    spec = ServeSpec(model_dir=tmp_path, served_model_name="tiny", port=8000)
    assert backend_for(host).start_plan(spec).command[0] == str(tmp_path / "vllm-venv-0.24.0" / "bin" / "python")
    assert backend_for(CPU).start_plan(spec).command[0] == str(vllm_python())


@pytest.mark.parametrize("venv", ["../vllm-venv", "a//b", "a/", "/opt/../etc", "./v", "/"])
def test_a_venv_with_empty_or_dot_parts_is_refused(venv: str) -> None:
    with pytest.raises(UserError, match=r"^vllm_venv .*without empty, '\.' or '\.\.' parts$"):
        HostProfile.model_validate({**CPU.model_dump(), "name": "box", "vllm_venv": venv})


def test_a_missing_venv_names_the_host_field_and_bootstrap(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ROOST_VLLM_VENVS", str(tmp_path))
    host = HostProfile.model_validate({**get_host(HOST).model_dump(), "name": "box", "vllm_venv": "vllm-venv-9.9"})
    with pytest.raises(UserError) as info:
        ProcessBackend(host).prepare()
    assert str(info.value) == (
        f"vLLM interpreter {tmp_path}/vllm-venv-9.9/bin/python not found (host box's vllm_venv 'vllm-venv-9.9'): "
        f"run `bash scripts/bootstrap`, which builds the vLLM venvs under {tmp_path} (ROOST_VLLM_VENVS), or point "
        "the host's vllm_venv at a venv that has vLLM")


def test_0_24_0_phase_wording() -> None:
    """0.24.0 says "torch.compile took" (older releases "takes") and puts the compile time in its engine line."""
    t = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    at = [t + dt.timedelta(seconds=s) for s in (100, 130, 200, 201)]
    lines = [(at[0], "(Worker pid=310) INFO 07-27 10:11:12 [gpu_model_runner.py:5256] Model loading took 65.53 GiB "
                     "memory and 99.5 seconds"),
             (at[1], "(Worker pid=310) INFO 07-27 10:11:42 [monitor.py:52] torch.compile took 21.30 s in total"),
             (at[2], "(EngineCore pid=231) INFO 07-27 10:12:52 [core.py:338] init engine (profile, create kv cache, "
                     "warmup model) took 98.10 s (compilation: 21.30 s)"),
             (at[3], "(APIServer pid=1) INFO:     Application startup complete.")]
    p = startup_phases(lines, t, t + dt.timedelta(seconds=201.5))
    assert (p.load_s, p.compile_s, p.ready_s, p.engine_init_s, p.torch_compile_s) == (100.0, 100.0, 1.5, 98.1, 21.3)
    assert startup_phases([lines[0], lines[2]], t, None).torch_compile_s == 21.3  # from the engine line alone


# --- (a) 0.24.0's own `vllm serve` parser on every built-in profile's argument list ---------------------

# The checkpoints the Spark profiles are planned from without the Hub: header-exact replicas (sparse files),
# as tests/roost/commands/test_plan_command.py plans them; the demo profile plans the session's tiny model.
PROFILE_REPLICAS = {
    "ornith-35b": replicas.ornith_35b_a3b,
    "ornith-9b": replicas.ornith_9b,
    "ornith-1.5-35b-a3b-nvfp4": replicas.nvfp4_moe_mtp,
}
DEMO_REPO = "roost-demo/tiny-qwen3"

# The recipes' serving flags (hardcoded: they parse today, whatever the profiles carry yet).
RECIPE_FLAGS = ["--reasoning-parser", "qwen3", "--enable-auto-tool-choice", "--tool-call-parser", "qwen3_coder",
                "--enable-prefix-caching", "--enable-chunked-prefill", "--gpu-memory-utilization", "0.7"]

# Run by 0.24.0's interpreter: parse each argument list as `python -m vllm.entrypoints.openai.api_server` does
# (vllm/entrypoints/openai/api_server.py __main__: make_arg_parser(FlexibleArgumentParser()), parse_args,
# validate_parsed_serve_args), then build the engine arguments from it (AsyncEngineArgs.from_cli_args, what
# the server does next); a refused list is parsed again flag by flag to name the flag(s) refused. Also lists
# the reasoning and tool-call parser names 0.24.0 registers. Reads {name: argv} from argv[1], writes argv[2]
# (vLLM logs to stdout).
PARSE_SCRIPT = r"""
import json, sys
import vllm
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.entrypoints.openai.cli_args import make_arg_parser, validate_parsed_serve_args
from vllm.reasoning import ReasoningParserManager
from vllm.tool_parsers import ToolParserManager
from vllm.utils.argparse_utils import FlexibleArgumentParser

class Refused(Exception):
    pass

class Parser(FlexibleArgumentParser):
    def error(self, message):  # argparse prints the usage and exits 2: keep the message instead
        raise Refused(message)

def parse(argv):
    args = make_arg_parser(Parser(description="vLLM OpenAI-Compatible RESTful API server.")).parse_args(argv)
    validate_parsed_serve_args(args)
    AsyncEngineArgs.from_cli_args(args)
    return args

def said(exc):
    return str(exc) if isinstance(exc, Refused) else f"{type(exc).__name__}: {exc}"

def groups(argv):  # each flag with the values that follow it
    out = []
    for a in argv:
        if a.startswith("-") or not out:
            out.append([a])
        else:
            out[-1].append(a)
    return out

cases = json.load(open(sys.argv[1]))
results = {}
for name, case in cases.items():
    base, argv = case["base"], case["base"] + case["args"]
    try:
        args = parse(argv)
    except Exception as exc:
        refused = []
        for group in groups(case["args"]):
            try:
                parse(base + group)
            except Exception as one:
                refused.append({"flag": " ".join(group), "message": said(one)})
        results[name] = {"ok": False, "message": said(exc), "refused": refused}
        continue
    results[name] = {"ok": True, "reasoning_parser": args.reasoning_parser, "tool_call_parser": args.tool_call_parser,
                     "enable_auto_tool_choice": args.enable_auto_tool_choice}
json.dump({"version": vllm.__version__, "results": results,
           "reasoning_parsers": ReasoningParserManager.list_registered(),
           "tool_parsers": ToolParserManager.list_registered()}, open(sys.argv[2], "w"))
"""


def planned_argv(name: str, model: Path) -> list[str]:
    """``roost plan MODEL --profile NAME --json``'s ``vllm_args`` as the process backend starts vLLM with them:
    ``--model X --host H --port P`` first (``vllm_command`` without the interpreter and module)."""
    r = CliRunner().invoke(app, ["plan", str(model), "--profile", name, "--json"])
    assert r.exit_code in (0, 1), f"roost plan --profile {name}: exit {r.exit_code}: {r.stderr or r.output}"
    plan = json.loads(r.stdout)  # exit 1: a plan that does not fit still lists the arguments it would serve with
    spec = PROFILES[name].serve_spec(model, plan["vllm_args"])
    return vllm_command(spec, Path("python"))[3:]


@pytest.fixture(scope="module")
def profile_argvs(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    root = tmp_path_factory.mktemp("vllm024-plans")
    out: dict[str, list[str]] = {}
    for name, prof in sorted(PROFILES.items()):
        if prof.repo_id == DEMO_REPO:
            model = tiny_model
        elif name in PROFILE_REPLICAS:
            model = replicas.write_replica(PROFILE_REPLICAS[name](), root / name)
        else:
            pytest.fail(f"built-in profile {name} ({prof.repo_id}) has no local checkpoint to plan from: add a "
                        "replica of it to PROFILE_REPLICAS")
        out[name] = planned_argv(name, model)
    return out


def test_0_24_0_parses_every_profiles_argument_list(profile_argvs: dict[str, list[str]], tiny_model: Path,
                                                    tmp_path: Path) -> None:
    """One 0.24.0 interpreter parses every built-in profile's planned argument list and the recipe's flags."""
    assert set(profile_argvs) == set(PROFILES)
    # a directory that exists (the engine arguments take any other --model for a Hub repository id)
    base = ["--model", str(tiny_model), "--host", "127.0.0.1", "--port", "8000"]
    cases: dict[str, dict[str, list[str]]] = {
        f"profile {name}": {"base": argv[:6], "args": argv[6:]} for name, argv in profile_argvs.items()}
    for name, argv in profile_argvs.items():
        assert argv[:6:2] == ["--model", "--host", "--port"], name  # what the split above relies on
    cases["the recipe's serving flags"] = {"base": base, "args": RECIPE_FLAGS}
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    python = vllm_python_for(get_host(HOST).vllm_venv)
    t0 = time.monotonic()
    r = subprocess.run([str(python), "-c", PARSE_SCRIPT, str(tmp_path / "cases.json"), str(tmp_path / "out.json")],
                       capture_output=True, text=True, timeout=600,
                       env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING", "HF_HUB_OFFLINE": "1"})
    assert r.returncode == 0, f"0.24.0's parser did not run ({time.monotonic() - t0:.0f} s):\n{r.stderr[-3000:]}"
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["version"] == VERSION
    results: dict[str, dict[str, Any]] = out["results"]
    refusals = [f"{case}: vLLM {VERSION} refuses "
                + ("; ".join(f"{f['flag']} ({f['message']})" for f in res["refused"]) or "the list")
                + f": {res['message']}" for case, res in results.items() if not res["ok"]]
    assert not refusals, "\n".join(refusals)
    # the parser names the lists use are ones 0.24.0 registers
    reasoning, tools = set(out["reasoning_parsers"]), set(out["tool_parsers"])
    unknown = [f"{case}: --reasoning-parser {res['reasoning_parser']} is not one of {VERSION}'s "
               f"({', '.join(sorted(reasoning))})" for case, res in results.items()
               if res["reasoning_parser"] and res["reasoning_parser"] not in reasoning]
    unknown += [f"{case}: --tool-call-parser {res['tool_call_parser']} is not one of {VERSION}'s "
                f"({', '.join(sorted(tools))})" for case, res in results.items()
                if res["tool_call_parser"] and res["tool_call_parser"] not in tools]
    assert not unknown, "\n".join(unknown)
    recipe = results["the recipe's serving flags"]
    assert (recipe["reasoning_parser"], recipe["tool_call_parser"], recipe["enable_auto_tool_choice"]) == (
        "qwen3", "qwen3_coder", True)


# --- (b) the lines roost reads, from 0.24.0's own log ----------------------------------------------------


def _messages(text: str, start: str) -> list[str]:
    return [m for m in (log_message(line) for line in text.splitlines()) if m.startswith(start)]


def test_roost_reads_0_24_0s_start_up_log(vllm024_server: Any) -> None:
    text = vllm024_server.log_path.read_text()
    facts = parse_vllm_log(text)
    # KV cache: the GPU wording on CPU too (0.32 says "CPU KV cache size"), 1 GiB (VLLM_CPU_KVCACHE_SPACE=1)
    assert _messages(text, "Explicitly set (1.0/") and _messages(text, "Explicitly set (1.0/")[0].endswith(
        " GiB for KV cache on node 0.")
    assert _messages(text, "GPU KV cache size:") == ["GPU KV cache size: 524,288 tokens"]
    assert _messages(text, "CPU KV cache size") == []
    assert _messages(text, "Maximum concurrency for") == ["Maximum concurrency for 2,048 tokens per request: 256.00x"]
    assert (facts.kv_cache_tokens, facts.max_concurrency_len, facts.max_concurrency) == (524_288, 2048, 256.0)
    # the block size is logged only for a hybrid model (it forces a large block): not for the tiny Qwen3
    assert _messages(text, "Setting attention block size") == [] and facts.attention_block_size is None
    # the weights: the CPU runner logs no measured memory ("Model loading took"), only the read time
    assert _messages(text, "Model loading took") == [] and (facts.model_load_gib, facts.model_load_s) == (None, None)
    [weights] = _messages(text, "Loading weights took")
    # the attention backend: named only by the KV cache layout line
    assert _messages(text, "Using HND KV cache layout for") == ["Using HND KV cache layout for CPU_ATTN backend."]
    assert facts.attention_backends == ["CPU_ATTN"] and facts.moe_backends == []
    assert "auto_prefetch_local_fs" in [e.key for e in facts.explained]
    # the start-up phases, split on the times roost read each milestone line
    [engine] = _messages(text, "init engine (profile, create kv cache, warmup model) took")
    assert _messages(text, "Application startup complete.") == ["Application startup complete."]
    server, ready = vllm024_server.server, vllm024_server.ready
    p = server.phases(ready)
    assert p.weights_read_s == float(re.fullmatch(r"Loading weights took ([\d.]+) seconds", weights)[1])  # type: ignore[index]
    m = re.fullmatch(r"init engine \(profile, create kv cache, warmup model\) took ([\d.]+) s(?: \(compilation: ([\d.]+) s\))?",
                     engine)
    assert m is not None and p.engine_init_s == float(m[1])
    assert p.torch_compile_s == (float(m[2]) if m[2] else None)  # the CPU runner's AOT compile is not counted
    assert p.load_s is not None and p.compile_s is not None and p.ready_s is not None
    assert p.health_detect_delay_s is not None and p.start_to_healthy_s is not None
    assert p.load_s > 0 and p.ready_s >= 0 and p.engine_init_s <= p.compile_s + 2  # its timer starts after the load
    assert p.load_s + p.compile_s + p.ready_s == pytest.approx(p.start_to_healthy_s, abs=2e-3)
    # the health wait read every milestone from the same lines (the last one, API_UP, from the log's own line)
    assert {m.name for m in ready.milestones} == {name for name, _, _ in MILESTONES}


# --- (c) a pool too small for one request, in 0.24.0's wording ---------------------------------------------


def test_a_pool_too_small_is_classified_as_on_0_32(tiny_model: Path, session_dir: Path) -> None:
    """``--kv-cache-memory-bytes 1048576`` on the tiny model, as the 0.32 capture (logs/kv-too-small.cpu-container.log,
    test_diagnose.py::test_kv_real_cpu_capture): with VLLM_CPU_KVCACHE_SPACE unset, 0.24.0's CPU worker takes the
    flag as the pool ("Explicitly set"), and its KV check refuses it in the same wording."""
    assert "VLLM_CPU_KVCACHE_SPACE" not in os.environ  # it would replace the flag (vllm/platforms/cpu.py)
    host = get_host(HOST).model_copy(update={"name": "test-024-kv"})
    spec = ServeSpec(model_dir=tiny_model, served_model_name="tiny", port=free_port(),
                     vllm_args=["--dtype", "bfloat16", "--max-model-len", "2048", "--enforce-eager",
                                "--kv-cache-memory-bytes", "1048576"],
                     log_path=session_dir / "vllm024-kv-too-small.log",
                     env={"VLLM_CACHE_ROOT": str(session_dir / "vllm-cache-0.24.0")})
    backend = ProcessBackend(host)
    assert "VLLM_CPU_KVCACHE_SPACE" not in backend.start_plan(spec).env_names
    server = backend.start(spec, None, backend.prepare())
    try:
        with pytest.raises(ServerExited):
            wait_until_ready(server, api_key=None, timeout_s=host.health_timeout_s)
        d = server.diagnose()
        text = server.logs()
    finally:
        server.stop()
    assert "version 0.24.0" in text and _messages(text, "Explicitly set (0.0/")  # 1 MiB, taken as the pool
    [line] = {m for m in _messages(text, "ValueError: To serve at least one request")}
    assert line.startswith("ValueError: To serve at least one request with the model's max seq len (2048), (0.0 GiB "
                           "KV cache is needed, which is larger than the available KV cache memory (0.0 GiB).")
    ref = diagnose((LOGS / "kv-too-small.cpu-container.log").read_text(), 1)  # vLLM 0.32's
    assert d is not None and ref is not None
    fields = ("failure_class", "retryable", "needed_kv_gib", "available_kv_gib", "max_model_len",
              "suggested_kv_cache_bytes", "remediation")
    assert {f: getattr(d, f) for f in fields} == {f: getattr(ref, f) for f in fields}
    assert d.failure_class == "kv_pool_too_small" and d.suggested_kv_cache_bytes == 1024**3
    estimate = re.search(r"the estimated maximum model length is (\d+)", line)
    assert estimate is not None and d.estimated_max_model_len == int(estimate[1])
    assert "KV cache is needed" in d.evidence and "EngineCore failed to start" not in d.evidence


# --- (d) the process backend started from host cpu-vllm-0-24 runs 0.24.0 ----------------------------------


def test_the_host_serves_vllm_0_24_0(vllm024_server: Any) -> None:
    server = vllm024_server.server
    assert server.proc.args[0] == str(vllm_python_for(get_host(HOST).vllm_venv))
    r = httpx.get(f"{vllm024_server.base_url}/version", timeout=10)
    assert r.status_code == 200 and r.json()["version"] == VERSION
    text = vllm024_server.log_path.read_text()
    assert f"Initializing a V1 LLM engine (v{VERSION})" in text
    # with the recipes' serving settings, under the API key
    non_default = _messages(text, "non-default args: ")[0]
    for part in ("'reasoning_parser': 'qwen3'", "'tool_call_parser': 'qwen3_coder'", "'enable_auto_tool_choice': True",
                 "'enable_prefix_caching': True", "'enable_chunked_prefill': True"):
        assert part in non_default
    assert httpx.get(f"{vllm024_server.base_url}/v1/models", timeout=10).status_code == 401
    models = httpx.get(f"{vllm024_server.base_url}/v1/models", timeout=10,
                       headers={"Authorization": f"Bearer {vllm024_server.api_key}"})
    assert [m["id"] for m in models.json()["data"]] == ["tiny"]


# --- the recipe's clients against 0.24.0 --------------------------------------------------------------


def test_the_recipes_client_snippet_through_the_gateway(vllm024_server: Any, tmp_path: Path) -> None:
    """The NVFP4 recipe's "Client Usage" snippet, verbatim but for the model (the demo's), the window (2,048
    tokens, not 16,384 for max_tokens) and a thinking budget: through ``roost gateway`` with a gateway key,
    the ``openai`` client gets the reasoning trace in ``message.reasoning`` and the answer in
    ``message.content``. A random-weight model never writes ``</think>`` itself; vLLM 0.24.0's
    ``thinking_token_budget`` ends the thinking after 16 tokens as a real model would."""
    from openai import OpenAI
    from support.gateway import GatewayProcess, add_key

    gw = GatewayProcess(f"sqlite:///{tmp_path / 'usage.db'}", [vllm024_server.base_url], log_path=tmp_path / "gw.log",
                        env={"VLLM_API_KEY": vllm024_server.api_key}).start()
    try:
        key = add_key(gw.db_url, "laptop", "device")
        client = OpenAI(api_key=key, base_url=f"{gw.url}/v1", max_retries=0)
        resp = client.chat.completions.create(
            model="tiny",
            messages=[{"role": "user", "content": "A snail climbs 3 m a day and slips 2 m a night in a 10 m well. "
                                                  "How many days?"}],
            max_tokens=64,
            temperature=0.6, top_p=0.95,
            extra_body={"top_k": 20, "thinking_token_budget": 16},
        )
        message = resp.choices[0].message
        reasoning = getattr(message, "reasoning", None) or (message.model_extra or {}).get("reasoning")
        assert isinstance(reasoning, str) and reasoning.strip(), message   # print(...message.reasoning): the trace
        assert isinstance(message.content, str) and message.content.strip(), message  # print(...message.content)
        assert "<think>" not in message.content and "</think>" not in message.content
        direct = httpx.post(f"{vllm024_server.base_url}/v1/chat/completions", timeout=30,
                            json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert direct.status_code == 401  # vLLM itself wants the upstream key: clients go through the gateway
    finally:
        gw.stop()
