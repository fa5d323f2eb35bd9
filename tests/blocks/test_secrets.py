"""``blocks.secrets.hub_token``: the Hub token's one order — a token given, the profile's Secret block,
``HF_TOKEN``, ``HUGGING_FACE_HUB_TOKEN``, the stored login — checked, and never shown."""

from __future__ import annotations

import huggingface_hub
import pytest

import blocks.secrets as secrets_module
from blocks.secrets import hub_token
from roost.errors import UserError


@pytest.fixture
def blocks(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """Secret blocks by name, without a Prefect server (``token_from`` reads this instead)."""
    saved: dict[str, str] = {}

    def token_from(block: str | None) -> str | None:
        return saved.get(block) or None if block else None

    monkeypatch.setattr(secrets_module, "token_from", token_from)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: None)  # no stored login
    return saved


def test_the_order(blocks: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    blocks["hub-token"] = "hf_from_the_block"
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_older_name")
    assert hub_token() == "hf_older_name"
    monkeypatch.setenv("HF_TOKEN", "hf_from_env")
    assert hub_token() == hub_token("no-such-block") == hub_token("") == "hf_from_env"
    assert hub_token("hub-token") == "hf_from_the_block"  # the block a profile names wins over the environment
    assert hub_token("hub-token", token="hf_given") == "hf_given"
    blocks["empty"] = ""
    assert hub_token("empty") == "hf_from_env"  # an empty block: as if none were named


def test_anonymous_and_a_bad_token(blocks: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert hub_token() is None
    blocks["bad"] = "hf_bad\x01token"
    with pytest.raises(UserError, match="holds whitespace, a control character") as info:
        hub_token("bad")
    assert "hf_bad" not in str(info.value)
    monkeypatch.setenv("HF_TOKEN", "hf_space inside")
    with pytest.raises(UserError, match=r"^HF_TOKEN holds whitespace") as info:
        hub_token()
    assert "hf_space" not in str(info.value)
