"""roost's benchmark side by side with ``vllm bench serve``: the same workload, rounds interleaved.

Used by the agreement tests (``tests/roost/bench/test_bench_vs_vllm.py``: against the synthetic
server, whose timing is known, and against a real vLLM CPU server) and by the benchmark that
measures the 5% target on a real server (``benchmarks/bench_vs_vllm.py``). Test-only code: it lives
in ``tests/support`` (benchmarks put ``<repo>/tests`` on ``sys.path``).

The comparison is built to survive timing noise on small shared machines:

- the same workload for both tools: the chat endpoint, the same prompt length as the server
  counts it (the first vLLM round tells what its random dataset really sends; roost then builds
  exactly that), fixed output length, ``ignore_eos``, greedy, thinking off, N requests at once,
  fresh random prompts every round (a repeated seed would hit vLLM's prefix cache);
- a common warm-up, then rounds interleaved ABBA (V R R V ...), so slow load drifts hit both;
- each roost round is paired with the adjacent vLLM round, and the statistic is the median over
  pairs of the ratio of the two rounds' medians (TTFT, TPOT) or throughputs: a burst of other
  work moves both rounds of a pair, and one disturbed pair cannot move the median. Pooled
  medians are reported too;
- :func:`quiet_clients`: both clients run on the CPUs vLLM's CPU worker is not bound to (vLLM CPU
  binds its OpenMP threads to some cores and leaves the rest to the API server; a client sharing
  the worker's core slows decoding, and which client landed there used to decide the TPOT ratio
  by up to 13%), and the server and both clients run at nice -10 where allowed;
- a round whose tokens arrived coalesced (the server's API process fell behind and sent many
  tokens per chunk: median chunks per request below :data:`COALESCED` of the tokens, or a median
  TPOT below :data:`TPOT_FLOOR_S`) measures the machine's load, not either client: pairs with
  such a round are set aside, and :meth:`Agreement.degenerate` says when too few pairs are left
  to judge (a ratio of two figures below measurement resolution proves nothing). Such pairs are
  measured again: :func:`side_by_side` adds interleaved pairs (``clean=``, up to ``max_pairs=``)
  until enough clean ones are had, and while the caller's ``settled=`` says they do not yet decide
  its verdict (e.g. the :func:`median_interval` of a paired ratio straddling a bound on a noisy
  stretch); the caller fails with the figures when they cannot be had.

vLLM's per-request TPOT is recomputed from its saved lists with its own formula
(``vllm.benchmarks.serve.calculate_metrics``: ``(latency - ttft) / (output_len - 1)``); roost's
numbers come from ``roost/bench/metrics.py``, where each is defined.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from roost.bench import metrics as M
from roost.bench.sweep import BenchSettings, run_benchmark
from support.reference import VllmBenchServe

THINKING_OFF: dict[str, Any] = {"chat_template_kwargs": {"enable_thinking": False}}

Key = Literal["ttft", "tpot", "throughput"]
KEYS: dict[Key, str] = {
    "ttft": "median TTFT (s)",
    "tpot": "median TPOT (s)",
    "throughput": "output throughput (tok/s)",
}


COALESCED = 0.5
"""A round is coalesced when its requests' tokens arrived in fewer chunks than this fraction of
the tokens (median over requests): vLLM streams one chunk per token unless its API server falls
behind, which on a loaded machine collapses TPOT towards 0 for every client alike."""

TPOT_FLOOR_S = 1e-4
"""TPOT below 0.1 ms is below what a client can resolve on these machines (an event-loop pass);
the tiny model decodes at 3-8 ms per token."""


class Round(BaseModel):
    """One round of one tool: per-request TTFT and TPOT (s), and the round's output throughput."""

    tool: Literal["roost", "vllm"]
    ttft: list[float]
    tpot: list[float]
    throughput: float
    input_lens: list[int] = Field(default_factory=list)
    output_lens: list[int] = Field(default_factory=list)
    chunks: list[int] = Field(default_factory=list, description="Token chunks per request, as the client saw them.")
    cpu_s: float = Field(default=0.0, description="CPU time of the client process during the round.")

    def stat(self, key: Key) -> float:
        """The round's figure: its throughput, or the median of its requests' TTFT or TPOT (0 when
        no request had one: a round whose tokens all came in one chunk has no TPOT)."""
        if key == "throughput":
            return self.throughput
        values: list[float] = getattr(self, key)
        return statistics.median(values) if values else 0.0

    def coalesced(self) -> str:
        """Why this round measured the server's backlog rather than its decoding ("" if it did not)."""
        if self.chunks and self.output_lens:
            frac = statistics.median(c / n for c, n in zip(self.chunks, self.output_lens, strict=True) if n > 0)
            if frac < COALESCED:
                return f"{self.tool} round: tokens arrived in {100 * frac:.0f}% as many chunks as tokens"
        if not self.tpot or statistics.median(self.tpot) < TPOT_FLOOR_S:
            return f"{self.tool} round: median TPOT {1e6 * self.stat('tpot'):.0f} µs, below resolution"
        return ""


