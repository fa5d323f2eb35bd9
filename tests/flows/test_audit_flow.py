"""The ``audit`` flow: download + audit + plan of the demo model, no server, results through the API."""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.slow


def test_audits_and_plans_without_serving(prefect_api: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey

    from flows.audit import audit
    from roost.serve.discover import process_servers

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
