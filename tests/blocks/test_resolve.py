"""Resolution against a real Prefect server: a saved block document wins, the built-in is the
fallback, a broken document or an unknown name is a clear UserError, and the vLLM key comes from
the environment first and the Secret block second (never echoed)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from blocks.hosts import SparkHost
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
    SparkHost.register_type_and_schema()
    ModelProfileBlock.register_type_and_schema()
    yield prefect_api


def _delete(slug: str, name: str) -> None:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            doc = client.read_block_document_by_name(name=name, block_type_slug=slug)
        except ObjectNotFound:
            return
        assert doc.id is not None
        client.delete_block_document(doc.id)


def test_builtins_when_no_document(api: str) -> None:
    assert load_host("cpu") == CPU and load_profile("local") == LOCAL
    with pytest.raises(UserError, match=r"unknown host 'resolve-none'.*cpu.*spark"):
        load_host("resolve-none")
    with pytest.raises(UserError, match=r"unknown model profile 'resolve-none'.*local.*ornith-9b"):
        load_profile("resolve-none")


def test_saved_document_wins_and_custom_names_resolve(api: str) -> None:
    custom = ModelProfileBlock.from_profile(LOCAL.model_copy(update={"name": "resolve-quick", "bench": {"repeats": 1}}))
    custom.save("resolve-quick", overwrite=True)
    host = SparkHost.from_profile(CPU.model_copy(update={"name": "resolve-box", "bandwidth_gb_s": 42.0}))
    host.save("resolve-box", overwrite=True)
    try:
        assert load_profile("resolve-quick").bench == {"repeats": 1}
        assert "resolve-quick" in all_profiles()
        box = load_host("resolve-box")
        assert (box.name, box.bandwidth_gb_s, box.backend) == ("resolve-box", 42.0, "process")
        assert "resolve-box" in known_host_names()
    finally:
        _delete("model-profile", "resolve-quick")
        _delete("spark-host", "resolve-box")
    with pytest.raises(UserError):
        load_profile("resolve-quick")


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
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import BlockDocumentCreate

    SparkHost.register_type_and_schema()
    bad = SPARK.model_dump(mode="json") | {"bandwidth_gb_s": -1}
    with get_client(sync_client=True) as client:
        block_type = client.read_block_type_by_slug("spark-host")
        schema = client.get_most_recent_block_schema_for_block_type(block_type.id)
        assert schema is not None
        client.create_block_document(BlockDocumentCreate(name="resolve-broken", data=bad, block_type_id=block_type.id,
                                                         block_schema_id=schema.id))
    try:
        with pytest.raises(UserError, match=r"spark-host/resolve-broken is invalid \(bandwidth_gb_s: "):
            load_host("resolve-broken")
    finally:
        _delete("spark-host", "resolve-broken")


def test_api_key_env_then_secret_block(api: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from prefect.blocks.system import Secret
    from pydantic import SecretStr

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
