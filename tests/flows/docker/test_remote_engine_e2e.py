"""A host whose Docker engine is on another machine, landed by its own worker, end to end.

The other machine is a second ``dockerd`` in a network namespace this module creates (``support.remote_engine``):
reached only at ``tcp://10.231.N.2:23750`` over a veth pair, its loopback its own, with the vLLM CPU base image
loaded into it as onto a remote engine (``docker save | docker -H ... load``). The host ``remote-engine`` is a
saved Roost Host block (as a user saves one in the UI) whose ``docker_url`` names that engine and whose
``bind_addrs`` publish vLLM's port on the engine's loopback (for the machine's own gateway and Prometheus) and
on its address; the demo profile, saved with a fixed port, lands through the ``land/remote-engine`` deployment
on a real ``prefect worker start`` bound to the host's work queue. It is kept serving, so what it left is there
to look at.

What is proved: the serving image was built, and the container runs, on the second engine, and neither on the
first; roost reached the server at the engine's address, never at 127.0.0.1 (where the old code went: the port
is published on 127.0.0.1 too, but the engine's), and the fixed port was not refused because the engine's
address is not this machine's (the old occupancy check bound it here); the run is in history with that host.
The engine, its namespace and everything in them are gone afterwards (the helper fails otherwise).
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.deployments import run_deployment
from prefect.exceptions import ObjectNotFound
from prefect.workers.process import ProcessWorker
from support.remote_engine import Prefetch, RemoteEngine
from support.workers import start_worker, wait_final

from blocks.hosts import HostBlock
from blocks.profiles import ModelProfileBlock
from blocks.resolve import all_profiles, load_host
from deployments.deploy import apply_deployment, build_deployment
from deployments.setup import engine_command
from roost.gateway import registry
from roost.hosts import CPU_DOCKER
from roost.net import free_port
from roost.profiles import LOCAL
from roost.serve.docker.backend import DockerBackend
from roost.serve.docker.containers import LABEL_HOST
from roost.serve.dockerfile import LABEL_MANAGED
from roost.store import load_records
from tasks.host_slot import host_limit_name

pytestmark = [pytest.mark.slow, pytest.mark.docker]

HOST = "remote-engine"
POOL = "roost-remote"  # a pool of its own: the session's other pools and deployments stay as they are
PROFILE = "remote-quick"
QUICK_BENCH = {"prompt_lengths": [128], "output_tokens": 16, "concurrency": [2], "repeats": 1, "warmup": 1}
RUN_TIMEOUT_S = 1500  # a guard against a hung run; nothing here is timed
_ACCESS = re.compile(r'INFO:\s+(\d+\.\d+\.\d+\.\d+):\d+ - "')


@pytest.fixture(scope="module")
def engine(remote_engine_prefetch: Prefetch | None) -> Iterator[RemoteEngine]:
    """The second engine the directory's conftest started setting up with the session's first test here;
    torn down at the module's end."""
    assert remote_engine_prefetch is not None  # set up whenever this module is in the session
    try:
        yield remote_engine_prefetch.engine()
    finally:
        remote_engine_prefetch.close()


def _delete_prefect_objects(deployment: str) -> None:
    """What this module put on the session's server: its deployment, pool (and queue), blocks and host limit."""
    with get_client(sync_client=True) as client:
        with contextlib.suppress(ObjectNotFound):
            client.delete_deployment(client.read_deployment_by_name(deployment).id)
        with contextlib.suppress(ObjectNotFound):
            client.delete_work_pool(POOL)
        for slug, name in (("roost-host", HOST), ("model-profile", PROFILE)):
            with contextlib.suppress(ObjectNotFound):
                doc = client.read_block_document_by_name(name=name, block_type_slug=slug)
                assert doc.id is not None
                client.delete_block_document(doc.id)
        with contextlib.suppress(ObjectNotFound):
            client.delete_global_concurrency_limit_by_name(host_limit_name(HOST))


