"""The places ``deployments/`` leans on Prefect's internals, each in one spot (as ``roost/_compat.py``
does for typer and huggingface_hub).

Prefect 3.9 has no public equivalent for these (checked against the version ``uv.lock`` pins);
``tests/deployments/test_prefect_compat.py`` asserts each still exists and behaves as relied on, so
an upgrade that moves one fails that test by name instead of breaking ``roost setup``.

- :func:`block_schema_checksum`: the checksum the server files a block type's schema under, to tell
  whether ``roost setup`` must register a new schema (``Block._calculate_schema_checksum``).
- :func:`parameter_schema` / :func:`set_parameter_schema`: a ``RunnerDeployment``'s parameter form
  (its private ``_parameter_openapi_schema``), which roost tunes (profile choices, descriptions)
  before applying, and compares with what the server holds.
- :func:`deployment_version_info`: what ``RunnerDeployment.apply`` is given as the deployment's
  version (``_get_deployment_version_info``), computed once so an unchanged deployment is not written.
"""

from __future__ import annotations

from typing import Any

from prefect.blocks.core import Block
from prefect.deployments.runner import RunnerDeployment

__all__ = ["block_schema_checksum", "deployment_version_info", "parameter_schema", "set_parameter_schema"]


def block_schema_checksum(block_cls: type[Block]) -> str:
    """The checksum of ``block_cls``'s schema as the server files it."""
    return str(block_cls._calculate_schema_checksum())


def parameter_schema(dep: RunnerDeployment) -> dict[str, Any]:
    """The deployment's parameter schema (the form the UI shows), as JSON-able data."""
    schema: dict[str, Any] = dep._parameter_openapi_schema.model_dump(exclude_unset=True)
    return schema


def set_parameter_schema(dep: RunnerDeployment, schema: dict[str, Any]) -> None:
    """Replace the deployment's parameter schema with ``schema`` (validated as Prefect's own type)."""
    dep._parameter_openapi_schema = type(dep._parameter_openapi_schema).model_validate(schema)


def deployment_version_info(dep: RunnerDeployment) -> Any:
    """The version information ``dep.apply(version_info=...)`` takes."""
    return dep._get_deployment_version_info(dep.version_type)
