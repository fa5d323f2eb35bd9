"""``HostBlock`` (block type ``roost-host``, "Roost Host"): a serving machine as a Prefect block. It is
a ``roost.hosts.HostProfile`` (fields, defaults, descriptions and validation declared there, once) that
Prefect can register, save and load, as prefect-docker's ``DockerHost`` is both the settings and the block.

One document per host, named like the host (``spark``, ``cpu``, ``spark-2``...); the host name is
also the name of its work queue and of its concurrency limit ``roost-serve-<host>``.

Earlier releases saved hosts as ``spark-host`` documents ("Spark Host", although the type also
described CPU hosts). ``roost setup`` copies each into a ``roost-host`` document of the same
name, and ``blocks.resolve`` reads a ``spark-host`` document when no ``roost-host`` one exists;
roost never writes or deletes ``spark-host`` documents (workers not yet updated still read them).
"""

from __future__ import annotations

from typing import Any, ClassVar

from prefect.blocks.core import Block
from pydantic import ModelWrapValidatorHandler, model_validator

from roost.errors import UserError
from roost.hosts import HOSTS, HostProfile

LEGACY_HOST_SLUG = "spark-host"
"""Block type slug of the host documents earlier releases saved: read, migrated, never written."""


class HostBlock(HostProfile, Block):
    """A machine vLLM is served on (a DGX Spark, or a CPU): memory budget, bandwidth, how vLLM runs."""

    _block_type_name: ClassVar[str | None] = "Roost Host"
    _block_type_slug: ClassVar[str | None] = "roost-host"
    _description: ClassVar[str | None] = (
        "A machine roost serves vLLM on (a DGX Spark or a CPU): how vLLM runs there, its memory budget, "
        "bandwidth and bind addresses. The document name is the host name (work queue and concurrency "
        "limit roost-serve-<host>)."
    )

    @model_validator(mode="wrap")
    @classmethod
    def _invalid_data_is_a_validation_error(cls, data: Any, handler: ModelWrapValidatorHandler[HostBlock]) -> HostBlock:
        """A value the profile refuses with a UserError (a venv outside the venv root, credentials in a
        URL) is a ValidationError here, as any other invalid document data (``roost setup`` keeps such a
        legacy document, unmigrated, and says why)."""
        try:
            return handler(data)
        except UserError as exc:
            raise ValueError(str(exc)) from None

    def to_profile(self) -> HostProfile:
        """The plain ``HostProfile`` (the flows compare and copy profiles; a block carries Prefect's state)."""
        return HostProfile.model_validate({k: getattr(self, k) for k in HostProfile.model_fields})

    @classmethod
    def from_profile(cls, profile: HostProfile) -> HostBlock:
        return cls.model_validate(profile, from_attributes=True)


def host_fields(data: dict[str, Any], name: str) -> dict[str, Any]:
    """The ``HostProfile`` fields of a saved host document's data (either slug), named ``name``.

    The document name is the host's name, whatever its ``name`` field says.
    """
    return {k: v for k, v in data.items() if k in HostProfile.model_fields} | {"name": name}


def builtin_host_documents() -> dict[str, HostBlock]:
    """The documents ``roost setup`` saves: one per built-in host, named like the host."""
    return {name: HostBlock.from_profile(h) for name, h in HOSTS.items()}
