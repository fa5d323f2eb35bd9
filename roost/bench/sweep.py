"""The benchmark run: warm-up, the single-stream prompt-length sweep, the concurrency sweep, the knee.

``run_benchmark(base_url, model, settings)`` (settings and result models: ``roost/bench/settings.py``,
re-exported here) drives one OpenAI-compatible server through one
:class:`~roost.vllm.client.VllmClient` (its connection pools live for the whole run) and returns a
:class:`BenchResult`: one :class:`~roost.records.BenchPoint` per prompt length and per concurrency
level, every :class:`~roost.vllm.stream.RequestRecord` (warm-up included, marked), the knee
(``roost.catalogue.find_knee``), and what went wrong.

Method (the recipes' measurements, automated):

- Requests are greedy (``temperature 0``), ``ignore_eos`` with a fixed ``max_tokens``, streamed
  with ``stream_options.include_usage``; ``chat_template_kwargs.enable_thinking`` is false unless
  ``thinking`` is set. Prompts have an exact token count (``roost/bench/prompts.py``) and a
  unique leading nonce, so prefix caching cannot help.
- Warm-up requests first (not measured). Each point is repeated ``repeats`` times; a *step* is
  one repeat: for a prompt length, one request alone; for concurrency ``c``, ``c`` users each
  sending ``requests_per_user`` requests back to back, all started together. Per-request metrics
  pool the repeats; aggregate tok/s is one value per step (median, min, max over the repeats).
- A step is timed from the moment its users are released together (each has built its request
  and holds at a gate; connections are opened beforehand, so TTFT holds no TCP set-up) to the last
  completion; Python's cyclic garbage collector is paused while a step runs.
- Prompt lengths are clipped to the served window: a length above
  ``max_model_len - output_tokens - window_margin`` is dropped (noted) and ``WINDOW_MAX`` (0)
  stands for that largest admissible prompt. A point the server rejects (HTTP 400) is recorded
  as skipped, with the server's reason.
- ``/metrics`` is scraped before and after every point, and its gauges polled during it, into
  ``BenchPoint.metrics_delta`` (``roost/vllm/server_metrics.py``).
- Per-request budgets scale with the prompt (first token within ``ttft_timeout_base_s +
  concurrency * prompt_tokens / min_prefill_tok_s``), and a stream silent for
  ``stall_timeout_s`` is dropped. When a step has connection errors, time-outs or cut streams,
  the server is probed; if it no longer answers, the run stops there with status ``failed``:
  every row measured so far is kept.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import time
import uuid
from typing import Any, Literal

import httpx

from roost.bench import metrics as M
from roost.bench.knee import knee_of
from roost.bench.metrics import Step
from roost.bench.prompts import BuiltPrompt, PromptBuilder, PromptError, ServerTokenizer, UsageProbeCounter
from roost.bench.settings import (
    RECIPE_CONCURRENCY,
    RECIPE_PROMPT_LENGTHS,
    WINDOW_MAX,
    BenchFailed,
    BenchResult,
    BenchSettings,
    Progress,
    make_settings,
)
from roost.bench.validity import describe_counts, unmeasurable
from roost.errors import UserError
from roost.inputs.text import shown
from roost.records import BenchPoint, utcnow
from roost.vllm import server_metrics
from roost.vllm.client import VllmClient, display_url, normalize_base_url, run_sync
from roost.vllm.stream import Phase, RequestRecord

__all__ = [
    "RECIPE_CONCURRENCY",
    "RECIPE_PROMPT_LENGTHS",
    "WINDOW_MAX",
    "BenchFailed",
    "BenchResult",
    "BenchSettings",
    "arun_benchmark",
    "make_settings",
    "run_benchmark",
]

log = logging.getLogger(__name__)

class _ServerGone(Exception):
    pass


class _Run:
    def __init__(self, client: VllmClient, settings: BenchSettings, result: BenchResult, progress: Progress | None,
                 server: VllmClient | None = None):
        self.client = client
        self.server = server or client  # /tokenize and /metrics: the vLLM server behind a gateway
        self.s = settings
        self.result = result
        self.progress = progress
        self.builder: PromptBuilder | None = None
        self.done_steps = 0
        self.total_steps = 1
        self.lengths: list[int] = []

    # -- plumbing --

    async def report(self, message: str) -> None:
        """One progress line: to the ``progress`` callback, which reports it (a Prefect task logs it,
        ``tasks/benchmark.py``), or without one to this module's logger; never both (it would show twice)."""
        if self.progress is None:
            log.info("%s", message)
            return
        log.debug("%s", message)
        frac = min(1.0, self.done_steps / max(1, self.total_steps))
        try:
            await asyncio.to_thread(self.progress, message, frac)
        except Exception as exc:  # a broken progress sink must not stop the measurement
            log.warning("progress callback failed: %s", exc)

    def payload(self, prompt: BuiltPrompt) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.client.model,
            "messages": prompt.messages,
            "max_tokens": self.s.output_tokens,
            "temperature": self.s.temperature,
            "ignore_eos": self.s.ignore_eos,
            "chat_template_kwargs": self.s.chat_template_kwargs(),
        }
        body.update(self.s.extra_body)
        body.update(stream=True, stream_options={"include_usage": True})
        return body

    async def scrape(self) -> dict[str, float] | None:
        text = await self.server.metrics_text()
        return None if text is None else server_metrics.totals(server_metrics.parse_text(text))

    async def poll_gauges(self, peaks: dict[str, float]) -> None:
        while True:
            await asyncio.sleep(self.s.metrics_poll_s)
            snap = await self.scrape()
            if snap is None:
                continue
            for k, v in server_metrics.gauges(snap).items():
                peaks[k] = max(v, peaks.get(k, v))

    # -- setup --

    async def discover(self) -> None:
        """Check the server answers, the key and the model name; learn the window and the tokenizer."""
        where = display_url(self.client.base_url)
        try:
            answer = await self.client.models(timeout_s=self.s.connect_timeout_s + 20)
        except httpx.HTTPError as exc:
            raise _ServerGone(f"server not reachable at {where}: {type(exc).__name__} {exc}") from None
        if answer.status_code in (401, 403):
            raise UserError(
                f"{where} rejected the API key (HTTP {answer.status_code}); "
                "set VLLM_API_KEY (or --api-key) to the key the server was started with"
            )
        if answer.status_code in (404, 405):
            raise UserError(
                f"{where} has no /v1/models (HTTP {answer.status_code}): "
                "pass the root URL of an OpenAI-compatible server (e.g. http://host:8000)"
            )
        if answer.status_code == 200 and answer.problem:
            raise UserError(f"{where} answered /v1/models with {answer.problem}: is it an OpenAI-compatible server? "
                            "pass its root URL (e.g. http://host:8000)")
        if answer.models and self.client.model not in answer.ids:
            raise UserError(
                f"model {shown(self.client.model, 80)!r} is not served at {where}; "
                f"it serves: {answer.listing()} (pass one of them as --model)"
            )
        served = answer.get(self.client.model)
        window = self.s.max_model_len or (served.max_model_len if served else None)
        tok = ServerTokenizer(self.server, self.s.chat_template_kwargs())
        if await tok.available():
            self.builder = PromptBuilder(tok, seed=self.s.seed)
            window = window or tok.max_model_len
        else:
            self.result.notes.append(
                "the server has no /tokenize: prompt sizes were found with one-token probe requests"
            )
            probe_body = {
                "chat_template_kwargs": self.s.chat_template_kwargs(),
                "temperature": self.s.temperature,
                **self.s.extra_body,
            }
            self.builder = PromptBuilder(UsageProbeCounter(self.client, probe_body), seed=self.s.seed)
        self.result.max_model_len = window

    def plan_lengths(self) -> list[int]:
        limit = None
        if self.result.max_model_len is not None:
            limit = self.result.max_model_len - self.s.output_tokens - self.s.window_margin
        out: list[int] = []
        dropped: list[int] = []
        for n in self.s.prompt_lengths:
            if n == WINDOW_MAX:
                if limit is None:
                    self.result.notes.append("window size unknown: the largest-prompt point was not run")
                    continue
                n = limit
            if limit is not None and n > limit:
                dropped.append(n)
                continue
            if n not in out:
                out.append(n)
        if dropped:
            self.result.notes.append(
                f"prompt lengths {', '.join(map(str, dropped))} exceed the window "
                f"({self.result.max_model_len} - {self.s.output_tokens} output - {self.s.window_margin} margin = {limit}): not run"
            )
        return out

    async def build(self, target: int, n: int) -> list[BuiltPrompt]:
        assert self.builder is not None
        prompts = []
        for _ in range(n):
            p = await self.builder.build(target, uuid.uuid4().hex[:12])
            if not p.exact:
                note = f"prompts of {target} tokens could only be built to {p.prompt_tokens} tokens"
                if note not in self.result.notes:
                    self.result.notes.append(note)
            prompts.append(p)
        return prompts

    # -- steps --

    async def step(
        self, phase: Phase, point: int, repeat: int, concurrency: int, target: int, prompts: list[BuiltPrompt],
        peaks: dict[str, float],
    ) -> Step:
        budget = self.s.budget(target, concurrency)
        per_user = len(prompts) // concurrency
        go = asyncio.Event()

        async def user(u: int) -> list[RequestRecord]:
            out = []
            for j in range(per_user):
                out.append(
                    await self.client.stream_chat(
                        self.payload(prompts[u * per_user + j]),
                        request_id=f"roost-{uuid.uuid4().hex[:16]}",
                        budget=budget,
                        phase=phase,
                        point=point,
                        repeat=repeat,
                        concurrency=concurrency,
                        prompt_tokens_target=target,
                        start=go if j == 0 else None,
                    )
                )
            return out

        await self.client.preconnect(concurrency)
        poller = asyncio.create_task(self.poll_gauges(peaks)) if self.s.metrics_poll_s > 0 else None
        # No cyclic garbage collection while timing: a full collection of a big heap is a pause.
        # (Frozen objects are not scanned until unfrozen; collecting first would cost a full pass.)
        gc.freeze()
        gc.disable()
        tasks = [asyncio.ensure_future(user(u)) for u in range(concurrency)]
        await asyncio.sleep(0)  # every user builds its first request and waits at the gate
        t0 = time.perf_counter()
        go.set()
        try:
            groups = await asyncio.gather(*tasks)
        finally:
            wall = time.perf_counter() - t0
            gc.enable()
            gc.unfreeze()
            if poller is not None:
                poller.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await poller
            await self.client.settle()
        records = [r for g in groups for r in g]
        self.result.requests.extend(records)
        return Step(records=records, wall_s=wall)

    async def check_alive(self, step: Step, where: str) -> None:
        bad = [r for r in step.records if r.error_kind in ("connect", "timeout", "cut")]
        if not bad:
            return
        if not await self.client.alive(timeout_s=min(30.0, self.s.connect_timeout_s + 5)):
            raise _ServerGone(f"server stopped answering during {where}: {bad[0].error}")

    async def warmup(self) -> None:
        if self.s.warmup <= 0:
            return
        measured = [*self.lengths] + ([self.s.concurrency_prompt_tokens] if self.s.levels() else [])
        target = self.s.warmup_prompt_tokens or min(measured, default=self.s.concurrency_prompt_tokens)
        try:
            prompts = await self.build(target, self.s.warmup)
        except PromptError as exc:
            self.result.notes.append(f"warm-up skipped: {exc}")
            return
        for i, p in enumerate(prompts):
            st = await self.step("warmup", -1, i, 1, target, [p], {})
            await self.check_alive(st, "warm-up")
            (r,) = st.records
            if r.status_code in (404, 405):
                raise UserError(
                    f"{display_url(self.client.base_url)} has no usable /v1/chat/completions ({r.error}); "
                    "pass the server's root URL (e.g. http://host:8000)"
                )
        await self.report(f"warm-up: {self.s.warmup} request{'s' if self.s.warmup > 1 else ''} of {target} prompt tokens")

    async def point(self, kind: Literal["prompt_length", "concurrency"], index: int, target: int, concurrency: int) -> None:
        label = f"prompt {target} tok" if kind == "prompt_length" else f"concurrency {concurrency}"
        steps: list[Step] = []
        peaks: dict[str, float] = {}
        skip_reason = ""
        before = await self.scrape()
        try:
            for rep in range(self.s.repeats):
                try:
                    prompts = await self.build(target, concurrency * (self.s.requests_per_user if kind == "concurrency" else 1))
                except PromptError as exc:
                    skip_reason = str(exc)
                    break
                st = await self.step(kind, index, rep, concurrency, target, prompts, peaks)
                steps.append(st)
                self.done_steps += 1
                rejected = [r for r in st.records if r.error_kind == "http" and r.status_code == 400]
                if rejected and len(rejected) == len(st.records):
                    skip_reason = f"rejected by the server: {rejected[0].error}"
                    break
                await self.check_alive(st, f"{label}, repeat {rep + 1}")
                await self.report(f"{label}, repeat {rep + 1}/{self.s.repeats}: {_step_line(st, self.s.decode_ceiling_tok_s)}")
        finally:
            after = await self.scrape()
            self.result.points.append(
                _point(kind, target, concurrency, self.s, steps, server_metrics.step_delta(before, after, peaks), skip_reason)
            )
            if skip_reason:
                self.done_steps += self.s.repeats - len(steps)

    async def run(self) -> None:
        await self.discover()
        self.lengths = self.plan_lengths()
        levels = self.s.levels()
        self.total_steps = max(1, (len(self.lengths) + len(levels)) * self.s.repeats)
        await self.warmup()
        index = 0
        for n in self.lengths:
            await self.point("prompt_length", index, n, 1)
            index += 1
        for c in levels:
            await self.point("concurrency", index, self.s.concurrency_prompt_tokens, c)
            index += 1