@pytest.fixture(scope="module")
def landed(engine: RemoteEngine, prefect_api: str, session_dir: Path) -> Iterator[dict[str, Any]]:
    """The demo profile landed on ``remote-engine`` through its deployment and worker, kept serving."""
    port = free_port()  # free on this machine's loopback: where the old code would have looked for the server
    HostBlock.from_profile(CPU_DOCKER.model_copy(update={
        "name": HOST, "description": "A CPU box whose Docker engine roost reaches over the network",
        "docker_url": engine.url, "bind_addrs": ["127.0.0.1", engine.addr],
    })).save(HOST, overwrite=True)
    ModelProfileBlock.from_profile(LOCAL.model_copy(update={
        "name": PROFILE, "host": HOST, "port": port, "bench": QUICK_BENCH,
        "vllm_overrides": [*LOCAL.vllm_overrides, "--enforce-eager"],  # no compile warm-up: a shorter cold load
    })).save(PROFILE, overwrite=True)
    dep = build_deployment("land", load_host(HOST), pool=POOL, profiles=all_profiles())
    worker = None
    try:
        template = ProcessWorker.get_default_base_job_template()
        template["variables"]["properties"]["command"]["default"] = engine_command()  # as roost setup makes it
        with get_client(sync_client=True) as client:
            client.create_work_pool(WorkPoolCreate(name=POOL, type="process", base_job_template=template))
        apply_deployment(dep)
        worker = start_worker("worker-remote-engine", [HOST], log=session_dir / "worker-remote-engine.log", pool=POOL)
        t0 = time.monotonic()
        fr = run_deployment(dep.full_name, timeout=0, parameters={
            "profile": PROFILE, "keep_serving": True, "notify": False, "evaluate": False})
        done = wait_final(fr.id, RUN_TIMEOUT_S)
        seconds = engine.seconds | {"landing": time.monotonic() - t0}
        print("remote engine wall time: " + ", ".join(f"{k} {v:.1f} s" for k, v in seconds.items()))
        yield {"flow_run": done, "port": port, "seconds": seconds}
    finally:
        if worker is not None:
            worker.stop()
        registry.forget_host(HOST)  # the kept server's registration for the gateway (the session's ROOST_HOME)
        _delete_prefect_objects(dep.full_name)


def _record(flow_run_id: Any) -> Any:
    (rec,) = [r for r in load_records(host=HOST) if r.meta.prefect_flow_run_id == str(flow_run_id)]
    return rec


def test_a_host_on_a_remote_engine_lands_there_and_is_reached_there(
        landed: dict[str, Any], engine: RemoteEngine, docker_engine: Any) -> None:
    fr, port = landed["flow_run"], landed["port"]
    assert fr.state.is_completed(), fr.state
    rec = _record(fr.id)
    print("landing stages: " + ", ".join(f"{s.stage} {s.seconds:.1f} s" for s in rec.stages))
    assert (rec.status, rec.meta.host, rec.meta.backend, rec.meta.profile) == ("completed", HOST, "docker", PROFILE)

    # the container runs on the second engine, from the serving image built there, and not on the first
    remote = engine.client()
    try:
        (kept,) = remote.containers.list(filters={"label": [f"{LABEL_MANAGED}=true", f"{LABEL_HOST}={HOST}"]})
        assert (kept.name, kept.status) == ("roost-remote-engine-tiny", "running")
        assert kept.attrs["HostConfig"]["PortBindings"] == {f"{port}/tcp": [
            {"HostIp": "127.0.0.1", "HostPort": str(port)}, {"HostIp": engine.addr, "HostPort": str(port)}]}
        assert remote.images.get(rec.meta.image).labels[LABEL_MANAGED] == "true"
        access = _ACCESS.findall(kept.logs().decode(errors="replace"))
    finally:
        remote.close()
    assert docker_engine.containers.list(all=True, filters={"label": f"{LABEL_HOST}={HOST}"}) == []
    assert kept.name not in {c.name for c in docker_engine.containers.list(all=True)}

    # roost reached it at the engine's address: every request vLLM logged came over the veth from this
    # machine's end (health checks, probes, benchmark), and this machine's loopback has nothing on that port
    assert access and set(access) == {engine.host_addr}, sorted(set(access))
    assert httpx.get(f"http://{engine.addr}:{port}/health", timeout=10).status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{port}/health", timeout=10)
    stages = {s.stage: s for s in rec.stages}
    assert stages["gateway"].note.startswith(f"registered http://{engine.addr}:{port}"), stages["gateway"].note
    (served,) = DockerBackend(load_host(HOST)).servers()  # roost's own discovery finds it at the same place
    assert served.base_url == f"http://{engine.addr}:{port}" and served.container == kept.name

    # the fixed port was not refused (no process of this machine can hold the engine's port), nobody could
    # measure the engine machine's memory from here, and the one attempt served on the profile's port
    assert [(a.ok, a.port) for a in rec.serve.attempts] == [(True, port)]
    assert any(n.startswith("memory: unknown available") for n in rec.serve.host_check), rec.serve.host_check
    assert stages["build"].status == "completed" and stages["serve"].status == "completed"
    assert rec.points and all(p.errors == 0 and p.requests > 0 for p in rec.points)
