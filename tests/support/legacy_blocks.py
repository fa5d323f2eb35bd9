"""The host block as releases before the ``roost-host`` rename saved it: block type ``spark-host``
("Spark Host"), the same fields. Tests save documents with it to stand for what a user's server
holds from an earlier release, then check that roost reads and migrates them.
"""

from __future__ import annotations

from typing import ClassVar

from prefect.client.orchestration import get_client
from prefect.exceptions import ObjectNotFound

from blocks.hosts import LEGACY_HOST_SLUG, HostBlock


class LegacySparkHost(HostBlock):
    """``SparkHost`` of earlier releases: a ``HostBlock`` saved under the legacy type."""

    _block_type_name: ClassVar[str | None] = "Spark Host"
    _block_type_slug: ClassVar[str | None] = LEGACY_HOST_SLUG
    _description: ClassVar[str | None] = "A machine roost serves vLLM on (earlier releases' host block)."


def delete_document(slug: str, name: str) -> bool:
    """Delete the block document ``slug/name`` if there is one; whether there was."""
    with get_client(sync_client=True) as client:
        try:
            doc = client.read_block_document_by_name(name=name, block_type_slug=slug)
        except ObjectNotFound:
            return False
        assert doc.id is not None
        client.delete_block_document(doc.id)
    return True
