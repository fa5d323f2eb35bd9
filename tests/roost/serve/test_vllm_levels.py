"""The level of each line vLLM writes, and its noise, over real server output: a vLLM 0.32 process that
served a landing and was stopped (logs/serve-and-stop.cpu.log, from the land end-to-end test), a 0.32
container start (logs/serve-ok.cpu-container.ts.log, Docker timestamps), a 0.32 start that failed
(logs/compile-cache-half-written.cpu.log) and vLLM 0.24.0's banner as its logger printed it."""

from __future__ import annotations

import logging
from pathlib import Path

from roost.serve.logs import split_lines
from roost.serve.vllm_levels import LevelReader, LineLevel, classify

LOGS = Path(__file__).parent / "logs"
DEBUG, INFO, WARNING, ERROR = logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR

BANNER_024 = [  # vLLM 0.24.0's api_utils.log_version_and_model through its own logger (each line ends in \r)
    "INFO 12-06 07:24:43 [api_utils.py:339] \r",
    "INFO 12-06 07:24:43 [api_utils.py:339]        █     █     █▄   ▄█\r",
    "INFO 12-06 07:24:43 [api_utils.py:339]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.24.0\r",
    "INFO 12-06 07:24:43 [api_utils.py:339]   █▄█▀ █     █     █     █  model   /tmp/tiny-model\r",
    "INFO 12-06 07:24:43 [api_utils.py:339]    ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\r",
    "INFO 12-06 07:24:43 [api_utils.py:339] \r",
]
OTHER_024 = [
    ("WARNING 12-06 07:24:41 [importing.py:66] Triton is installed, but `triton.backends` could not be imported. "
     "Disabling Triton.", LineLevel(WARNING)),
    ("INFO 12-06 07:24:41 [importing.py:81] Triton not installed or not compatible; certain GPU-related functions "
     "will not be available.", LineLevel(INFO)),
    ("W1206 07:24:43.064000 11768 torch/utils/cpp_extension.py:140] No CUDA runtime is found, using "
     "CUDA_HOME='/usr/local'", LineLevel(WARNING)),
    ("(APIServer pid=1) INFO 12-05 17:37:00 [launcher.py:46] Route: /health", LineLevel(INFO, noise=True)),
]


def read(name: str) -> list[tuple[str, LineLevel]]:
    """The file's lines as a backend hands them out (``split_lines``), each with what a reader says."""
    lines, rest = split_lines("", (LOGS / name).read_text())
    reader = LevelReader()
    return [(line, reader.read(line)) for line in [*lines, rest] if line.strip()]


def test_a_served_and_stopped_server_keeps_its_warnings_and_quiets_its_banner_routes_and_stopping() -> None:
    seen = read("serve-and-stop.cpu.log")
    loud = [(line, lv.log_level) for line, lv in seen if not lv.noise]
    noise = [line for line, lv in seen if lv.noise]
    stop = next(i for i, (line, _) in enumerate(seen) if "[shutdown] EngineCore: trigger received signal=" in line)
    assert all(lv.noise for _, lv in seen[stop:])  # everything it said while stopping, errors included
    assert not any(lv.noise for _, lv in seen[:stop] if "[api_utils.py" not in _ and "launcher.py" not in _)
    assert sum("Route: /" in line for line in noise) == 35 and sum("[api_utils.py:347]" in line for line in noise) == 6
    assert any("nanobind: leaked" in line for line in noise) and any("EngineDeadError" in line for line in noise)
    assert any("force killing remaining processes" in line for line in noise)  # a WARNING, while stopping
    assert not any("Route: " in line or "█" in line or "nanobind" in line or "[shutdown]" in line for line, _ in loud)
    warnings = [line for line, level in loud if level == WARNING]
    assert sum("DeprecationWarning" in line for line in warnings) == 2  # the warning and its source line each
    assert sum(line == "  warnings.warn(" for line in warnings) == 2
    assert any("WARNING 12-06 07:18:42 [system_utils.py:255] Found ulimit" in line for line in warnings)
    assert any(line.startswith("[W1206 07:20:16") for line in warnings)  # PyTorch's C++ warning
    infos = {line for line, level in loud if level == INFO}
    assert "INFO:     Application startup complete." in infos and "INFO:     Started server process [8091]" in infos
    assert any("non-default args:" in line for line in infos) and any("[loggers.py:335] Engine 000:" in line
                                                                       for line in infos)
    assert "Triton is installed, but doesn't include CPU backend. Disabling Triton." in infos
    assert not any(level >= ERROR for _, level in loud)  # a clean landing: no error reaches the run's log


