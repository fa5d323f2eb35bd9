"""The ``audit`` flow: download + audit + plan, no server, results through the API; the Hub token of a
gated repository from the profile's Secret block."""

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
    from roost.serve.process import process_servers

    result: dict[str, Any] = audit(profile="local")
    assert result["profile"] == "local" and result["host"] == "cpu"
    assert len(result["commit"]) == 40
    assert not [f for f in result["audit"]["findings"] if f["severity"] == "error"]
    assert result["plan"]["vllm_args"] and result["vllm_args"][-2:] == ["--dtype", "bfloat16"]  # profile overrides last
    assert process_servers("cpu") == []  # nothing was served
    again = audit(profile="local")
    assert again["download_cached"] and again["commit"] == result["commit"]
    with get_client(sync_client=True) as client:
        (art,) = client.read_artifacts(artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["audit-local-cpu"])),
                                       limit=1)
    assert result["commit"][:12] in str(art.data) and "--dtype bfloat16" in str(art.data)


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