def _step_line(st: Step, ceiling_tok_s: float | None = None) -> str:
    done = M.completed(st.records)
    parts = []
    ttfts = [t for r in done if (t := M.ttft(r)) is not None]
    timed = [r for r in done if unmeasurable(r, ceiling_tok_s) is None]
    odd = len(done) - len(timed)
    rates = [d for r in timed if (d := M.decode_tok_s(r)) is not None]
    if ttfts:
        parts.append(f"TTFT p50 {M.median(ttfts):.3f} s")
    if rates:
        parts.append(f"decode {M.median(rates):.1f} tok/s per request")
    agg = M.output_throughput(st.records, st.wall_s)
    if agg is not None:
        parts.append(f"{agg:.1f} tok/s aggregate")
    errors = sum(1 for r in st.records if r.error)
    if errors:
        parts.append(f"{errors} errors")
    if odd:
        parts.append(f"{odd} unmeasurable decode timing{'s' if odd > 1 else ''}")
    return ", ".join(parts) or "no completed request"


def _point(
    kind: Literal["prompt_length", "concurrency"],
    target: int,
    concurrency: int,
    s: BenchSettings,
    steps: list[Step],
    delta: dict[str, float],
    skip_reason: str,
) -> BenchPoint:
    st = M.point_stats(steps, s.decode_ceiling_tok_s)
    measured_prompt = st.prompt_tokens.median
    return BenchPoint(
        kind=kind,
        prompt_tokens=round(measured_prompt) if measured_prompt is not None else target,
        prompt_tokens_target=target,
        output_tokens=s.output_tokens,
        concurrency=concurrency,
        requests=st.requests,
        errors=st.errors,
        skipped=bool(skip_reason),
        skip_reason=skip_reason,
        repeats=len(steps),
        thinking=s.thinking,
        usage_missing=st.usage_missing,
        unmeasurable=st.unmeasurable,
        unmeasurable_reasons=describe_counts(st.unmeasurable_kinds),
        ttft_s=st.ttft,
        tpot_s=st.tpot,
        itl_s=st.itl,
        e2el_s=st.e2el,
        decode_tok_s=st.decode_tok_s,
        prefill_tok_s=st.prefill_tok_s,
        output_tok_s=st.output_throughput,
        request_rate=st.request_throughput,
        metrics_delta=delta,
    )


