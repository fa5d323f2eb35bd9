"""Resolution against a real Prefect server: a saved block document wins, the built-in is the
fallback, a host saved by an earlier release (``spark-host``) is read until it is migrated, a broken
document or an unknown name is a clear UserError, and the vLLM key comes from the environment first
and the Secret block second (never echoed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prefect.blocks.system import Secret
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import BlockDocumentCreate
from prefect.exceptions import ObjectNotFound
from pydantic import SecretStr
from support.legacy_blocks import LegacySparkHost, delete_document

from blocks.hosts import HostBlock
from blocks.profiles import ModelProfileBlock
from blocks.resolve import (
    VLLM_API_KEY_BLOCK,
    all_profiles,
    known_host_names,
    load_host,
    load_profile,
    load_vllm_api_key,
    vllm_api_key_with_source,
)
from roost.errors import UserError
from roost.hosts import CPU, SPARK
from roost.profiles import LOCAL, ORNITH_15_NVFP4

pytestmark = pytest.mark.slow


@pytest.fixture
def api(prefect_api: str) -> Iterator[str]:
    HostBlock.register_type_and_schema()
    ModelProfileBlock.register_type_and_schema()
    yield prefect_api


_delete = delete_document


def test_builtins_when_no_document(api: str) -> None:
    assert load_host("cpu") == CPU and load_profile("local") == LOCAL
    with pytest.raises(UserError, match=r"unknown host 'resolve-none'.*cpu.*spark"):
        load_host("resolve-none")
    with pytest.raises(UserError, match=r"unknown model profile 'resolve-none'.*local.*ornith-9b"):
        load_profile("resolve-none")


def test_saved_document_wins_and_custom_names_resolve(api: str) -> None:
    custom = ModelProfileBlock.from_profile(LOCAL.model_copy(update={"name": "resolve-quick", "bench": {"repeats": 1}}))
    custom.save("resolve-quick", overwrite=True)
    host = HostBlock.from_profile(CPU.model_copy(update={"name": "resolve-box", "bandwidth_gb_s": 42.0}))
    host.save("resolve-box", overwrite=True)
    try:
        assert load_profile("resolve-quick").bench == {"repeats": 1}
        assert "resolve-quick" in all_profiles()
        box = load_host("resolve-box")
        assert (box.name, box.bandwidth_gb_s, box.backend) == ("resolve-box", 42.0, "process")
        assert "resolve-box" in known_host_names()
    finally:
        _delete("model-profile", "resolve-quick")
        _delete("roost-host", "resolve-box")
    with pytest.raises(UserError, match=r"^unknown model profile 'resolve-quick': choose one of "):
        load_profile("resolve-quick")
    assert "resolve-box" not in known_host_names()


def test_dotted_profile_name_reads_its_document(api: str) -> None:
    edited = ModelProfileBlock.from_profile(ORNITH_15_NVFP4.model_copy(update={"max_num_seqs": 7}))
    edited.save("ornith-1-5-35b-a3b-nvfp4", overwrite=True)
    try:
        prof = load_profile("ornith-1.5-35b-a3b-nvfp4")
        assert (prof.name, prof.max_num_seqs) == ("ornith-1.5-35b-a3b-nvfp4", 7)
    finally:
        ModelProfileBlock.from_profile(ORNITH_15_NVFP4).save("ornith-1-5-35b-a3b-nvfp4", overwrite=True)
    assert load_profile("ornith-1.5-35b-a3b-nvfp4") == ORNITH_15_NVFP4


def test_broken_document_is_a_user_error(api: str) -> None:
    """A document written past the block's validation (as an old schema or a raw API call would)."""
    _save_unvalidated("roost-host", "resolve-broken", SPARK.model_dump(mode="json") | {"bandwidth_gb_s": -1})
    try:
        with pytest.raises(UserError, match=r"^block document roost-host/resolve-broken is invalid \(bandwidth_gb_s: "):
            load_host("resolve-broken")
    finally:
        _delete("roost-host", "resolve-broken")