def test_a_container_start_reads_the_same_through_dockers_timestamps() -> None:
    seen = read("serve-ok.cpu-container.ts.log")
    noise = [line for line, lv in seen if lv.noise]
    assert len(noise) == 6 + 36 and all("[api_utils.py:347]" in line or "launcher.py" in line for line in noise)
    by_line = {line.split("Z ", 1)[-1]: lv for line, lv in seen}
    assert by_line["INFO:     Application startup complete."] == LineLevel(INFO)
    assert by_line["  warnings.warn("] == LineLevel(WARNING)
    assert by_line["get_mempolicy: Operation not permitted"] == LineLevel(INFO)
    assert by_line["[W1130 08:08:03.421394598 utils.cpp:41] Warning: numa_migrate_pages failed. errno: 1 (function "
                   "init_cpu_memory_env)"] == LineLevel(WARNING)
    assert sum(lv == LineLevel(WARNING) for lv in by_line.values()) >= 10


def test_a_failed_start_keeps_its_errors_and_tracebacks_at_error() -> None:
    seen = read("compile-cache-half-written.cpu.log")
    tail = seen[next(i for i, (line, _) in enumerate(seen) if "EngineCore failed to start." in line):]
    blank = [lv for line, lv in seen if line.endswith("[multiproc_executor.py:1063] ")]
    assert blank == [LineLevel(ERROR)]  # an error record's blank line is not the banner's
    bare = [lv for line, lv in tail if not line.startswith("(")]
    final = [lv for line, lv in tail if line.startswith("RuntimeError: Engine core initialization failed.")]
    assert final == [LineLevel(ERROR)]
    assert all(lv.level == ERROR for lv in bare if lv.level != WARNING)  # "Process EngineCore:" and its traceback
    leaked = [lv for line, lv in tail if "resource_tracker" in line]
    assert leaked == [LineLevel(WARNING, noise=True)] * 2  # the warning at exit and its source line
    assert LineLevel(WARNING, noise=True).log_level == DEBUG and LineLevel(ERROR).log_level == ERROR


def test_vllm_024s_banner_and_routes_are_noise_and_its_other_lines_keep_their_level() -> None:
    reader = LevelReader()
    assert [reader.read(line) for line in BANNER_024] == [LineLevel(INFO, noise=True)] * 6
    assert [(line, classify(line)) for line, _ in OTHER_024] == OTHER_024


def test_a_continuation_follows_the_line_it_continues_and_a_bare_traceback_is_an_error() -> None:
    warned = classify("/x/api_server.py:24: DeprecationWarning: deprecated")
    assert warned == LineLevel(WARNING)
    assert classify("  warnings.warn(", warned) == LineLevel(WARNING)
    assert classify("Traceback (most recent call last):", LineLevel(INFO)) == LineLevel(ERROR)
    assert classify("Traceback (most recent call last):", LineLevel(WARNING)) == LineLevel(WARNING)
    assert classify("ValueError: To serve at least one request", LineLevel(ERROR)) == LineLevel(ERROR)
    assert classify("  File \"x.py\", line 1, in <module>") == LineLevel(INFO)
    assert classify("2026-11-30T08:09:43.731896570Z INFO:     Shutting down") == LineLevel(INFO, noise=True)


def test_a_server_restarted_in_the_same_stream_is_read_as_a_new_start_not_as_the_old_ones_stopping() -> None:
    """A container its restart policy restarts goes on in the same stream (one reader): after the stopped
    server, the new one's banner ends the stopping, and its failed start keeps its errors at ERROR."""
    restart, _ = split_lines("", (LOGS / "kv-too-small.cpu-container.log").read_text())
    banner = next(i for i, line in enumerate(restart) if "version 0.32.0" in line)
    reader = LevelReader()
    stopped = [reader.read(line) for line, _ in read("serve-and-stop.cpu.log")]
    assert reader.stopping and stopped[-1].noise
    again = [reader.read(line) for line in restart if line.strip()]
    alone = LevelReader()
    fresh = [alone.read(line) for line in restart if line.strip()]
    started = sum(1 for line in restart[:banner] if line.strip())
    assert again[started:] == fresh[started:]  # from the banner on, as a server's first start reads
    assert not reader.stopping and any(lv.log_level == ERROR for lv in again[started:])
