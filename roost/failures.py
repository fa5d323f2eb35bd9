"""Every failure class roost records, in one enumeration.

A failed run carries one class (``RunRecord.failure_class``, the results store's ``failure_class``
column, the report, the Slack message, ``roost results``): what stopped it, in words a script can
branch on. The classes come from three places, each named here once:

- what vLLM did (``roost.serve.diagnose`` reads its exit and log: a refused pool, out of memory, a
  server that died mid-run), also what a plan predicts it would do (``roost.plan.preflight``);
- a check roost made (the host busy or short of memory, a probe that failed, the results store);
- a stage that failed without a classified cause: ``<stage>_failed`` (:func:`stage_failure`), and
  ``internal_error`` for a crash outside every stage.

Stored runs keep whatever class they were written with (an older release's string reads as is).
"""

from __future__ import annotations

from enum import StrEnum

from roost.errors import RoostError


class FailureClass(StrEnum):
    """Why a run failed. The value is what is stored and printed."""

    # what vLLM did (roost.serve.diagnose), or what the plan predicts it would do
    KV_POOL_TOO_SMALL = "kv_pool_too_small"
    VISUAL_UNINITIALIZED = "visual_uninitialized"
    LANGUAGE_MODEL_ONLY_WITH_TOWER = "language_model_only_with_tower"
    MTP_WEIGHTS_MISSING = "mtp_weights_missing"
    OUT_OF_MEMORY = "out_of_memory"
    PORT_IN_USE = "port_in_use"
    COMPILE_CACHE_CORRUPT = "compile_cache_corrupt"
    HEALTH_TIMEOUT = "health_timeout"
    UNKNOWN = "unknown"
    SERVER_DIED = "server_died"
    # checks roost makes
    HOST_BUSY = "host_busy"
    HOST_MEMORY_SHORT = "host_memory_short"
    PROBE_FAILED = "probe_failed"
    REASONING_PROBE_FAILED = "reasoning_probe_failed"
    TOOL_CALL_PROBE_FAILED = "tool_call_probe_failed"
    STRUCTURED_OUTPUT_PROBE_FAILED = "structured_output_probe_failed"
    VISION_PROBE_FAILED = "vision_probe_failed"
    RESULTS_STORE_ERROR = "results_store_error"
    RESULTS_STORE_UNREACHABLE = "results_store_unreachable"
    RESULTS_STORE_FULL = "results_store_full"
    # a stage that failed without a classified cause (stage_failure), or a crash outside every stage
    SETUP_FAILED = "setup_failed"
    CONNECT_FAILED = "connect_failed"
    PREFLIGHT_FAILED = "preflight_failed"
    DOWNLOAD_FAILED = "download_failed"
    EVAL_DATASETS_FAILED = "eval_datasets_failed"
    AUDIT_FAILED = "audit_failed"
    BUILD_FAILED = "build_failed"
    HOST_SLOT_FAILED = "host_slot_failed"
    HOST_CHECK_FAILED = "host_check_failed"
    SERVE_FAILED = "serve_failed"
    HEALTH_WAIT_FAILED = "health_wait_failed"
    GATEWAY_FAILED = "gateway_failed"
    PROBES_FAILED = "probes_failed"
    BENCHMARK_FAILED = "benchmark_failed"
    EVALUATE_FAILED = "evaluate_failed"
    MTP_AB_FAILED = "mtp_ab_failed"
    MTP_AB_RESTORE_FAILED = "mtp_ab_restore_failed"
    REPORT_FAILED = "report_failed"
    INTERNAL_ERROR = "internal_error"


OUTSIDE_STAGES = "setup"
"""The stage name of a failure outside every stage (before the first, or between two)."""


def stage_failure(stage: str) -> FailureClass:
    """The class of a stage that failed without a classified cause: ``<stage>_failed``."""
    return FailureClass(f"{stage.replace('-', '_')}_failed")


def classify(stage: str, exc: BaseException) -> tuple[str, str]:
    """``(failure class, remediation)`` of ``exc`` stopping a run at ``stage``: the class roost gave
    it (a :class:`~roost.errors.RoostError` it classified), else the stage's ``<stage>_failed``;
    what is not roost's own and escaped every stage (a crash, a cancellation) is ``internal_error``.
    Plain strings, as records store them."""
    if isinstance(exc, RoostError):
        return str(exc.failure_class or stage_failure(stage)), exc.remediation
    if stage == OUTSIDE_STAGES:
        return str(FailureClass.INTERNAL_ERROR), ""
    return str(stage_failure(stage)), ""
