"""``land`` runs the preflight first: a checkpoint its plan refuses, or one with an error finding, stops
the run before a weight byte is downloaded, with the message the audit of the downloaded files gives.

Real parts: olah serving the repositories behind ``RangeHub`` (which honours ``Range`` and counts the
body bytes it sends per file), a real Prefect server, the real flow in this process.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow

HEADER_READ = 1 << 16  # roost.hub.preflight.FIRST_READ: all a ranged header read may take of a small shard


@pytest.fixture(scope="module")
def hub(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``acme/tiny`` (the demo checkpoint) and ``acme/broken`` (its index names a shard it lacks) on a
    local Hub that honours Range; HF_ENDPOINT points at it for the module."""
    from support.hub import RangeHub, local_hub

    tmp = tmp_path_factory.mktemp("preflight-hub")
    broken = tmp / "broken"
    shutil.copytree(tiny_model, broken)
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    (broken / sorted(set(index["weight_map"].values()))[-1]).unlink()
    with local_hub(tmp / "mirrors", {"acme/tiny": tiny_model, "acme/broken": broken}) as (mirror, _), \
            RangeHub(mirror.endpoint, tmp / "mirrors") as ranged, pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_ENDPOINT", ranged.endpoint)
        ranged.broken_dir = broken
        yield ranged


def _profile(name: str, repo: str, **fields: Any) -> str:
    from blocks.profiles import ModelProfileBlock
    from roost.profiles import LOCAL

    prof = LOCAL.model_copy(update={"name": name, "repo_id": repo, "demo": False, "served_model_name": name, **fields})
    ModelProfileBlock.from_profile(prof).save(name, overwrite=True)
    return name


def _weights_served(hub: Any) -> dict[str, int]:
    return {p: n for p, n in hub.served.items() if p.endswith(".safetensors")}


def test_a_refused_plan_stops_the_landing_before_the_download(prefect_api: str, hub: Any) -> None:
    from flows.land import land
    from roost.plan.preflight import PlanRefused
    from roost.settings import checkpoint_dir
    from roost.store import load_records

    profile = _profile("preflight-refused", "acme/tiny", kv_cache_memory_bytes=4096)  # not one request's KV
    with pytest.raises(PlanRefused, match="vLLM would not start") as refused:
        land(profile=profile, host="cpu", notify=False)
    assert refused.value.failure_class  # classified as the plan classifies it
    assert not checkpoint_dir("acme/tiny").exists()  # not a byte downloaded
    served = _weights_served(hub)
    assert served and all(n <= HEADER_READ for n in served.values()), served  # headers only, through Range
    assert all(r.endswith(" 206") for r in hub.requests if r.split()[1].endswith(".safetensors")), hub.requests
    (record,) = [r for r in load_records() if r.meta.profile == profile]
    assert record.status == "failed" and record.failed_stage == "preflight"
    assert [s.stage for s in record.stages] == ["preflight"]  # no download, no server (the report comes after)
    assert record.meta.commit and record.remediation == refused.value.remediation


def test_an_error_finding_stops_the_landing_with_the_local_audits_message(prefect_api: str, hub: Any) -> None:
    from flows.land import land
    from roost.errors import StageFailed
    from roost.hosts import get_host
    from roost.plan.report import audit_for_host
    from roost.settings import checkpoint_dir
    from roost.store import load_records

    profile = _profile("preflight-broken", "acme/broken")
    before = dict(hub.served)
    with pytest.raises(StageFailed) as failed:
        land(profile=profile, host="cpu", notify=False)
    assert not checkpoint_dir("acme/broken").exists()
    assert all(n - before.get(p, 0) <= HEADER_READ for p, n in _weights_served(hub).items())
    (record,) = [r for r in load_records() if r.meta.profile == profile]
    assert record.failed_stage == "preflight" and "download" not in [s.stage for s in record.stages]
    # the message the audit of the same files on disk gives, the location aside
    broken = hub.broken_dir
    local = audit_for_host(broken, get_host("cpu"))
    expected = "; ".join(f"{f.code}: {f.message}" for f in local.errors)
    assert expected and str(failed.value) == "preflight: " + expected.replace(
        str(broken), f"hf://acme/broken@{record.meta.commit}")


def test_a_landing_that_fails_outside_every_stage_is_a_failed_run(prefect_api: str, monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path) -> None:
    """The demo's Hub mirror not answering (seen when two landings on one machine shared olah's config):
    the run fails, and the record stored says so; it was once stored and reported as a completed run.
    The mirror's failure is simulated (FAKE: local_hub_task raises what HubMirror raises on a time-out)."""
    import flows.stages.hub
    from flows.land import land
    from roost.errors import StageFailed
    from roost.profiles import LOCAL
    from roost.store import load_records

    def no_mirror(prof: Any) -> Any:
        raise StageFailed("hub-mirror", "olah did not answer on http://127.0.0.1:1 within 60 s")

    monkeypatch.setattr(flows.stages.hub, "local_hub_task", no_mirror)
    monkeypatch.setenv("ROOST_RESULTS_DIR", str(tmp_path / "results"))
    with pytest.raises(StageFailed, match="olah did not answer"):
        land(profile="local", notify=False)
    (record,) = load_records(tmp_path / "results", model=LOCAL.repo_id)
    assert (record.status, record.failed_stage) == ("failed", "setup")
    assert record.failure_class == "setup_failed" and "olah did not answer" in record.failure_message