class Workload(BaseModel):
    """What both tools send in every round."""

    base_url: str
    model: str
    api_key: str | None = None
    tokenizer: Path  # vllm bench serve's random dataset draws its prompts with it
    input_len: int = 128
    output_len: int = 64
    users: int = 8


class AgreementRow(BaseModel):
    key: Key
    name: str
    roost: float
    vllm: float
    pooled_ratio: float
    paired_ratio: float


class Agreement(BaseModel):
    """The outcome: one row per figure, and how it was measured."""

    prompt_tokens: int
    output_tokens: int
    users: int
    pairs: int
    rows: list[AgreementRow]
    roost_cpu_us_per_token: float
    vllm_cpu_us_per_token: float
    set_aside: list[str] = Field(default_factory=list, description="Why each pair left out of the ratios was.")
    pair_ratios: dict[str, list[float]] = Field(
        default_factory=dict, description="Per figure, roost/vLLM of each pair in the ratios, in the order measured.")

    def clean(self) -> int:
        """Pairs with no coalesced round: the pairs the ratios are taken over (unless ``degenerate``)."""
        return self.pairs - len(self.set_aside)

    def worst(self) -> float:
        """The largest paired deviation from 1 over the three figures."""
        return max(abs(r.paired_ratio - 1) for r in self.rows)

    def systematic(self) -> float:
        """The largest deviation from 1 that both statistics show: per figure the smaller of the
        pooled and the paired deviation, then the largest over the figures. A difference in what
        the two tools measure (another window, another formula) moves both statistics alike; on a
        two-core machine shared with the server, noise between rounds moves the median of a few
        paired ratios on its own (CI: TPOT pooled 1.014, paired 1.107 over 8 pairs)."""
        return max(min(abs(r.pooled_ratio - 1), abs(r.paired_ratio - 1)) for r in self.rows)

    def degenerate(self, clean: int | None = None) -> str:
        """Why these figures cannot judge agreement ("" when they can): fewer than ``clean`` pairs (by
        default: not half of them) had no coalesced round (:data:`COALESCED`), so the ratios would compare
        the machine's load."""
        if (self.clean() < clean) if clean is not None else (2 * len(self.set_aside) > self.pairs):
            return (f"{len(self.set_aside)} of {self.pairs} pairs had coalesced tokens (the server's API "
                    f"process fell behind; a loaded machine): {self.set_aside[0]}")
        return ""

    def table(self) -> str:
        used = self.clean() or self.pairs
        lines = [
            f"prompt {self.prompt_tokens} tokens, {self.output_tokens} output, {self.users} users, "
            f"{self.pairs} pairs of rounds (ABBA), {used} in the ratios",
            f"| {'figure':<26} | {'roost':>10} | {'vllm':>10} | {'pooled ratio':>12} | {'paired ratio':>12} |",
            f"|{'-' * 28}|{'-' * 12}|{'-' * 12}|{'-' * 14}|{'-' * 14}|",
        ]
        for r in self.rows:
            lines.append(f"| {r.name:<26} | {r.roost:10.4f} | {r.vllm:10.4f} | {r.pooled_ratio:12.3f} | "
                         f"{r.paired_ratio:12.3f} |")
        a, b = self.roost_cpu_us_per_token, self.vllm_cpu_us_per_token
        lines.append(f"| {'client CPU / token (µs)':<26} | {a:10.1f} | {b:10.1f} | {a / b if b else 0:12.3f} | {'':>12} |")
        for key, ratios in self.pair_ratios.items():
            lines.append(f"{key} of each pair: {' '.join(f'{x:.3f}' for x in ratios)}")
        lines += [f"set aside: {why}" for why in self.set_aside]
        return "\n".join(lines)


