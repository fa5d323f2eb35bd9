"""The cold-load loop with scripted servers: what it records per attempt, what it changes between
attempts, and that it never leaves a server running. The servers are stand-ins for the ``Server``
interface (their logs are vLLM 0.32's real lines, classified by the real ``diagnose``); the same loop
runs against real faults on Docker in ``docker/test_coldload_docker.py``."""

from __future__ import annotations

import time

import pytest

from roost.errors import StageFailed, UserError
from roost.records import StartAttempt
from roost.serve.base import ABORT_GRACE_S, Readiness, Server, ServerInfo, ServeSpec, StartFailed
from roost.serve.coldload import ColdLoadFailed, cold_load, with_kv_pool
from roost.serve.diagnose import Diagnosis, diagnose
from roost.serve.health import HealthTimeout, ServerExited
from roost.serve.phases import StartupPhases
from roost.units import GiB

KV_LINE = (
    "(EngineCore pid=231) ERROR 11-30 08:41:07 [core.py:1099] ValueError: To serve at least one request with the "
    "model's max seq len (2048), (5.12 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(0.0 GiB). Based on the available memory, the estimated maximum model length is 384."
)
VISUAL_LINE = ("(EngineCore pid=90) ERROR 11-30 09:02:11 [core.py:1099] ValueError: Following weights were not "
               "initialized from checkpoint: {'visual.blocks.0.attn.qkv.weight'}")
LOADING = "(EngineCore pid=5) INFO 11-30 10:00:00 [default_loader.py:300] Loading weights took 0.05 seconds\n"
CACHE_ENTRY = "/root/.cache/vllm/torch_compile_cache/torch_aot_compile/" + "37a562c7" * 8
CACHE_LINE = ("(Worker pid=3364) ERROR 12-01 13:02:48 [multiproc_executor.py:1063] torch._inductor.exc.InductorError: "
              f"ImportError: {CACHE_ENTRY}/inductor_cache/cw/ccw6sxwhfrth2myfvwjbw25vddhqb.main.so: file too short")
HEALTHY = ("(EngineCore pid=5) INFO CPU KV cache size: 524,288 tokens, Maximum concurrency for 2,048 tokens per "
           "request: 256.00x\n(APIServer pid=1) INFO:     Application startup complete.\n")


class Scripted(Server):
    """A server whose log, exit status and liveness the test sets."""

    def __init__(self, spec: ServeSpec, log: str = "", exit_code: int | None = None) -> None:
        self.spec, self.base_url, self.served_model_name = spec, f"http://127.0.0.1:{spec.port}", spec.served_model_name
        self.log, self.code, self.stops = log, exit_code, 0
        self.graces: list[float | None] = []
        self.cleared: list[str] = []

    def is_running(self) -> bool:
        return self.code is None and self.stops == 0

    def exit_code(self) -> int | None:
        return self.code

    def logs(self) -> str:
        return self.log

    def new_log_text(self) -> str:
        return ""

    def diagnose(self, *, timed_out: bool = False) -> Diagnosis | None:
        return diagnose(self.log, self.code, timed_out=timed_out)

    def phases(self, ready: Readiness) -> StartupPhases:
        return StartupPhases(start_to_healthy_s=ready.completion_ok_s)

    def describe(self) -> ServerInfo:
        return ServerInfo(backend="process", host="t", base_url=self.base_url, served_model_name="tiny",
                          port=self.spec.port)

    def stop(self, grace_s: float | None = None) -> None:
        self.stops += 1
        self.graces.append(grace_s)

    def clear_compile_cache(self, entry: str) -> str:
        assert self.stops == 1, "a cache is cleared only after its server stopped"
        self.cleared.append(entry)
        return f"removed {entry}"


def ready() -> Readiness:
    return Readiness(health_ok_s=1.0, health_ok_at=time.time(), models_ok_s=1.1, completion_ok_s=1.2,
                     detect_delay_s=0.05, polls=12)


