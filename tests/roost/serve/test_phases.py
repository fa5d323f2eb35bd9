"""Start-up phase split on a real ``docker logs --timestamps`` capture (logs/serve-ok.cpu-container.ts.log:
the tiny model served by the local vLLM CPU image on a loaded 2-core machine)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from roost.serve.phases import parse_timestamp, split_timestamped, startup_phases

LOG = Path(__file__).parent / "logs" / "serve-ok.cpu-container.ts.log"
UTC = dt.UTC


def test_parse_docker_nanosecond_timestamps() -> None:
    t = parse_timestamp("2026-11-30T08:09:44.076934789Z")
    assert t == dt.datetime(2026, 11, 30, 8, 9, 44, 76934, tzinfo=UTC)
    assert parse_timestamp("2026-11-30T08:09:44Z").microsecond == 0
    assert parse_timestamp("2026-11-30T09:09:44.5+01:00") == dt.datetime(2026, 11, 30, 8, 9, 44, 500000, tzinfo=UTC)
    with pytest.raises(ValueError, match="RFC 3339"):
        parse_timestamp("11-30 08:09:44")


def test_split_keeps_text_after_the_stamp() -> None:
    lines = split_timestamped("2026-11-30T08:09:44.076934789Z INFO:     Application startup complete.\nno stamp\n")
    assert lines == [(dt.datetime(2026, 11, 30, 8, 9, 44, 76934, tzinfo=UTC), "INFO:     Application startup complete.")]


def test_real_cpu_container_log_splits_into_load_compile_ready() -> None:
    lines = split_timestamped(LOG.read_text())
    started = lines[0][0]  # the container's first line stands in for State.StartedAt here
    seen = dt.datetime(2026, 11, 30, 8, 9, 44, 98535, tzinfo=UTC)  # what the health wait recorded in that run
    p = startup_phases(lines, started, seen)
    # the CPU runner logs "Loading weights took" (08:08:04.522845) but not "Model loading took"
    assert p.load_s == pytest.approx((dt.datetime(2026, 11, 30, 8, 8, 4, 522845, tzinfo=UTC) - started).total_seconds(), abs=1e-3)
    # weights loaded -> "init engine (profile, create kv cache, warmup model) took 95.50 s" at 08:09:40.912699
    assert p.compile_s == pytest.approx(96.390, abs=1e-3)
    assert p.ready_s == pytest.approx(3.186, abs=1e-3)
    assert p.health_detect_delay_s == pytest.approx(0.022, abs=1e-3)  # "Application startup complete." at 08:09:44.076934
    assert p.weights_read_s == 0.02 and p.engine_init_s == 95.5 and p.torch_compile_s is None
    assert p.load_s is not None and p.compile_s is not None and p.ready_s is not None and p.start_to_healthy_s is not None
    assert p.load_s + p.compile_s + p.ready_s == pytest.approx(p.start_to_healthy_s, abs=2e-3)


def test_gpu_style_milestones_prefer_model_loading_took() -> None:
    t = dt.datetime(2026, 1, 1, tzinfo=UTC)
    lines = [
        (t + dt.timedelta(seconds=400), "(Worker) INFO Loading weights took 399.00 seconds"),
        (t + dt.timedelta(seconds=440), "(Worker) INFO Model loading took 65.53 GiB memory and 440.1 seconds"),
        (t + dt.timedelta(seconds=470), "(EngineCore) INFO torch.compile takes 21.3 s in total"),
        (t + dt.timedelta(seconds=518), "(EngineCore) INFO init engine (profile, create kv cache, warmup model) took 78.0 s"),
        (t + dt.timedelta(seconds=520), "INFO:     Application startup complete."),
    ]
    p = startup_phases(lines, t, t + dt.timedelta(seconds=520.3))
    assert (p.load_s, p.compile_s, p.ready_s, p.health_detect_delay_s) == (440.0, 78.0, 2.3, 0.3)
    assert p.torch_compile_s == 21.3


def test_missing_milestones_are_none_not_zero() -> None:
    t = dt.datetime(2026, 1, 1, tzinfo=UTC)
    p = startup_phases([(t, "starting")], t, None)
    assert p.model_dump(exclude_none=True) == {}


def test_vllm_07_weights_loaded_line_ends_the_load() -> None:
    # v0.7.3 vllm/worker/model_runner.py: "Loading model weights took %.4f GB" (no "Model loading took" yet, and
    # the loader's "Loading weights took" only from v0.8.5)
    t = dt.datetime(2025, 2, 20, tzinfo=UTC)
    lines = [
        (t + dt.timedelta(seconds=95), "INFO 02-20 10:11:12 model_runner.py:1115] Loading model weights took 14.9927 GB"),
        (t + dt.timedelta(seconds=160), "INFO 02-20 10:12:17 llm_engine.py:436] init engine (profile, create kv cache, "
                                        "warmup model) took 65.00 seconds"),
    ]
    p = startup_phases(lines, t, t + dt.timedelta(seconds=161))
    assert (p.load_s, p.compile_s, p.ready_s) == (95.0, 65.0, 1.0)
