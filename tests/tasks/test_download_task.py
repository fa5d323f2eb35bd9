"""The download task on a real Prefect server and a real olah: the DownloadResult it returns (also from
Prefect's cache), progress artifact, caching by commit and fingerprints, no Prefect retries for 401 nor
for a Hub roost's client already retried, the token from a Secret block."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from prefect import flow
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.settings import get_current_settings
from support.flow_logs import run_log_messages, run_logs
from support.hub import HubProxy, local_hub, write_checkpoint_files

from blocks.secrets import token_from
from roost.errors import UserError
from roost.hub.errors import HubUnreachable
from roost.hub.mirror import HubMirror
from roost.hub.snapshot import DownloadResult, RetryPolicy
from roost.net import free_port
from roost.profiles import ModelProfile
from tasks.download import CACHE_KEY_PREFIX, download_cache_key, download_task

pytestmark = pytest.mark.slow

REPO = "acme/task-model"
PRIVATE = "acme/task-private"


def profile(repo_id: str = REPO) -> ModelProfile:
    return ModelProfile(name="task-test", repo_id=repo_id, served_model_name="t")


@dataclass
class TaskHub:
    mirror: HubMirror
    commit: str  # of REPO

    @property
    def endpoint(self) -> str:
        return self.mirror.endpoint


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TaskHub]:
    base = tmp_path_factory.mktemp("task-hub")
    src = write_checkpoint_files(base / "src", shard_sizes=[1_500_000, 300_000], seed=21)
    private = write_checkpoint_files(base / "private", shard_sizes=[1000], seed=22)
    with local_hub(base / "mirrors", {REPO: src, PRIVATE: private}, private=[PRIVATE]) as (mirror, commits):
        yield TaskHub(mirror, commits[REPO])


def run_count(task_run_id: str) -> int:
    with get_client(sync_client=True) as client:
        return int(client.read_task_run(task_run_id).run_count)  # type: ignore[arg-type]


def outcome(state: Any) -> dict[str, Any]:
    """What a test needs from a task's final state, taken inside the flow (so the flow itself completes)."""
    error = state.result(raise_on_failure=False)
    return {
        "failed": state.is_failed(),
        "task_run_id": state.state_details.task_run_id,
        "flow_run_id": state.state_details.flow_run_id,
        "error": error if isinstance(error, BaseException) else None,
    }


def test_download_task_reports_progress_and_caches_by_commit(
    prefect_api: str, hub: TaskHub, tmp_path: Path
) -> None:
    @flow
    def three_times() -> list[Any]:
        return [
            download_task(profile(), None, str(tmp_path), endpoint=hub.endpoint, return_state=True)
            for _ in range(3)
        ]

    first, second, third = three_times()
    r1, r2, r3 = first.result(), second.result(), third.result()
    assert all(isinstance(r, DownloadResult) for r in (r1, r2, r3))
    assert r1.cached is False and r1.commit == r2.commit == r3.commit == hub.commit
    assert r1.local_dir == r2.local_dir == str(tmp_path.resolve())
    assert r2.cached is True and r2.hashed_bytes == 0 == r2.downloaded_bytes  # roost's own fingerprint cache
    # Prefect's cache, keyed by commit + fingerprints: the task did not run; the persisted JSON result
    # comes back as the same DownloadResult
    assert first.name == second.name == "Completed" and third.name == "Cached" and r3 == r2
    key = download_cache_key(None, {"profile": profile(), "local_dir": str(tmp_path), "endpoint": hub.endpoint})  # type: ignore[arg-type]
    assert key is not None and key.startswith(CACHE_KEY_PREFIX)
    assert (Path(get_current_settings().results.local_storage_path) / key).is_file()  # r2's result, under its key
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["download-acme-task-model"]))
        )
    assert artifacts and artifacts[0].type == "progress" and float(artifacts[0].data) == 100.0  # type: ignore[arg-type]

    # a file touched on disk changes the key: the task runs again (and re-hashes that file)
    shard = next(Path(tmp_path).glob("model-00001-*.safetensors"))
    os.utime(shard, ns=(shard.stat().st_atime_ns, shard.stat().st_mtime_ns + 10**9))

    @flow
    def once_more() -> Any:
        return download_task(profile(), None, str(tmp_path), endpoint=hub.endpoint, return_state=True)

    fourth = once_more()
    assert fourth.name == "Completed" and fourth.result().hashed_bytes == shard.stat().st_size


