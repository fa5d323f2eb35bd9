"""The ``audit`` flow: audit + plan from the Hub's headers without downloading (and, asked, download +
audit on disk), no server, results through the API; any Hub repository; the Hub token of a gated
repository from the profile's Secret block."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.slow


def test_audits_and_plans_without_serving(prefect_api: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.audit import audit
    from roost.profiles import LOCAL
    from roost.serve.process import process_servers

    result: dict[str, Any] = audit(profile="local")  # from the Hub's headers: nothing downloaded
    assert result["profile"] == "local" and result["host"] == "cpu"
    assert len(result["commit"]) == 40 and result["local_dir"] is None
    assert 0 < result["bytes_fetched"] < result["audit"]["weight_bytes"]
    assert result["audit"]["repo_id"] == "roost-demo/tiny-qwen3" and result["audit"]["commit"] == result["commit"]
    assert not [f for f in result["audit"]["findings"] if f["severity"] == "error"]
    overrides = LOCAL.vllm_overrides
    assert result["plan"]["vllm_args"] and result["vllm_args"][-len(overrides):] == overrides  # profile overrides last
    # the audit reports the window and the name the plan (and the landing) use: the profile's, not the config's
    assert result["audit"]["max_model_len"] == result["plan"]["max_model_len"] == result["max_model_len"] == 2048
    assert result["audit"]["served_model_name"] == result["plan"]["served_model_name"] == "tiny"
    assert result["audit"]["native_max_model_len"] == 4096
    assert process_servers("cpu") == []  # nothing was served
    with get_client(sync_client=True) as client:
        (art,) = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["audit-local-cpu"])),
                                       limit=1)
    text = str(art.data)
    assert result["commit"][:12] in text and "--dtype bfloat16" in text
    assert "read from the Hub without downloading" in text and "KV cache" in text and "servable as planned" in text
    assert "| served model name | `tiny` |" in text and "| max model len | 2,048 tokens (native 4,096 tokens) |" in text

    downloaded: dict[str, Any] = audit(profile="local", download=True)  # and audited on disk, against the preflight
    assert downloaded["commit"] == result["commit"] and downloaded["local_dir"]
    assert downloaded["vllm_args"] == result["vllm_args"]  # the same plan from the headers as from the files
    assert {k: v for k, v in downloaded["audit"].items() if k not in ("path", "audit_seconds")} == {
        k: v for k, v in result["audit"].items()
        if k not in ("path", "audit_seconds", "repo_id", "commit", "bytes_fetched")}
    again = audit(profile="local", download=True)
    assert again["download_cached"] and again["commit"] == result["commit"]


def test_any_hub_repository_is_audited_and_a_refused_plan_is_reported(
    prefect_api: str, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``repo=hf://...``: a repository no profile names, planned with roost's defaults for the host; an error
    finding fails the run after the artifact says why."""
    import json
    import shutil

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from support.hub import local_hub

    from flows.audit import audit
    from roost.errors import CheckFailed

    broken = tmp_path / "broken"
    shutil.copytree(tiny_model, broken)
    index = json.loads((broken / "model.safetensors.index.json").read_text())
    (broken / sorted(set(index["weight_map"].values()))[-1]).unlink()  # the index names a shard the repo lacks
    with local_hub(tmp_path / "mirrors", {"acme/any": tiny_model, "acme/broken": broken}) as (mirror, commits):
        monkeypatch.setenv("HF_ENDPOINT", mirror.endpoint)
        result: dict[str, Any] = audit(repo=f"hf://acme/any@{commits['acme/any']}", host="cpu")
        assert result["repo_id"] == "acme/any" and result["commit"] == commits["acme/any"]
        assert result["vllm_args"][:2] == ["--served-model-name", "acme--any"] and result["local_dir"] is None
        with pytest.raises(CheckFailed, match="MISSING_SHARD"):
            audit(repo="hf://acme/broken", host="cpu")
    with get_client(sync_client=True) as client:
        (art,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["audit-acme-broken-cpu"])), limit=1)
    text = str(art.data)
    assert "not servable as planned" in text and "| error | MISSING_SHARD |" in text


def test_a_gated_repo_whose_token_is_only_in_a_secret_block_is_audited(
    prefect_api: str, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The profile names the Secret block holding the Hub token (``hf_token_secret``); the audit flow
    passes it to the download as ``land`` does. Without it, the gate's refusal is the run's error."""
    from prefect.blocks.system import Secret
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
    from support.hub import GatedHub

    from blocks.profiles import ModelProfileBlock
    from flows.audit import audit
    from roost.errors import UserError
    from roost.hub.mirror import HubMirror
    from roost.hub.publish import publish_repo
    from roost.profiles import LOCAL

    repo, token = "acme-gated/tiny", "hf_gated_" + secrets.token_hex(12)
    commit = publish_repo(tiny_model, tmp_path / "mirrors", repo)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    Secret(value=token).save("roost-test-gated-token", overwrite=True)
    gated_profile = LOCAL.model_copy(update={"name": "gated-tiny", "repo_id": repo, "demo": False,
                                             "hf_token_secret": "roost-test-gated-token"})
    ModelProfileBlock.from_profile(gated_profile).save("gated-tiny", overwrite=True)
    ModelProfileBlock.from_profile(gated_profile.model_copy(update={"name": "gated-tiny-no-token",
                                                                    "hf_token_secret": None})).save(
        "gated-tiny-no-token", overwrite=True)
    with HubMirror(tmp_path / "mirrors") as mirror, GatedHub(mirror.endpoint, repo, token) as gated:
        monkeypatch.setenv("HF_ENDPOINT", gated.endpoint)
        with pytest.raises(UserError, match=r"acme-gated/tiny is a gated repository and no token was given"):
            audit(profile="gated-tiny-no-token")
        result: dict[str, Any] = audit(profile="gated-tiny")
    assert result["repo_id"] == repo and result["commit"] == commit
    assert not [f for f in result["audit"]["findings"] if f["severity"] == "error"]
    assert any(r.startswith("GET /api/models/acme-gated/tiny") and r.endswith(" 401") for r in gated.requests)
    assert any(r.startswith("GET /acme-gated/tiny/resolve/") and r.endswith(" 200") for r in gated.requests)
    with get_client(sync_client=True) as client:
        (art,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["audit-gated-tiny-cpu"])), limit=1)
    assert commit[:12] in str(art.data) and token not in str(art.data)
