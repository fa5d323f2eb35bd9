"""Resolve a profile, a host and the vLLM API key: a saved block document wins, roost's built-ins
are the fallback.

``load_profile("ornith-9b")`` reads the ``model-profile/ornith-9b`` document if one is saved (what
``roost setup`` saved, or what someone edited in the UI) and otherwise returns the built-in
``roost.profiles`` entry; an unknown name is a UserError listing both kinds. ``load_host`` does the
same with ``roost-host`` documents, and reads the ``spark-host`` document earlier releases saved
when there is no ``roost-host`` one yet (a worker updated before ``roost setup`` migrated them still
finds the user's hosts). One API read each (two for a host without a ``roost-host`` document);
nothing is cached, so an edit in the UI applies to the next run.

The vLLM API key comes from ``VLLM_API_KEY`` when set, else from the optional Secret block
``roost-vllm-api-key``. Its value is only ever returned as a ``SecretStr``; it is never logged.
"""

from __future__ import annotations

import contextlib
from typing import Any, Literal

from prefect.blocks.system import Secret
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError
from pydantic import SecretStr, ValidationError

from blocks.hosts import LEGACY_HOST_SLUG, HostBlock, host_fields
from blocks.profiles import ModelProfileBlock, profile_document_name
from roost.errors import UserError
from roost.hosts import HOSTS, HostProfile
from roost.profiles import PROFILES, ModelProfile
from roost.settings import environment

VLLM_API_KEY_BLOCK = "roost-vllm-api-key"
"""Name of the optional Secret block holding the vLLM API key (``prefect.blocks.system.Secret``)."""

ApiKeySource = Literal["env", "secret-block", "none"]


def _read_document(block_type_slug: str, name: str) -> dict[str, Any] | None:
    """The data of a saved block document, or None when there is none (or the type is unregistered)."""
    try:
        with get_client(sync_client=True) as client:
            doc = client.read_block_document_by_name(name=name, block_type_slug=block_type_slug)
    except ObjectNotFound:
        return None
    return dict(doc.data)


def read_documents(block_type_slug: str, client: SyncPrefectClient | None = None) -> dict[str, dict[str, Any]]:
    """Every named (non-anonymous) document of a block type: name -> data; empty when the type is unregistered."""
    try:
        with contextlib.ExitStack() as stack:
            if client is None:
                client = stack.enter_context(get_client(sync_client=True))
            docs = client.read_block_documents_by_type(block_type_slug=block_type_slug)
    except PrefectHTTPStatusError as exc:  # this call reports an unregistered type as a bare 404
        if exc.response.status_code == 404:
            return {}
        raise
    return {d.name: dict(d.data) for d in sorted(docs, key=lambda d: d.name or "") if d.name and not d.is_anonymous}


def validation_problems(exc: ValidationError) -> str:
    """A validation error as one line: ``field: message; field: message``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(document)'}: {e['msg']}" for e in exc.errors())


def _invalid(slug: str, doc: str, exc: ValidationError) -> UserError:
    return UserError(f"block document {slug}/{doc} is invalid ({validation_problems(exc)}): fix it in the "
                     "Prefect UI (Blocks) or delete it to use the built-in")


def _saved_profile(data: dict[str, Any], name: str) -> ModelProfile:
    """The profile a saved document's data holds: its ``ModelProfile`` fields (the block's own keys,
    ``block_type_slug``, and fields since retired are dropped), named ``name`` when it names none."""
    fields = {k: v for k, v in data.items() if k in ModelProfile.model_fields}
    return ModelProfile.model_validate(fields | {"name": fields.get("name") or name})


def load_profile(name: str) -> ModelProfile:
    """The model profile ``name``: its ``model-profile`` block document if saved, else the built-in."""
    slug = ModelProfileBlock.get_block_type_slug()
    doc = profile_document_name(name)
    data = _read_document(slug, doc) if doc else None
    if data is not None:
        try:
            return _saved_profile(data, name)
        except ValidationError as exc:
            raise _invalid(slug, doc, exc) from None
    if name in PROFILES:
        return PROFILES[name]
    raise UserError(f"unknown model profile {name!r}: choose one of {', '.join(known_profile_names())} "
                    f"(built-ins, or {slug} block documents)")


def load_host(name: str) -> HostProfile:
    """The host ``name``: its ``roost-host`` block document if saved, else its legacy ``spark-host``
    document if saved, else the built-in.

    The document's name is the host's name (the work queue and the concurrency limit use it).
    """
    slug = HostBlock.get_block_type_slug()
    for doc_slug in (slug, LEGACY_HOST_SLUG):
        data = _read_document(doc_slug, name) if name else None
        if data is not None:
            try:
                return HostProfile.model_validate(host_fields(data, name))
            except ValidationError as exc:
                raise _invalid(doc_slug, name, exc) from None
    if name in HOSTS:
        return HOSTS[name]
    raise UserError(f"unknown host {name!r}: choose one of {', '.join(known_host_names())} "
                    f"(built-ins, or {slug} block documents)")


def all_profiles() -> dict[str, ModelProfile]:
    """Every profile by name: the built-ins, overridden or extended by saved model-profile documents.

    A document that does not validate is skipped here (``load_profile`` of its name reports why).
    """
    profiles = dict(PROFILES)
    for doc, data in read_documents(ModelProfileBlock.get_block_type_slug()).items():
        try:
            prof = _saved_profile(data, doc)
        except ValidationError:
            continue
        profiles[prof.name] = prof
    return profiles


def known_profile_names() -> list[str]:
    """Built-in profile names plus the ``name`` of every saved model-profile document."""
    return sorted(all_profiles())


def known_host_names() -> list[str]:
    """Built-in host names plus every saved roost-host (and legacy spark-host) document name."""
    saved = read_documents(HostBlock.get_block_type_slug()) | read_documents(LEGACY_HOST_SLUG)
    return sorted(set(HOSTS) | set(saved))


def vllm_api_key_with_source() -> tuple[SecretStr | None, ApiKeySource]:
    """The configured vLLM API key and where it came from: ``VLLM_API_KEY``, else the Secret block."""
    env = environment().vllm_api_key
    if env:
        return SecretStr(env), "env"
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
