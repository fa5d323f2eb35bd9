"""The parameter form each roost deployment gets (``land``, ``rebenchmark``, ``audit``, ``sweep``): every
parameter has help and a type the Prefect UI shows, and the server's validation still takes a run's
parameters, null or a value, for every optional one. Without a server: the schemas roost builds, checked
with ``prefect.utilities.schema_tools.validate`` (what the server runs on a run's parameters); the real
server refusing and taking runs is ``test_roost_setup.test_runs_validate_on_the_server``."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from prefect.utilities.schema_tools import validate
from prefect.utilities.schema_tools.validation import ValidationError

from deployments._prefect_compat import parameter_schema
from deployments.deploy import ENTRYPOINTS, PARAM_HELP, build_deployments, build_sweep_deployment, typed
from roost.hosts import CPU, SPARK
from roost.profiles import PROFILES

TRI_STATE = {"keep_serving", "mtp_ab"}
"""Optional booleans whose None is a third choice (the profile's): the UI's boolean input is a toggle that sends
false when untouched, so they keep their ``bool | None`` picker, which the Parameters tab shows without a type."""
VALUES: dict[str, Any] = {"string": "main", "integer": 8123, "number": 2.5, "boolean": True, "array": ["a=1,2"]}
"""A value of each JSON type, for a run's parameters."""


@pytest.fixture(scope="module")
def schemas() -> dict[str, dict[str, Any]]:
    """Every roost deployment of two hosts (``land/cpu``, ..., ``sweep/roost-test``): its parameter schema."""
    deps = [*build_deployments([SPARK, CPU], pool="roost-test", profiles=PROFILES),
            build_sweep_deployment("roost-test", [SPARK, CPU], profiles=PROFILES)]
    return {d.full_name: parameter_schema(d) for d in deps}


def _flow_parameters(flow_name: str) -> list[str]:
    import importlib

    path, fn = ENTRYPOINTS[flow_name].split(":")
    flow = getattr(importlib.import_module(path.removesuffix(".py").replace("/", ".")), fn)
    return list(inspect.signature(flow.fn).parameters)


@pytest.mark.parametrize("flow_name", sorted(ENTRYPOINTS))
def test_every_flow_parameter_has_help(flow_name: str) -> None:
    """A new parameter without an entry in ``PARAM_HELP`` fails here (the UI would show it bare)."""
    missing = [p for p in _flow_parameters(flow_name) if p not in PARAM_HELP]
    assert missing == [], f"{flow_name}: add {missing} to deployments.deploy.PARAM_HELP"


def test_every_parameter_has_a_description_and_a_type_the_ui_shows(schemas: dict[str, dict[str, Any]]) -> None:
    assert sorted(n.split("/")[0] for n in schemas) == sorted(["land", "land", "rebenchmark", "rebenchmark",
                                                               "audit", "audit", "sweep"])
    for name, schema in schemas.items():
        for key, prop in schema["properties"].items():
            assert prop.get("description"), (name, key)
            if key in TRI_STATE:
                assert "type" not in prop and {"type": "null"} in prop["anyOf"] and prop["default"] is None, (name, key)
                continue
            # the UI's Parameters tab shows ``type`` verbatim; its form has an input for these five only
            assert prop.get("type") in {"string", "integer", "number", "boolean", "array"}, (name, key, prop)


def test_the_land_form(schemas: dict[str, dict[str, Any]]) -> None:
    props = schemas["land/cpu"]["properties"]
    assert props["mtp_ab"]["description"] == PARAM_HELP["mtp_ab"]
    assert props["revision"] == {"type": "string", "title": "revision", "position": 1,
                                 "description": PARAM_HELP["revision"]}  # no default: the form sends nothing
    assert props["host"] | {"description": ""} == {"type": "string", "enum": ["cpu"], "default": "cpu",
                                                   "readOnly": True, "title": "host", "position": 2, "description": ""}
    assert props["vllm_overrides"]["items"] == {"type": "string"}
    assert props["restart_policy"]["enum"] == ["no", "always", "unless-stopped", "on-failure", None]
    assert props["profile"]["enum"] == sorted(PROFILES) and props["profile"]["default"] == "local"


def _validates(values: dict[str, Any], schema: dict[str, Any]) -> str:
    """'' when the server's validation takes ``values``, else its message."""
    try:
        validate(values, schema, raise_on_error=True)
    except ValidationError as exc:
        return str(exc)
    return ""


def test_each_optional_parameter_validates_null_and_a_value(schemas: dict[str, dict[str, Any]]) -> None:
    checked = 0
    for name, schema in schemas.items():
        for key, prop in schema["properties"].items():
            if key == "host":  # fixed per deployment: only its own host
                assert _validates({key: None}, schema) and not _validates({key: prop["default"]}, schema)
                continue
            kind = prop.get("type") or next(b["type"] for b in prop["anyOf"] if b["type"] != "null")
            value = (prop.get("enum") or [VALUES[kind]])[0]
            assert _validates({key: value}, schema) == "", (name, key, value)
            if "default" not in prop or prop["default"] is None:  # an optional parameter
                assert _validates({key: None}, schema) == "", (name, key)
                checked += 1
    assert checked >= 20
    land = schemas["land/cpu"]
    assert "is not one of" in _validates({"restart_policy": "sometimes"}, land)
    assert "is not of type 'string'" in _validates({"vllm_overrides": [8]}, land)
    assert "is not one of" in _validates({"profile": "no-such-profile"}, schemas["rebenchmark/cpu"])


def test_typed_leaves_what_it_cannot_type() -> None:
    union = {"anyOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}], "default": None}
    assert typed(union) == union
    assert typed({"type": "string", "default": "x"}) == {"type": "string", "default": "x"}
    tri = {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": None}
    assert typed(tri) == tri
    assert typed({"anyOf": [{"type": "integer"}, {"type": "null"}], "default": 5}) == {"type": "integer"}