def _processes_of_server(base_url: str) -> list[int]:
    """The pids of the process group of the vLLM server listening on ``base_url``'s port (by argv)."""
    port = base_url.rstrip("/").rsplit(":", 1)[-1]
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (b"vllm.entrypoints.openai.api_server" in argv and b"--port" in argv
                and argv[argv.index(b"--port") + 1].decode() == port):
            pgid = os.getpgid(int(d))
            return [int(q) for q in os.listdir("/proc") if q.isdigit() and _pgid(int(q)) == pgid]
    return []


def _pgid(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def worker_cpus(server_pids: list[int]) -> set[int]:
    """The CPUs the server's threads are bound to when bound to fewer than all (vLLM CPU's OpenMP binding)."""
    everything = os.sched_getaffinity(0) | set(range(os.cpu_count() or 1))
    bound: set[int] = set()
    for pid in server_pids:
        for tid in _threads(pid):
            try:
                cpus = os.sched_getaffinity(tid)
            except OSError:
                continue
            if cpus < everything:
                bound |= cpus
    return bound


@contextlib.contextmanager
def quiet_clients(base_url: str, client_pids: list[int], *, nice: int = -10) -> Iterator[set[int] | None]:
    """For the block: pin the clients (their threads, this process's included via ``0``) to the CPUs
    the vLLM worker is not bound to, and raise the server and clients to ``nice``; restore after.

    Yields the CPUs the clients were pinned to, or None when there was nothing to pin to. Anything
    not allowed here (no root, a process gone) is skipped.
    """
    server = _processes_of_server(base_url)
    clients = [os.getpid() if p == 0 else p for p in client_pids]
    free = os.sched_getaffinity(0) - worker_cpus(server)
    restore: list[Callable[[], None]] = []

    def attempt(do: Callable[[], None], undo: Callable[[], None]) -> None:
        try:
            do()
            restore.append(undo)
        except OSError:
            pass

    pinned: set[int] | None = None
    if free and len(free) < (os.cpu_count() or 1):
        pinned = free
        for pid in clients:
            for tid in _threads(pid):
                with contextlib.suppress(OSError):
                    before = os.sched_getaffinity(tid)
                    attempt(functools.partial(os.sched_setaffinity, tid, free),
                            functools.partial(_quietly, os.sched_setaffinity, tid, before))
    for pid in {*clients, *server}:
        for tid in _threads(pid):  # Linux keeps a nice value per thread
            with contextlib.suppress(OSError):
                was = os.getpriority(os.PRIO_PROCESS, tid)
                attempt(functools.partial(os.setpriority, os.PRIO_PROCESS, tid, nice),
                        functools.partial(_quietly, os.setpriority, os.PRIO_PROCESS, tid, was))
    try:
        yield pinned
    finally:
        for undo in reversed(restore):
            undo()


def _quietly(fn: Callable[..., None], *args: Any) -> None:
    with contextlib.suppress(OSError):
        fn(*args)


def vllm_round(vb: VllmBenchServe, w: Workload, *, extra_body: dict[str, Any] | None = None) -> Round:
    """One ``vllm bench serve`` round of ``w.users`` requests, all at once, fresh random prompts."""
    argv = vb.chat_args(w.base_url, w.model, w.tokenizer, input_len=w.input_len, output_len=w.output_len,
                        num_prompts=w.users, max_concurrency=w.users, extra_body=extra_body,
                        seed=int.from_bytes(os.urandom(4), "big"))
    r = vb.run(argv)
    if not r.ok or r.result.get("failed"):
        raise RuntimeError(f"vllm bench serve round failed: {r.error or r.result.get('errors')}")
    ttfts, lats, outs = r.result["ttfts"], r.result["latencies"], r.result["output_lens"]
    return Round(
        tool="vllm",
        ttft=list(ttfts),
        tpot=[(lat - t) / (n - 1) for t, lat, n in zip(ttfts, lats, outs, strict=True) if n > 1],
        throughput=r.value("output_throughput"),
        cpu_s=r.cpu_s,
        input_lens=list(r.result["input_lens"]),
        output_lens=list(outs),
        chunks=[len(itl) + 1 for itl in r.result.get("itls") or []],  # one gap between consecutive chunks
    )


def roost_round(w: Workload, prompt_tokens: int, *, extra_body: dict[str, Any] | None = None) -> Round:
    """One roost concurrency step of ``w.users`` requests of exactly ``prompt_tokens`` tokens."""
    s = BenchSettings(prompt_lengths=[], concurrency=[w.users], concurrency_prompt_tokens=prompt_tokens,
                      output_tokens=w.output_len, repeats=1, warmup=0, metrics_poll_s=0,
                      extra_body=dict(extra_body or {}))
    c0 = time.process_time()
    r = run_benchmark(w.base_url, w.model, s, api_key=w.api_key)
    cpu_s = time.process_time() - c0
    if r.status != "completed" or r.points[0].errors:
        raise RuntimeError(f"roost round failed: {r.errors or [x.error for x in r.requests if x.error][:3]}")
    done = [x for x in r.requests if x.ok]
    return Round(
        tool="roost",
        ttft=[v for v in map(M.ttft, done) if v is not None],
        tpot=[v for v in map(M.tpot, done) if v is not None],
        throughput=r.points[0].output_tok_s.median or 0.0,
        cpu_s=cpu_s,
        input_lens=[x.prompt_tokens or 0 for x in done],
        output_lens=[x.completion_tokens or 0 for x in done],
        chunks=[len(x.token_times) for x in done],
    )


def _ratio(a: float, b: float) -> float:
    return a / b if b else math.inf


def compare(all_pairs: list[tuple[Round, Round]], *, prompt_tokens: int, output_tokens: int, users: int) -> Agreement:
    """Pooled and paired ratios roost/vLLM over ``(roost, vllm)`` pairs of rounds, pairs with a
    coalesced round set aside (all pairs count only when every pair has one; whether enough are left
    to judge is ``Agreement.degenerate``'s to say)."""
    why = [r.coalesced() or v.coalesced() for r, v in all_pairs]
    set_aside = [w for w in why if w]
    pairs = [pair for pair, w in zip(all_pairs, why, strict=True) if not w] or all_pairs
    rows = []
    ratios: dict[str, list[float]] = {}
    for key, name in KEYS.items():
        if key == "throughput":
            a = statistics.median(r.throughput for r, _ in pairs)
            b = statistics.median(v.throughput for _, v in pairs)
        else:
            a = statistics.median([x for r, _ in pairs for x in getattr(r, key)] or [0.0])
            b = statistics.median([x for _, v in pairs for x in getattr(v, key)] or [0.0])
        ratios[key] = [_ratio(r.stat(key), v.stat(key)) for r, v in pairs]
        paired = statistics.median(ratios[key])
        rows.append(AgreementRow(key=key, name=name, roost=a, vllm=b, pooled_ratio=_ratio(a, b), paired_ratio=paired))

    def per_token(rounds: list[Round]) -> float:
        tokens = sum(sum(x.output_lens) for x in rounds)
        return 1e6 * sum(x.cpu_s for x in rounds) / tokens if tokens else 0.0

    return Agreement(prompt_tokens=prompt_tokens, output_tokens=output_tokens, users=users, pairs=len(all_pairs),
                     rows=rows, roost_cpu_us_per_token=per_token([r for r, _ in all_pairs]),
                     vllm_cpu_us_per_token=per_token([v for _, v in all_pairs]), set_aside=set_aside,
                     pair_ratios=ratios)


def median_interval(values: list[float], confidence: float = 0.9) -> tuple[float, float]:
    """A distribution-free confidence interval of the median of ``values``: the order statistics
    ``x(k)``, ``x(n - k + 1)`` with the largest ``k`` whose binomial tail ``P(B(n, 1/2) < k)`` is at most
    ``(1 - confidence) / 2``; the whole range when there are too few values for that confidence."""
    xs = sorted(values)
    n = len(xs)
    if not n:
        raise ValueError("no values")
    tail, k = 0.0, 0
    while k < n // 2 and tail + math.comb(n, k) / 2**n <= (1 - confidence) / 2:
        tail += math.comb(n, k) / 2**n
        k += 1
    return (xs[k - 1], xs[n - k]) if k else (xs[0], xs[-1])


def clean_pairs(pairs: list[tuple[Round, Round]]) -> list[tuple[Round, Round]]:
    """The pairs with no coalesced round (:meth:`Round.coalesced`)."""
    return [(r, v) for r, v in pairs if not (r.coalesced() or v.coalesced())]


def side_by_side(
    vb: VllmBenchServe, w: Workload, *, pairs: int, extra_body: dict[str, Any] | None = THINKING_OFF,
    on_round: Callable[[int, int], None] | None = None, clean: int = 0, max_pairs: int | None = None,
    settled: Callable[[list[tuple[Round, Round]]], bool] | None = None,
) -> tuple[Agreement, list[tuple[Round, Round]]]:
    """Warm both tools up, then ``pairs`` pairs of rounds ABBA; return the agreement and the rounds.

    ``pairs`` must be even (V R R V is two pairs). While fewer than ``clean`` pairs have no coalesced
    round (:meth:`Round.coalesced`: the machine's load, not either client), or ``settled`` (given the clean
    pairs) says they do not yet decide the caller's verdict (a noisy stretch of the machine spreads the
    paired ratios), two more pairs are measured, interleaved as before, up to ``max_pairs`` in all; the
    caller then judges what was had, and fails with the figures when it cannot. ``on_round(done, total)``
    reports progress.
    """
    if pairs < 2 or pairs % 2:
        raise ValueError(f"pairs must be an even number >= 2 (ABBA), got {pairs}")
    most = max(pairs, max_pairs or pairs)
    first = vllm_round(vb, w, extra_body=extra_body)
    roost_round(w, w.input_len, extra_body=extra_body)
    # the prompt size vLLM's random dataset really sends, as the server counts it
    prompt_tokens = round(statistics.median(first.input_lens)) if first.input_lens else w.input_len
    paired: list[tuple[Round, Round]] = []

    def measure(n: int) -> None:
        rounds: list[Round] = []
        for who in "VRRV" * (n // 2):
            rounds.append(vllm_round(vb, w, extra_body=extra_body) if who == "V"
                          else roost_round(w, prompt_tokens, extra_body=extra_body))
            if on_round is not None:
                on_round(2 * len(paired) + len(rounds), 2 * max(pairs, len(paired) + n))
        paired.extend((a, b) if a.tool == "roost" else (b, a) for a, b in zip(rounds[::2], rounds[1::2], strict=True))

    def enough() -> bool:
        good = clean_pairs(paired)
        return len(good) >= clean and (settled is None or settled(good))

    measure(pairs)
    while not enough() and len(paired) + 2 <= most:
        measure(2)
    return compare(paired, prompt_tokens=prompt_tokens, output_tokens=w.output_len, users=w.users), paired
