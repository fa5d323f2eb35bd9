"""``roost.serve.docker.containers`` without an engine: the ``containers.run`` arguments the docker
backend derives from a spec and a host profile (the docker tests run them for real), and the
parsing of the followed ``docker logs --timestamps`` stream."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from roost.errors import UserError
from roost.hosts import CPU, SPARK
from roost.serve.base import ServeSpec
from roost.serve.docker.containers import container_name, docker_run_kwargs, stamped_lines


def spec(tmp_path: Path, **kw: object) -> ServeSpec:
    return ServeSpec(model_dir=tmp_path, served_model_name="ornith-35b", port=8004,
                     vllm_args=["--max-model-len", "262144", "--kv-cache-memory-bytes", "8589934592"], **kw)  # type: ignore[arg-type]


def test_spark_gets_gpus_memlock_and_every_bind_address(tmp_path: Path) -> None:
    host = SPARK.model_copy(update={"bind_addrs": ["127.0.0.1", "172.17.0.1"]})  # the recipes' BIND_ADDRS
    kw = docker_run_kwargs(spec(tmp_path, restart_policy="unless-stopped"), host, image="roost/vllm:abc", api_key="s3cret")
    (req,) = kw["device_requests"]
    assert req["Count"] == -1 and req["Capabilities"] == [["gpu"]]
    assert {u["Name"]: (u["Soft"], u["Hard"]) for u in kw["ulimits"]} == {"memlock": (-1, -1), "stack": (67108864, 67108864)}
    assert kw["ipc_mode"] == "host" and kw["restart_policy"] == {"Name": "unless-stopped"}
    assert kw["init"] is True  # SIGTERM reaches vLLM while it loads (it is not PID 1)
    assert kw["ports"] == {"8004/tcp": [("127.0.0.1", 8004), ("172.17.0.1", 8004)]}
    assert kw["volumes"] == {str(tmp_path.resolve()): {"bind": "/model", "mode": "ro"}}
    assert kw["name"] == "roost-spark-ornith-35b"
    assert kw["labels"] == {"ai.roost.managed": "true", "ai.roost.host": "spark", "ai.roost.model": "ornith-35b",
                            "ai.roost.port": "8004"}
    cmd = kw["command"]
    assert cmd[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == "/model" and cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[-4:] == ["--max-model-len", "262144", "--kv-cache-memory-bytes", "8589934592"]


def test_api_key_only_in_the_environment(tmp_path: Path) -> None:
    kw = docker_run_kwargs(spec(tmp_path), SPARK, image="i", api_key="s3cret")
    assert kw["environment"]["VLLM_API_KEY"] == "s3cret"
    rest = {k: v for k, v in kw.items() if k != "environment"}
    assert "s3cret" not in repr(rest)
    assert "VLLM_API_KEY" not in docker_run_kwargs(spec(tmp_path), SPARK, image="i", api_key=None)["environment"]


def test_cpu_host_no_gpu_no_memlock(tmp_path: Path) -> None:
    kw = docker_run_kwargs(spec(tmp_path), CPU, image="i", api_key=None)
    assert "device_requests" not in kw
    assert [u["Name"] for u in kw["ulimits"]] == ["stack"]
    assert kw["restart_policy"] == {"Name": "no"}
    assert kw["environment"]["HF_HUB_OFFLINE"] == "1"


def test_on_failure_policy_is_bounded(tmp_path: Path) -> None:
    kw = docker_run_kwargs(spec(tmp_path, restart_policy="on-failure"), CPU, image="i", api_key=None)
    assert kw["restart_policy"] == {"Name": "on-failure", "MaximumRetryCount": 3}


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"restart_policy": "sometimes"}, "restart policy 'sometimes' is not one of no, always, unless-stopped"),
        ({"spec_env": {"VLLM_API_KEY": "x"}}, "must not carry VLLM_API_KEY"),
        ({"missing_dir": True}, "does not exist"),
    ],
)
def test_bad_input_is_a_user_error(tmp_path: Path, kwargs: dict[str, object], message: str) -> None:
    s = spec(tmp_path, env=kwargs.get("spec_env", {}))
    if kwargs.get("missing_dir"):
        s = s.model_copy(update={"model_dir": tmp_path / "absent"})
    if "restart_policy" in kwargs:  # a value the type refuses can still arrive from a saved document
        s = s.model_copy(update={"restart_policy": kwargs["restart_policy"]})
    with pytest.raises(UserError, match=message):
        docker_run_kwargs(s, CPU, image="i", api_key=None)


def test_container_names_are_stable_and_docker_safe() -> None:
    assert container_name("spark", "ornith-35b") == container_name("spark", "ornith-35b") == "roost-spark-ornith-35b"
    assert container_name("spark", "ornith-ai/Ornith 1.5:NVFP4") == "roost-spark-ornith-ai-Ornith-1.5-NVFP4"
    assert container_name("cpu", "tiny") != container_name("spark", "tiny")


def test_stamped_log_entries_keep_the_daemons_time() -> None:
    t = dt.datetime(2026, 11, 30, 8, 9, 44, 76934, tzinfo=dt.UTC)
    assert stamped_lines(b"2026-11-30T08:09:44.076934789Z INFO:     Application startup complete.", None) == [
        (t, "INFO:     Application startup complete.")]
    # a progress bar's redraws (\r) are lines of the entry's time; blank pieces are dropped
    bar = b"2026-11-30T08:09:44.076934789Z shards:  50% | 1/2\rshards: 100% | 2/2\r"
    assert stamped_lines(bar, None) == [(t, "shards:  50% | 1/2"), (t, "shards: 100% | 2/2")]
    # an entry without a stamp (cut by the engine) takes the previous entry's time
    earlier = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    assert stamped_lines(b"continued text", earlier) == [(earlier, "continued text")]
    assert stamped_lines(b"2026-11-30T08:09:44.076934789Z ", earlier) == []