class Script:
    """``start`` and ``wait`` for cold_load: each attempt's outcome in order."""

    def __init__(self, *outcomes: str) -> None:
        self.outcomes = list(outcomes)
        self.servers: list[Scripted] = []
        self.specs: list[ServeSpec] = []
        self.slept: list[float] = []

    def start(self, spec: ServeSpec) -> Server:
        self.specs.append(spec)
        outcome = self.outcomes[len(self.specs) - 1]
        if outcome == "port":
            raise StartFailed(f"docker could not start: Bind for 127.0.0.1:{spec.port} failed: port is already allocated",
                              diagnose(f"Bind for 127.0.0.1:{spec.port} failed: port is already allocated"))
        if outcome == "user":
            raise UserError("checkpoint directory /nope does not exist")
        log = {"kv": KV_LINE, "visual": VISUAL_LINE, "cache": CACHE_LINE, "slow": LOADING,
               "ok": LOADING + HEALTHY}.get(outcome, HEALTHY)
        server = Scripted(spec, log, 1 if outcome in ("kv", "visual", "cache") else None)
        self.servers.append(server)
        return server

    def wait(self, server: Server) -> Readiness:
        outcome = self.outcomes[len(self.specs) - 1]
        if outcome in ("kv", "visual", "cache"):
            raise ServerExited(1, server.logs())
        if outcome == "slow":
            raise HealthTimeout("not ready after 3 s (last milestone: weights loaded)")
        if outcome == "key":
            raise StageFailed("health-wait", "the server rejected roost's API key (401 on /v1/models)")
        if outcome == "interrupt":
            raise KeyboardInterrupt
        return ready()

    def run(self, **kwargs: object) -> object:
        return cold_load(self.start, self.wait, SPEC, sleep=self.slept.append, new_port=iter([9101, 9102]).__next__,
                         **kwargs)  # type: ignore[arg-type]


SPEC = ServeSpec(model_dir="/m", served_model_name="tiny", port=9100, vllm_args=["--max-model-len", "2048",  # type: ignore[arg-type]
                                                                                  "--kv-cache-memory-bytes", "1048576"])


def test_ready_at_once_is_one_ok_attempt_with_the_log_facts() -> None:
    s = Script("ok")
    loaded = s.run()
    assert loaded.server is s.servers[0] and s.servers[0].stops == 0  # type: ignore[attr-defined]
    assert loaded.spec == SPEC and loaded.facts.kv_cache_tokens == 524_288  # type: ignore[attr-defined]
    assert loaded.phases.start_to_healthy_s == 1.2  # type: ignore[attr-defined]
    (a,) = loaded.attempts  # type: ignore[attr-defined]
    assert (a.attempt, a.ok, a.port, a.vllm_args, a.failure_class, a.action) == (1, True, 9100, SPEC.vllm_args, "", "")
    assert s.slept == []


def test_kv_pool_too_small_is_raised_once_to_what_vllm_needs() -> None:
    s = Script("kv", "ok")
    loaded = s.run()
    assert s.specs[1].vllm_args == ["--max-model-len", "2048", "--kv-cache-memory-bytes", str(6 * GiB)]
    assert loaded.spec == s.specs[1]  # type: ignore[attr-defined]
    assert [srv.stops for srv in s.servers] == [1, 0]
    first, second = loaded.attempts  # type: ignore[attr-defined]
    assert (first.ok, first.failure_class, first.retryable, first.action) == (False, "kv_pool_too_small", False,
                                                                               "raise the pool")
    assert first.vllm_args == SPEC.vllm_args and first.evidence == KV_LINE and "6442450944" in first.remediation
    assert (second.ok, second.vllm_args) == (True, s.specs[1].vllm_args)
    assert s.slept == []


def test_a_pool_too_small_twice_stops_with_the_remediation() -> None:
    s = Script("kv", "kv", "ok")
    with pytest.raises(ColdLoadFailed) as info:
        s.run()
    exc = info.value
    assert exc.failure_class == "kv_pool_too_small" and exc.stage == "health-wait"
    assert str(exc) == f"health-wait: kv_pool_too_small: {exc.remediation} (evidence: {KV_LINE})"
    assert [a.action for a in exc.attempts] == ["raise the pool", "stop"]
    assert len(s.specs) == 2 and all(srv.stops == 1 for srv in s.servers)


def test_a_half_written_compile_cache_is_removed_once_after_the_stop_and_retried_at_once() -> None:
    said: list[str] = []
    s = Script("cache", "ok")
    loaded = s.run(log=said.append)
    assert [srv.cleared for srv in s.servers] == [[CACHE_ENTRY], []]
    assert s.specs[1] == SPEC and s.slept == []  # nothing else changes, no wait
    first, second = loaded.attempts  # type: ignore[attr-defined]
    assert (first.failure_class, first.retryable, first.action, first.evidence) == (
        "compile_cache_corrupt", True, "clear the compile cache", CACHE_LINE)
    assert second.ok and f"removed {CACHE_ENTRY}" in said


def test_a_compile_cache_broken_again_after_removal_stops() -> None:
    s = Script("cache", "cache", "ok")
    with pytest.raises(ColdLoadFailed) as info:
        s.run()
    assert info.value.failure_class == "compile_cache_corrupt"
    assert [a.action for a in info.value.attempts] == ["clear the compile cache", "stop"]
    assert [srv.cleared for srv in s.servers] == [[CACHE_ENTRY], []] and len(s.specs) == 2


