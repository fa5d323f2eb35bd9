"""Talking to a server roost found running (``Backend.servers()``: the process backend's state files,
the docker backend's labelled containers): does it answer with a given key, serving what it says?"""

from __future__ import annotations

from typing import Literal

import httpx

from roost.serve.base import ServerInfo
from roost.vllm.client import ModelsAnswer, VllmClient, run_sync

ProbeResult = Literal["ok", "unauthorized", "wrong-model", "unreachable"]

__all__ = ["ProbeResult", "probe"]


def probe(server: ServerInfo, api_key: str | None, timeout_s: float = 5.0) -> ProbeResult:
    """Does ``server`` answer ``/v1/models`` with ``api_key`` and list its served model name?"""

    async def ask() -> ModelsAnswer:
        async with VllmClient(server.base_url, api_key=api_key, connect_timeout_s=timeout_s) as client:
            return await client.models(timeout_s=timeout_s)

    try:
        answer = run_sync(ask)
    except httpx.HTTPError:
        return "unreachable"
    if answer.status_code in (401, 403):
        return "unauthorized"
    if answer.status_code != 200:
        return "unreachable"
    return "ok" if server.served_model_name in answer.ids else "wrong-model"