def _save_unvalidated(slug: str, name: str, data: dict[str, object]) -> None:
    with get_client(sync_client=True) as client:
        block_type = client.read_block_type_by_slug(slug)
        schema = client.get_most_recent_block_schema_for_block_type(block_type.id)
        assert schema is not None
        client.create_block_document(BlockDocumentCreate(name=name, data=data, block_type_id=block_type.id,
                                                         block_schema_id=schema.id))


def _take_out(slug: str, name: str) -> dict[str, Any] | None:
    """Delete the document ``slug/name``; its data, or None when there was none."""
    with get_client(sync_client=True) as client:
        try:
            doc = client.read_block_document_by_name(name=name, block_type_slug=slug)
        except ObjectNotFound:
            return None
        assert doc.id is not None
        client.delete_block_document(doc.id)
    return {k: v for k, v in doc.data.items() if k != "block_type_slug"}


# --- hosts saved by an earlier release (block type spark-host) ---------------------------------------


def test_legacy_host_document_is_read_until_migrated(api: str) -> None:
    """A worker updated before ``roost setup`` migrated the hosts finds the user's hosts and edits."""
    LegacySparkHost.register_type_and_schema()
    LegacySparkHost.from_profile(CPU.model_copy(update={"name": "resolve-old", "bandwidth_gb_s": 42.0})).save(
        "resolve-old", overwrite=True)
    LegacySparkHost.from_profile(CPU.model_copy(update={"usable_bytes": 5 * 10**9})).save("cpu", overwrite=True)
    current_cpu = _take_out("roost-host", "cpu")  # what `roost setup` may have saved on this session's server
    try:
        assert load_host("resolve-old") == CPU.model_copy(update={"name": "resolve-old", "bandwidth_gb_s": 42.0})
        assert load_host("cpu").usable_bytes == 5 * 10**9  # the legacy edit wins over the built-in
        assert {"cpu", "resolve-old", "spark"} <= set(known_host_names())
        # once a roost-host document of the same name exists, it wins and the legacy one is ignored
        HostBlock.from_profile(CPU.model_copy(update={"name": "resolve-old", "bandwidth_gb_s": 43.0})).save(
            "resolve-old", overwrite=True)
        assert load_host("resolve-old").bandwidth_gb_s == 43.0
        assert known_host_names().count("resolve-old") == 1
    finally:
        for slug in ("roost-host", "spark-host"):
            _delete(slug, "resolve-old")
        _delete("spark-host", "cpu")
        if current_cpu is not None:
            HostBlock(**current_cpu).save("cpu", overwrite=True)
    assert load_host("cpu") == (CPU if current_cpu is None else HostBlock(**current_cpu).to_profile())
    with pytest.raises(UserError, match=r"^unknown host 'resolve-old': choose one of cpu, "):
        load_host("resolve-old")


def test_broken_legacy_document_is_a_user_error_naming_it(api: str) -> None:
    LegacySparkHost.register_type_and_schema()
    _save_unvalidated("spark-host", "resolve-old-broken", CPU.model_dump(mode="json") | {"accelerator": "tpu"})
    try:
        with pytest.raises(UserError, match=r"^block document spark-host/resolve-old-broken is invalid \(accelerator: "):
            load_host("resolve-old-broken")
    finally:
        _delete("spark-host", "resolve-old-broken")


def test_api_key_env_then_secret_block(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    _delete("secret", VLLM_API_KEY_BLOCK)
    assert vllm_api_key_with_source() == (None, "none")
    Secret(value=SecretStr("from-the-block")).save(VLLM_API_KEY_BLOCK, overwrite=True)
    try:
        key, source = vllm_api_key_with_source()
        assert source == "secret-block" and key is not None and key.get_secret_value() == "from-the-block"
        assert "from-the-block" not in repr(key) and "from-the-block" not in str(key)
        monkeypatch.setenv("VLLM_API_KEY", "from-the-env")
        key, source = vllm_api_key_with_source()
        assert source == "env" and key is not None and key.get_secret_value() == "from-the-env"
    finally:
        _delete("secret", VLLM_API_KEY_BLOCK)
    monkeypatch.delenv("VLLM_API_KEY")
    assert load_vllm_api_key() is None
