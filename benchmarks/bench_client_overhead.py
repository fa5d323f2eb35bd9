"""Client CPU time per streamed token: roost's benchmark client against ``vllm bench serve``'s.

Both clients stream the same workload from the same synthetic server
(``tests/roost/bench/synthetic_server.py``, its own process, so its CPU is not counted): N
concurrent chat streams of T tokens. CPU is the client process's ``time.process_time()`` around
one run (roost: ``run_benchmark``; vLLM: one ``vllm bench serve`` round in a process that imported
vLLM once, see ``tests/support/reference.py``). Fixed per-run costs (dataset or prompt building,
connections) cancel in the marginal figure, measured between a short and a long run of the
same number of requests::

    marginal CPU per token = (cpu(T_long) - cpu(T_short)) / (tokens(T_long) - tokens(T_short))

Each figure is the median of ``--repeats`` runs. The target: roost's marginal CPU per token at
most ``vllm bench serve``'s. On a VM shared with other work the absolute figures move with the
load (CPU time stolen by the host counts as the process's); the two clients run interleaved, so
the ratio is the figure to read.

The same long runs give roost's accuracy: each request's decode tok/s against the synthetic
server's record of the same stream (``(tokens - 1) / (last - first write)``, see
``tests/bench_synthetic.py``); the target is within 1%, worst request. Usage::

    .venv/bin/python benchmarks/bench_client_overhead.py [--streams 32,128] [--repeats 3] [--json OUT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from _table import Row, add_json_argument, judged, write_rows  # noqa: E402
from support.reference import VllmBenchServe  # noqa: E402

from roost.bench import metrics as M  # noqa: E402
from roost.bench.sweep import BenchSettings, run_benchmark  # noqa: E402
from roost.demo.model import generate_tiny_model  # noqa: E402

SYNTHETIC = REPO / "tests" / "roost" / "bench" / "synthetic_server.py"
KEY = "bench-overhead-key"


def start_server(rate: float) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, str(SYNTHETIC), "--port", "0", "--tokens-per-s", str(rate), "--ttft-s", "0.05",
         "--max-model-len", "100000"],
        stdout=subprocess.PIPE, text=True, env=dict(os.environ, SYNTHETIC_API_KEY=KEY),
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith("READY "):
        proc.kill()
        raise SystemExit(f"synthetic server did not start: {line!r}")
    return proc, f"http://127.0.0.1:{line.split()[1]}"


ERRORS: list[float] = []
"""Every long-run request's relative decode-rate error against the server's record."""


def roost_run(url: str, streams: int, tokens: int) -> tuple[float, int]:
    s = BenchSettings(prompt_lengths=[], concurrency=[streams], output_tokens=tokens, repeats=1, warmup=0,
                      concurrency_prompt_tokens=64, metrics_poll_s=0)
    httpx.post(f"{url}/_control", json={"reset_stats": True}, timeout=10).raise_for_status()
    c0 = time.process_time()
    r = run_benchmark(url, "synthetic", s, api_key=KEY)
    cpu = time.process_time() - c0
    if r.failed or any(x.error for x in r.requests):
        raise SystemExit(f"roost run failed: {r.errors or [x.error for x in r.requests if x.error][:3]}")
    truth = httpx.get(f"{url}/_stats", timeout=30).json()["requests"]
    for x in r.requests:
        t = truth[x.request_id]
        rate = M.decode_tok_s(x)
        if rate is not None and t["tokens"] > 1 and tokens > 16:
            ERRORS.append(rate / ((t["tokens"] - 1) / (t["t_last"] - t["t_first"])) - 1)
    return cpu, sum(x.completion_tokens or 0 for x in r.requests)


def vllm_run(vb: VllmBenchServe, url: str, tokenizer: Path, streams: int, tokens: int) -> tuple[float, int]:
    argv = vb.chat_args(url, "synthetic", tokenizer, input_len=64, output_len=tokens, num_prompts=streams,
                        max_concurrency=streams)
    r = vb.run(argv)
    if not r.ok or r.result.get("failed"):
        raise SystemExit(f"vllm bench serve failed: {r.error or r.result.get('errors')}")
    return r.cpu_s, int(r.value("total_output_tokens"))


def marginal(samples: list[tuple[float, int, float, int]]) -> float:
    return statistics.median((cl - cs) / (tl - ts) for cs, ts, cl, tl in samples) * 1e6


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--streams", default="32,128", help="concurrent streams, comma-separated")
    ap.add_argument("--short", type=int, default=16, help="tokens per stream, short run")
    ap.add_argument("--long", type=int, default=256, help="tokens per stream, long run")
    ap.add_argument("--rate", type=float, default=20.0, help="tokens/s per stream")
    ap.add_argument("--repeats", type=int, default=3)
    add_json_argument(ap)
    return ap


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    levels = [int(x) for x in args.streams.split(",")]

    work = Path(tempfile.mkdtemp(prefix="bench-overhead-"))
    tokenizer = generate_tiny_model(work / "tiny")  # vllm bench serve's random dataset needs a tokenizer
    proc, url = start_server(args.rate)
    rows = []
    try:
        print("starting vllm bench serve (imports vLLM once) ...", file=sys.stderr)
        with VllmBenchServe(api_key=KEY, result_dir=work / "vllm-bench") as vb:
            roost_run(url, 4, 8)  # warm both clients up
            vllm_run(vb, url, tokenizer, 4, 8)
            for n in levels:
                ours: list[tuple[float, int, float, int]] = []
                theirs: list[tuple[float, int, float, int]] = []
                ERRORS.clear()
                for i in range(args.repeats):
                    # interleaved, so that machine load drifts hit both alike
                    ours.append((*roost_run(url, n, args.short), *roost_run(url, n, args.long)))
                    theirs.append((*vllm_run(vb, url, tokenizer, n, args.short), *vllm_run(vb, url, tokenizer, n, args.long)))
                    print(f"  {n} streams, round {i + 1}/{args.repeats} done", file=sys.stderr)
                rows.append((n, marginal(ours), marginal(theirs),
                             statistics.median(c / t for _, _, c, t in ours) * 1e6,
                             statistics.median(c / t for _, _, c, t in theirs) * 1e6,
                             100 * statistics.median(abs(e) for e in ERRORS), 100 * max(abs(e) for e in ERRORS)))
    finally:
        proc.terminate()
        proc.wait()

    print(f"\nclient CPU per streamed token ({args.rate:g} tok/s per stream; short {args.short}, long {args.long} tokens; "
          f"median of {args.repeats})\n")
    print("| streams | roost marginal µs/token | vllm bench serve marginal µs/token | ratio roost/vllm | "
          "roost total µs/token (long run) | vllm total µs/token (long run) | "
          "roost decode tok/s vs server record: median / worst error |")
    print("|---|---|---|---|---|---|---|")
    for n, ours_m, theirs_m, ours_t, theirs_t, err_med, err_max in rows:
        print(f"| {n} | {ours_m:.1f} | {theirs_m:.1f} | {ours_m / theirs_m:.2f} | {ours_t:.1f} | {theirs_t:.1f} | "
              f"{err_med:.3f}% / {err_max:.3f}% |")
    worst = max(r[5 + 1] for r in rows)
    ratio = max(r[1] / r[2] for r in rows)
    print(f"\nCPU target (roost <= vllm bench serve): {'met' if ratio <= 1 else 'MISSED'} (worst ratio {ratio:.2f}); "
          f"accuracy target (worst request within 1%): {'met' if worst < 1 else 'MISSED'} ({worst:.3f}%)")
    out: list[Row] = []
    for n, ours_m, theirs_m, _, _, err_med, err_max in rows:
        out.append(Row(f"client CPU per streamed token, {n} streams (marginal, median of {args.repeats})", "µs", ours_m,
                       theirs_m, "vllm bench serve", "at most vllm bench serve's", judged(ours_m <= theirs_m)))
        out.append(Row(f"decode tok/s against the server's record, {n} streams: worst request's error", "%", err_max,
                       target="within 1%", verdict=judged(err_max < 1), detail=f"median {err_med:.3f}%"))
    write_rows(args.json_out, "bench_client_overhead", out)


if __name__ == "__main__":
    main()
