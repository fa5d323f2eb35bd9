"""Resolve a profile, a host and the vLLM API key: a saved block document wins, roost's built-ins
are the fallback.

``load_profile("ornith-9b")`` reads the ``model-profile/ornith-9b`` document if one is saved (what
``roost setup`` saved, or what someone edited in the UI) and otherwise returns the built-in
``roost.profiles`` entry; an unknown name is a UserError listing both kinds. ``load_host`` does the
same with ``spark-host`` documents. One API read each; nothing is cached, so an edit in the UI
applies to the next run.

The vLLM API key comes from ``VLLM_API_KEY`` when set, else from the optional Secret block
``roost-vllm-api-key``. Its value is only ever returned as a ``SecretStr``; it is never logged.
"""

from __future__ import annotations

import os
from typing import Any, Literal

from pydantic import SecretStr, ValidationError

from blocks.hosts import SparkHost
from blocks.profiles import ModelProfileBlock, profile_document_name
from roost.errors import UserError
from roost.hosts import HOSTS, HostProfile
from roost.profiles import PROFILES, ModelProfile

VLLM_API_KEY_BLOCK = "roost-vllm-api-key"
"""Name of the optional Secret block holding the vLLM API key (``prefect.blocks.system.Secret``)."""

ApiKeySource = Literal["env", "secret-block", "none"]


def _read_document(block_type_slug: str, name: str) -> dict[str, Any] | None:
    """The data of a saved block document, or None when there is none (or the type is unregistered)."""
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    try:
        with get_client(sync_client=True) as client:
            doc = client.read_block_document_by_name(name=name, block_type_slug=block_type_slug)
    except ObjectNotFound:
        return None
    return dict(doc.data)


def _document_names(block_type_slug: str) -> list[str]:
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    try:
        with get_client(sync_client=True) as client:
            docs = client.read_block_documents_by_type(block_type_slug=block_type_slug)
    except ObjectNotFound:
        return []
    return sorted(d.name for d in docs if d.name and not d.is_anonymous)


def _invalid(slug: str, doc: str, exc: ValidationError) -> UserError:
    problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}" for e in exc.errors())
    return UserError(f"block document {slug}/{doc} is invalid ({problems}): fix it in the Prefect UI (Blocks) "
                     "or delete it to use the built-in")


def load_profile(name: str) -> ModelProfile:
    """The model profile ``name``: its ``model-profile`` block document if saved, else the built-in."""
    slug = ModelProfileBlock.get_block_type_slug()
    doc = profile_document_name(name)
    data = _read_document(slug, doc) if doc else None
    if data is not None:
        fields = {k: v for k, v in data.items() if k in ModelProfile.model_fields}
        fields["name"] = fields.get("name") or name
        try:
            return ModelProfile.model_validate(fields)
        except ValidationError as exc:
            raise _invalid(slug, doc, exc) from None
    if name in PROFILES:
        return PROFILES[name]
    raise UserError(f"unknown model profile {name!r}: choose one of {', '.join(known_profile_names())} "
                    f"(built-ins, or {slug} block documents)")


def load_host(name: str) -> HostProfile:
    """The host ``name``: its ``spark-host`` block document if saved, else the built-in.

    The document's name is the host's name (the work queue and the concurrency limit use it).
    """
    slug = SparkHost.get_block_type_slug()
    data = _read_document(slug, name) if name else None
    if data is not None:
        fields = {k: v for k, v in data.items() if k in HostProfile.model_fields}
        fields["name"] = name
        try:
            return HostProfile.model_validate(fields)
        except ValidationError as exc:
            raise _invalid(slug, name, exc) from None
    if name in HOSTS:
        return HOSTS[name]
    raise UserError(f"unknown host {name!r}: choose one of {', '.join(known_host_names())} "
                    f"(built-ins, or {slug} block documents)")


def all_profiles() -> dict[str, ModelProfile]:
    """Every profile by name: the built-ins, overridden or extended by saved model-profile documents.

    A document that does not validate is skipped here (``load_profile`` of its name reports why).
    """
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    profiles = dict(PROFILES)
    try:
        with get_client(sync_client=True) as client:
            docs = client.read_block_documents_by_type(block_type_slug=ModelProfileBlock.get_block_type_slug())
    except ObjectNotFound:
        docs = []
    for d in sorted(docs, key=lambda d: d.name or ""):
        if not d.name or d.is_anonymous:
            continue
        fields = {k: v for k, v in d.data.items() if k in ModelProfile.model_fields}
        fields["name"] = fields.get("name") or d.name
        try:
            prof = ModelProfile.model_validate(fields)
        except ValidationError:
            continue
        profiles[prof.name] = prof
    return profiles


def known_profile_names() -> list[str]:
    """Built-in profile names plus the ``name`` of every saved model-profile document."""
    return sorted(all_profiles())


def known_host_names() -> list[str]:
    """Built-in host names plus every saved spark-host document name."""
    return sorted(set(HOSTS) | set(_document_names(SparkHost.get_block_type_slug())))


def vllm_api_key_with_source() -> tuple[SecretStr | None, ApiKeySource]:
    """The configured vLLM API key and where it came from: ``VLLM_API_KEY``, else the Secret block."""
    env = os.environ.get("VLLM_API_KEY")
    if env:
        return SecretStr(env), "env"
    from prefect.blocks.system import Secret

    data = _read_document(Secret.get_block_type_slug(), VLLM_API_KEY_BLOCK)
    if data is None:
        return None, "none"
    value = data.get("value")
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if not isinstance(value, str) or not value:
        raise UserError(f"Secret block {VLLM_API_KEY_BLOCK} must hold a non-empty string (the vLLM API key)")
    return SecretStr(value), "secret-block"


def load_vllm_api_key() -> SecretStr | None:
    """The configured vLLM API key (``VLLM_API_KEY``, else the ``roost-vllm-api-key`` Secret block), or None."""
    return vllm_api_key_with_source()[0]
