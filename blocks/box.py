"""The Prefect side of ``roost install`` (:class:`roost.install.box.PrefectSide`): the upstream vLLM key the
box's server already holds, and the box's URLs recorded on its host block, on the server at ``api_url``."""

from __future__ import annotations

from typing import Any, cast

from prefect.blocks.system import Secret
from prefect.settings import PREFECT_API_URL, temporary_settings
from pydantic import SecretStr

from blocks.hosts import HostBlock
from blocks.resolve import VLLM_API_KEY_BLOCK, _read_document
from roost.install.system import Status


class PrefectBlocks:
    def read_vllm_key(self, api_url: str) -> str | None:
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            data = _read_document(Secret.get_block_type_slug(), VLLM_API_KEY_BLOCK)
        value: Any = (data or {}).get("value")
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return str(value) if value else None

    def record_host_urls(self, api_url: str, host: str, results_url: str, gateway_url: str) -> Status:
        with temporary_settings(updates={PREFECT_API_URL: api_url}):
            block = cast("HostBlock", HostBlock.load(host))
            if block.results_url == results_url and block.gateway_url == gateway_url:
                return "unchanged"
            block.results_url, block.gateway_url = results_url, gateway_url
            block.save(host, overwrite=True)
        return "updated"
