"""Each Prefect internal ``deployments/_prefect_compat.py`` relies on still exists and behaves so, and so does
the server's parameter validation ``deployments.deploy.typed`` relies on: an upgrade that moves one fails
here, by name, instead of in ``roost setup`` or a run."""

from __future__ import annotations

import pytest
from prefect.deployments.runner import RunnerDeployment

from blocks.hosts import HostBlock
from deployments import _prefect_compat as compat
from deployments.deploy import build_deployment
from roost.hosts import CPU
from roost.profiles import PROFILES


def _land() -> RunnerDeployment:
    return build_deployment("land", CPU, pool="roost-test", profiles=PROFILES)


def test_the_block_schema_checksum_is_prefects_and_follows_the_fields() -> None:
    checksum = compat.block_schema_checksum(HostBlock)
    assert checksum.startswith("sha256:") and checksum == HostBlock._calculate_schema_checksum()

    class Wider(HostBlock):
        _block_type_name = "Roost Compat Test Host"
        _block_type_slug = "roost-compat-test-host"
        extra: str = ""

    assert compat.block_schema_checksum(Wider) != checksum


def test_the_parameter_schema_reads_and_writes_the_deployments_form() -> None:
    dep = _land()
    schema = compat.parameter_schema(dep)
    assert schema["type"] == "object" and "profile" in schema["properties"]
    assert schema["properties"]["profile"]["enum"]  # roost's tuning: the profiles to choose from
    schema["properties"]["profile"]["description"] = "changed by the test"
    compat.set_parameter_schema(dep, schema)
    assert compat.parameter_schema(dep)["properties"]["profile"]["description"] == "changed by the test"


def test_the_version_info_is_what_apply_takes() -> None:
    import inspect

    assert "version_info" in inspect.signature(RunnerDeployment.apply).parameters
    info = compat.deployment_version_info(_land())
    assert info is None or hasattr(info, "type")


def test_the_servers_validation_takes_null_for_a_typed_optional_parameter() -> None:
    """What ``deployments.deploy.typed`` relies on: the server validates a run's parameters with
    ``schema_tools.validate``, which reads a non-required property with a type and no default as that
    type or null; with a default, null is refused."""
    from prefect.utilities.schema_tools import validate
    from prefect.utilities.schema_tools.validation import ValidationError

    schema = {"type": "object", "properties": {"port": {"type": "integer"},
                                                "policy": {"type": "string", "enum": ["no", None]},
                                                "fixed": {"type": "string", "default": "cpu"}}}
    assert validate({"port": None, "policy": None}, schema, raise_on_error=True) == []
    assert validate({"port": 8000, "policy": "no"}, schema, raise_on_error=True) == []
    for refused in ({"port": "x"}, {"policy": "always"}, {"fixed": None}):
        with pytest.raises(ValidationError):
            validate(refused, schema, raise_on_error=True)