def test_401_is_not_retried_and_the_secret_token_is_never_logged(
    prefect_api: str, hub: TaskHub, tmp_path: Path
) -> None:
    token = "hf_secret_" + os.urandom(8).hex()
    Secret(value=token).save("roost-test-hf-token", overwrite=True)

    @flow
    def private() -> dict[str, Any]:
        return outcome(
            download_task(
                profile(PRIVATE),
                None,
                str(tmp_path),
                endpoint=hub.endpoint,
                token_secret="roost-test-hf-token",
                return_state=True,
            )
        )

    out = private()
    assert out["failed"] and run_count(out["task_run_id"]) == 1
    assert isinstance(out["error"], UserError)
    assert "with the token roost used (HTTP 401)" in str(out["error"]) and token not in str(out["error"])
    logs = run_log_messages(out["flow_run_id"], flush_s=5)  # the run's logs reach the server in batches
    assert logs and not any(token in message for message in logs)
    with pytest.raises(UserError, match="Prefect Secret block 'roost-no-such-block' not found"):
        token_from("roost-no-such-block")


def test_an_unreachable_hub_is_retried_by_roost_not_again_by_prefect(prefect_api: str, tmp_path: Path) -> None:
    """One layer retries each failure: roost's client spent its attempts (HubUnreachable says so), so
    Prefect's retries, still declared, do not run the download again."""
    closed = f"http://127.0.0.1:{free_port()}"

    @flow
    def unreachable() -> dict[str, Any]:
        return outcome(
            download_task.with_options(retries=1, retry_delay_seconds=0)(
                profile(),
                None,
                str(tmp_path),
                endpoint=closed,
                retry=RetryPolicy(attempts=1),
                return_state=True,
            )
        )

    out = unreachable()
    assert out["failed"] and run_count(out["task_run_id"]) == 1
    assert isinstance(out["error"], HubUnreachable) and "the most roost makes" in str(out["error"])


class FirstShardFails(HubProxy):
    """The first request for a weights file answers 503 (a transient Hub fault roost.hub retries)."""

    failed = False

    def refusal(self, path: str, authorization: str | None) -> tuple[int, str] | None:
        if not self.failed and "/resolve/" in path and path.endswith(".safetensors"):
            self.failed = True
            return 503, "try again"
        return None


def test_roost_hub_retries_reach_the_flow_runs_logs(prefect_api: str, hub: TaskHub, tmp_path: Path) -> None:
    """With ``roost`` an extra logger (the deployments' env, ``roost run``), the retry roost.hub logs
    from a download thread is in the flow run's logs read back from the API, at INFO with the rest."""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PREFECT_API_URL=prefect_api, PREFECT_LOGGING_EXTRA_LOGGERS="roost",
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    with FirstShardFails(hub.endpoint) as faulty:
        done = subprocess.run([sys.executable, str(Path(__file__).with_name("download_log_flow.py")), REPO,
                               str(tmp_path / "ckpt"), faulty.endpoint], env=env, cwd=root, capture_output=True,
                              text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert faulty.failed
    flow_run_id = done.stdout.strip().splitlines()[-1]
    hub_lines = [(log.name, log.level, log.message) for log in run_logs(flow_run_id) if log.name.startswith("roost.hub")]
    assert any("transient fault" in m and "HTTP 503" in m and "retry 1/2" in m for _, _, m in hub_lines), hub_lines
    assert any(level == logging.INFO for _, level, _ in hub_lines), hub_lines  # the plan line, at INFO
    assert "attempted to send logs to the API without a flow run id" not in done.stderr
    assert done.stderr.count("transient fault") == 1  # once on the terminal, not twice
