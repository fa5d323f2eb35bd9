"""The cold-load policy, one row per failure class (and no diagnosis): what roost does after a failed
attempt, with the attempt number and whether the KV pool was already raised."""

from __future__ import annotations

import pytest

from roost.serve.diagnose import RETRYABLE, Diagnosis
from roost.serve.policy import Decision, backoff_s, decide
from roost.units import GiB


def diag(cls: str, **extra: object) -> Diagnosis:
    return Diagnosis(failure_class=cls, retryable=RETRYABLE[cls], remediation=f"fix {cls}", evidence=f"{cls} line",
                     **extra)  # type: ignore[arg-type]


KV_SIZED = {"suggested_kv_cache_bytes": 6 * GiB, "needed_kv_gib": 5.12}
CACHE = {"compile_cache_entry": "/c/torch_compile_cache/torch_aot_compile/" + "ab" * 32}

# (failure class, diagnosis extras, attempt, pool already raised) -> (action, backoff s, new pool bytes)
TABLE = [
    ("out_of_memory", {}, 1, False, ("retry", 5.0, None)),
    ("out_of_memory", {}, 2, False, ("retry", 10.0, None)),
    ("out_of_memory", {}, 3, False, ("stop", 0.0, None)),
    ("health_timeout", {}, 1, False, ("retry", 5.0, None)),
    ("health_timeout", {}, 2, True, ("retry", 10.0, None)),
    ("health_timeout", {}, 3, False, ("stop", 0.0, None)),
    ("port_in_use", {}, 1, False, ("retry on a new port", 0.0, None)),
    ("port_in_use", {}, 2, False, ("retry on a new port", 0.0, None)),
    ("port_in_use", {}, 3, False, ("stop", 0.0, None)),
    ("kv_pool_too_small", KV_SIZED, 1, False, ("raise the pool", 0.0, 6 * GiB)),
    ("kv_pool_too_small", KV_SIZED, 2, False, ("raise the pool", 0.0, 6 * GiB)),
    ("kv_pool_too_small", KV_SIZED, 2, True, ("stop", 0.0, None)),  # raised once already: never twice
    ("kv_pool_too_small", KV_SIZED, 3, False, ("stop", 0.0, None)),  # no attempt left to use it
    ("kv_pool_too_small", {}, 1, False, ("stop", 0.0, None)),  # vLLM named no size
    ("visual_uninitialized", {}, 1, False, ("stop", 0.0, None)),
    ("language_model_only_with_tower", {}, 1, False, ("stop", 0.0, None)),
    ("mtp_weights_missing", {}, 1, False, ("stop", 0.0, None)),
    ("compile_cache_corrupt", CACHE, 1, False, ("clear the compile cache", 0.0, None)),
    ("compile_cache_corrupt", CACHE, 3, False, ("stop", 0.0, None)),  # no attempt left
    ("compile_cache_corrupt", {}, 1, False, ("stop", 0.0, None)),  # the log named nothing roost may remove
    ("unknown", {}, 1, False, ("stop", 0.0, None)),
    ("server_died", {}, 1, False, ("stop", 0.0, None)),  # diagnose_exit's, for a server that died mid-run
]


@pytest.mark.parametrize(("cls", "extra", "attempt", "pool_raised", "expected"), TABLE,
                         ids=[f"{r[0]}-attempt{r[2]}{'-raised' if r[3] else ''}{'-sized' if r[1] else ''}" for r in TABLE])
def test_decision_per_failure_class(cls: str, extra: dict[str, object], attempt: int, pool_raised: bool,
                                    expected: tuple[str, float, int | None]) -> None:
    d = decide(diag(cls, **extra), attempt, pool_raised=pool_raised, max_attempts=3)
    assert (d.action, d.backoff_s, d.kv_cache_bytes) == expected
    if d.action == "stop":
        assert d.reason.endswith(f"fix {cls}")  # the remediation is what the user reads


def test_every_failure_class_has_a_row() -> None:
    assert {row[0] for row in TABLE} == set(RETRYABLE)


def test_a_fixed_port_is_never_moved() -> None:
    d = decide(diag("port_in_use"), 1, fixed_port=True)
    assert d.action == "stop" and "fixed" in d.reason


def test_no_diagnosis_stops() -> None:
    assert decide(None, 1) == Decision(action="stop", reason="the failure has no diagnosis: nothing says a retry could succeed")


def test_backoff_doubles_from_5_s_to_at_most_60_s() -> None:
    assert [backoff_s(n) for n in range(1, 7)] == [5.0, 10.0, 20.0, 40.0, 60.0, 60.0]


def test_more_attempts_allowed_keep_retrying_transient_failures() -> None:
    d = decide(diag("health_timeout"), 3, max_attempts=5)
    assert (d.action, d.backoff_s) == ("retry", 20.0)
    assert decide(diag("health_timeout"), 5, max_attempts=5).action == "stop"


def test_a_compile_cache_entry_is_cleared_once_and_named() -> None:
    first = decide(diag("compile_cache_corrupt", **CACHE), 1)
    assert first.compile_cache_entry == CACHE["compile_cache_entry"] and CACHE["compile_cache_entry"] in first.reason
    again = decide(diag("compile_cache_corrupt", **CACHE), 2, cache_cleared=True)
    assert again.action == "stop" and "removed once already" in again.reason