async def arun_benchmark(
    base_url: str,
    model: str,
    settings: BenchSettings,
    *,
    api_key: str | None = None,
    progress: Progress | None = None,
    server_url: str | None = None,
    server_key: str | None = None,
) -> BenchResult:
    """Async :func:`run_benchmark`."""
    result = BenchResult(
        base_url=display_url(normalize_base_url(base_url)),
        model=model,
        settings=settings,
        started_at=utcnow().isoformat(),
    )
    t0 = time.perf_counter()
    async with VllmClient(
        base_url,
        model,
        api_key=api_key,
        connect_timeout_s=settings.connect_timeout_s,
        stall_timeout_s=settings.stall_timeout_s,
    ) as client, contextlib.AsyncExitStack() as stack:
        server = None
        if server_url is not None:  # behind a gateway: prompts sized and /metrics read at the server itself
            server = await stack.enter_async_context(VllmClient(
                server_url, model, api_key=server_key, connect_timeout_s=settings.connect_timeout_s,
                stall_timeout_s=settings.stall_timeout_s, http_connections=2))
        run = _Run(client, settings, result, progress, server)

        def scrub(text: str) -> str:  # neither key in a stored error
            return client.scrub(text if server is None else server.scrub(text))

        try:
            await run.run()
        except _ServerGone as exc:
            result.status = "failed"
            result.errors.append(scrub(str(exc)))
        except httpx.TransportError as exc:  # between measured steps (the tokenizer, a scrape): cut or refused
            result.status = "failed"
            result.errors.append(scrub(f"server stopped answering: {type(exc).__name__} {exc}".rstrip()))
        except (httpx.HTTPError, PromptError) as exc:
            result.status = "failed"
            result.errors.append(scrub(f"{type(exc).__name__}: {exc}"))
        result.knee = knee_of([p for p in result.points if p.kind == "concurrency" and not p.skipped])
        result.wall_s = time.perf_counter() - t0
        done = "completed" if not result.failed else "failed: " + "; ".join(result.errors)
        run.done_steps = run.total_steps
        await run.report(f"benchmark {done} in {result.wall_s:.1f} s ({len(result.points)} points)")
    return result


def run_benchmark(
    base_url: str,
    model: str,
    settings: BenchSettings,
    *,
    api_key: str | None = None,
    progress: Progress | None = None,
    server_url: str | None = None,
    server_key: str | None = None,
) -> BenchResult:
    """Benchmark the OpenAI-compatible server at ``base_url`` serving ``model``.

    ``server_url`` (and ``server_key``): ``base_url`` is a gateway in front of this vLLM server; the
    requests go through ``base_url``, prompts are sized with the server's ``/tokenize`` and its
    ``/metrics`` read directly (neither a gateway serves).

    Never hangs on a dead server and never raises for one: the result then has status
    ``failed``, the reason in ``errors`` and every row measured before. Raises
    :class:`~roost.errors.UserError` for a rejected API key or a model the server does not serve.
    ``progress(message, fraction_done)`` is called between steps, from a worker thread.
    """
    return run_sync(lambda: arun_benchmark(base_url, model, settings, api_key=api_key, progress=progress,
                                           server_url=server_url, server_key=server_key))
