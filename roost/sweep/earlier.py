"""Which variants a sweep need not land again: a completed run of the same profile (its benchmark settings),
commit and vLLM arguments on one of the sweep's hosts, made with the host's current image. Pure: a ``runs``
table in, rows out.

"The host's current image" is what the host's newest completed run (of any model) was served with:
its image digest (Docker hosts) and the vLLM version the server reported. A host whose image was
rebuilt or whose vLLM was upgraded since the earlier run gets the variant measured again.
"""

from __future__ import annotations

import json
from typing import Any


def _args_text(args: list[str]) -> str:
    return json.dumps(list(args))


def host_images(runs: Any, hosts: list[str]) -> dict[str, tuple[str, str]]:
    """host -> (image digest, vLLM version) of its newest completed run."""
    done = runs[(runs["status"] == "completed") & runs["host_name"].isin(hosts)]
    out: dict[str, tuple[str, str]] = {}
    for row in done.sort_values(["started_at", "run_id"]).to_dict(orient="records"):
        out[str(row["host_name"])] = (str(row["image_digest"] or ""), str(row["vllm_version"] or ""))
    return out


def measured_earlier(runs: Any, profile: str, repo_id: str, commit: str, vllm_args: list[str], hosts: list[str],
                     images: dict[str, tuple[str, str]] | None = None) -> list[dict[str, Any]]:
    """The completed runs of ``profile`` (``repo_id`` at ``commit``) with exactly ``vllm_args`` on one of
    ``hosts``, made with that host's current image, newest first."""
    if runs.empty:
        return []
    current = images if images is not None else host_images(runs, hosts)
    same = runs[(runs["status"] == "completed") & (runs["profile"] == profile) & (runs["repo_id"] == repo_id)
                & (runs["commit"] == commit) & (runs["vllm_args"] == _args_text(vllm_args))
                & runs["host_name"].isin(hosts)]
    return [dict(row) for row in reversed(same.sort_values(["started_at", "run_id"]).to_dict(orient="records"))
            if current.get(str(row["host_name"])) == (str(row["image_digest"] or ""), str(row["vllm_version"] or ""))]