def test_port_in_use_retries_at_once_on_a_new_port() -> None:
    s = Script("port", "ok")
    loaded = s.run()
    assert [sp.port for sp in s.specs] == [9100, 9101] and loaded.spec.port == 9101  # type: ignore[attr-defined]
    first, second = loaded.attempts  # type: ignore[attr-defined]
    assert (first.port, first.failure_class, first.action) == (9100, "port_in_use", "retry on a new port")
    assert "9100" in first.evidence and (second.port, second.ok) == (9101, True)
    assert s.slept == []


def test_health_timeouts_back_off_then_fail_with_one_row_per_attempt() -> None:
    s = Script("slow", "slow", "slow")
    seen: list[StartAttempt] = []
    with pytest.raises(ColdLoadFailed) as info:
        s.run(on_attempt=seen.append)
    exc = info.value
    assert s.slept == [5.0, 10.0]
    assert [a.attempt for a in exc.attempts] == [1, 2, 3] and seen == exc.attempts
    assert [(a.failure_class, a.retryable, a.action) for a in exc.attempts] == [
        ("health_timeout", True, "retry"), ("health_timeout", True, "retry"), ("health_timeout", True, "stop")]
    assert all(srv.stops == 1 for srv in s.servers) and len(s.servers) == 3
    assert exc.failure_class == "health_timeout" and "raise the host profile's health timeout" in exc.remediation
    assert str(exc).startswith("health-wait: health_timeout: ")


def test_a_deterministic_failure_stops_after_one_attempt() -> None:
    s = Script("visual", "ok")
    with pytest.raises(ColdLoadFailed, match=r"^health-wait: visual_uninitialized: .*--language-model-only") as info:
        s.run()
    assert [a.action for a in info.value.attempts] == ["stop"] and s.servers[0].stops == 1 and s.slept == []


def test_an_unclassified_failure_re_raises_the_original_after_stopping() -> None:
    s = Script("key", "ok")
    seen: list[StartAttempt] = []
    with pytest.raises(StageFailed, match="rejected roost's API key") as info:
        s.run(on_attempt=seen.append)
    assert not isinstance(info.value, ColdLoadFailed)
    assert s.servers[0].stops == 1 and len(s.specs) == 1
    assert [(a.ok, a.failure_class, a.action) for a in seen] == [(False, "", "stop")]


def test_an_interrupt_while_waiting_stops_the_server_and_propagates() -> None:
    """A cancelled run (Prefect's TerminationSignal, a KeyboardInterrupt) kills its server after
    ABORT_GRACE_S, not the backend's clean-shutdown grace: Prefect's worker kills the run 30 s on."""
    s = Script("interrupt", "ok")
    with pytest.raises(KeyboardInterrupt):
        s.run()
    assert s.servers[0].stops == 1 and len(s.specs) == 1
    assert s.servers[0].graces == [ABORT_GRACE_S]


def test_a_failure_stops_the_server_with_the_backends_own_grace() -> None:
    s = Script("key")
    with pytest.raises(StageFailed):
        s.run()
    assert s.servers[0].graces == [None]


def test_a_user_error_at_start_propagates_without_retry() -> None:
    s = Script("user", "ok")
    with pytest.raises(UserError, match="does not exist"):
        s.run()
    assert len(s.specs) == 1 and s.servers == []


def test_a_failing_bookkeeping_callback_after_success_stops_the_server() -> None:
    s = Script("ok")

    def boom(_: StartAttempt) -> None:
        raise RuntimeError("record store down")

    with pytest.raises(RuntimeError, match="record store down"):
        s.run(on_attempt=boom)
    assert s.servers[0].stops == 1 and s.servers[0].graces == [None]  # a failure, not a cancellation


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ([], ["--kv-cache-memory-bytes", "42"]),
        (["--max-model-len", "2048"], ["--max-model-len", "2048", "--kv-cache-memory-bytes", "42"]),
        (["--kv-cache-memory-bytes", "1", "--dtype", "bfloat16"], ["--dtype", "bfloat16", "--kv-cache-memory-bytes", "42"]),
        (["--kv-cache-memory-bytes=1", "--enforce-eager"], ["--enforce-eager", "--kv-cache-memory-bytes", "42"]),
    ],
)
def test_with_kv_pool_replaces_any_earlier_value(args: list[str], expected: list[str]) -> None:
    assert with_kv_pool(args, 42) == expected
