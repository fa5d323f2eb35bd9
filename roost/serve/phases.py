"""Where the time from server start to healthy went: load / compile / ready (pure).

Works on timestamped log lines, e.g. ``docker logs --timestamps`` (RFC 3339, nanoseconds, the
daemon's clock, which is this host's clock). The milestones, in the order vLLM 0.24.0 and 0.32 log
them (GPU and CPU builds; each line's wording by release is :mod:`roost.vllm.wordings`'):

    WEIGHTS_READ        weights read; the CPU runner's end of *load*
    MODEL_LOADED        GPU runner: weights loaded -> end of *load* (vLLM 0.7: MODEL_LOADED_07)
    COMPILING           CPU runner: "Warming up model for the compilation...", compile starts
    TORCH_COMPILE_TOOK  inside *compile* ("takes" in older releases)
    ENGINE_READY        engine ready -> end of *compile* (0.24+: with "(compilation: N s)" when vLLM
                        compiled; the CPU runner's AOT compile is not counted there, nor logged as torch.compile)
    APP_STARTED         the API answers: /health turns 200

load_s    = container started -> MODEL_LOADED (or MODEL_LOADED_07) line; else WEIGHTS_READ (the CPU
            runner of vLLM 0.32 does not log the former)
compile_s = that line -> ENGINE_READY line (profiling, torch.compile, KV cache, warm-up)
ready_s   = that line -> roost saw /health 200
health_detect_delay_s = APP_STARTED line -> roost saw /health 200
"""

from __future__ import annotations

import datetime as dt
import re

from pydantic import BaseModel, Field

from roost.vllm import wordings as W

_TS = re.compile(r"^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})\s?(.*)$")

_MODEL_LOADED = W.any_of(W.MODEL_LOADED, W.MODEL_LOADED_07)  # the latter: vLLM 0.7 (GPU runners)
_WEIGHTS = W.WEIGHTS_READ.pattern
_COMPILE = W.TORCH_COMPILE_TOOK.pattern
_ENGINE_READY = W.ENGINE_READY.pattern
_APP_READY = W.APP_STARTED.marker


class StartupPhases(BaseModel):
    """Seconds per start-up phase; None when the milestone never appeared."""

    start_to_healthy_s: float | None = None
    load_s: float | None = Field(default=None, description="Start -> weights loaded.")
    compile_s: float | None = Field(default=None, description="Weights loaded -> engine ready (profile, compile, warm-up).")
    ready_s: float | None = Field(default=None, description="Engine ready -> /health 200 seen by roost.")
    health_detect_delay_s: float | None = Field(default=None, description="API up (startup complete) -> roost noticed.")
    weights_read_s: float | None = Field(default=None, description="vLLM's own weight-read time (WEIGHTS_READ).")
    torch_compile_s: float | None = Field(default=None, description="vLLM's own torch.compile total (TORCH_COMPILE_TOOK; "
                                          "else the compilation time of its ENGINE_READY line).")
    engine_init_s: float | None = Field(default=None, description="vLLM's own engine start-up time (ENGINE_READY).")


def parse_timestamp(text: str) -> dt.datetime:
    """An RFC 3339 time with any number of fractional digits (Docker prints nanoseconds)."""
    m = _TS.match(text.strip())
    if m is None:
        raise ValueError(f"not an RFC 3339 timestamp: {text!r}")
    base, frac, tz = m.group(1), m.group(2) or "0", m.group(3)
    micro = int((frac + "000000")[:6])
    offset = dt.UTC if tz == "Z" else dt.datetime.strptime(tz.replace(":", ""), "%z").tzinfo
    return dt.datetime.strptime(base, "%Y-%m-%dT%H:%M:%S").replace(microsecond=micro, tzinfo=offset)


def split_timestamped(text: str) -> list[tuple[dt.datetime, str]]:
    """Lines of ``docker logs --timestamps`` output as (time, line); lines without a time are skipped."""
    out: list[tuple[dt.datetime, str]] = []
    for raw in text.splitlines():
        m = _TS.match(raw)
        if m is None:
            continue
        out.append((parse_timestamp(raw.split(" ", 1)[0]), m.group(4)))
    return out


def _first(lines: list[tuple[dt.datetime, str]], pattern: re.Pattern[str]) -> tuple[dt.datetime, re.Match[str]] | None:
    for ts, line in lines:
        m = pattern.search(line)
        if m is not None:
            return ts, m
    return None


def _secs(a: dt.datetime | None, b: dt.datetime | None) -> float | None:
    if a is None or b is None:
        return None
    return round((b - a).total_seconds(), 3)


def startup_phases(
    lines: list[tuple[dt.datetime, str]],
    started_at: dt.datetime,
    healthy_seen_at: dt.datetime | None,
) -> StartupPhases:
    """Split start -> healthy using the first occurrence of each milestone (all times timezone-aware)."""
    loaded = _first(lines, _MODEL_LOADED) or _first(lines, _WEIGHTS)
    engine = _first(lines, _ENGINE_READY)
    app = _first(lines, _APP_READY)
    weights = _first(lines, _WEIGHTS)
    compiled = _first(lines, _COMPILE)
    t_loaded = loaded[0] if loaded else None
    t_engine = engine[0] if engine else None
    t_app = app[0] if app else None
    return StartupPhases(
        start_to_healthy_s=_secs(started_at, healthy_seen_at),
        load_s=_secs(started_at, t_loaded),
        compile_s=_secs(t_loaded, t_engine),
        ready_s=_secs(t_engine, healthy_seen_at),
        health_detect_delay_s=_secs(t_app, healthy_seen_at),
        weights_read_s=float(weights[1].group(1)) if weights else None,
        torch_compile_s=(float(compiled[1].group(1)) if compiled
                         else float(engine[1].group(2)) if engine and engine[1].group(2) else None),
        engine_init_s=float(engine[1].group(1)) if engine else None,
    )
