"""The deployments roost puts on a Prefect server, and an idempotent way to apply them.

Per host ``<host>`` (one work queue each, in one ``process`` work pool):

- ``land/<host>``: the whole pipeline. Parameters: profile (a choice of the known profiles),
  revision, vllm_overrides, keep_serving, port, notify; ``host`` is fixed to the deployment's host
  so a run always lands on the machine whose worker takes it.
- ``rebenchmark/<host>``: benchmarks what the host serves, or lands the host's default profile
  first (kept serving) when nothing is; scheduled nightly (cron, UTC by default).
- ``audit/<host>``: audit + plan from the Hub's headers without downloading (a profile's repository,
  or any ``repo`` given as hf://OWNER/NAME[@REVISION]); ``download`` also fetches it onto the host's
  disk and audits it there.

And one ``sweep/<pool>`` on the queue ``sweep`` when two hosts or more are set up (``deployments.pool``).
Every parameter has help (``PARAM_HELP``) and a type the UI shows (``typed``).

The code is deployed from this checkout (``LocalStorage``: the worker's flow-run process changes
into the repo directory and loads the flow by file path), so no image is built; every host runs
a worker from the same checkout path (``roost setup --source`` to deploy another path).

Run with ``python -m deployments.deploy`` to apply the deployments alone (``roost setup`` does
this and everything else).
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Literal, cast

from prefect.client.orchestration import get_client
from prefect.deployments.runner import RunnerDeployment
from prefect.exceptions import ObjectNotFound
from prefect.runner.storage import LocalStorage
from prefect.schedules import Cron
from prefect.utilities.annotations import freeze

from blocks.resolve import all_profiles, load_host
from deployments._prefect_compat import deployment_version_info, parameter_schema, set_parameter_schema
from roost.hosts import HostProfile
from roost.profiles import PROFILES, ModelProfile
from roost.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, PREFECT_LOGGING_EXTRA_LOGGERS

DEFAULT_POOL = "roost"
"""The work pool ``roost setup`` creates: named for the site, whatever its hosts are (Sparks, CPUs)."""
LEGACY_POOL = "roost-spark"
"""The pool earlier releases created; setup keeps using it where it holds roost's deployments (``deployments.pool``)."""
DEFAULT_CRON = "0 3 * * *"
DEFAULT_TIMEZONE = "UTC"
HEARTBEAT_S = 30
"""Flow runs of roost deployments emit a heartbeat this often (PREFECT_FLOWS_HEARTBEAT_FREQUENCY: Prefect's
least); the zombie automation ``roost setup`` creates marks a run crashed when they stop."""

EXTRA_LOGGERS = "roost"
"""PREFECT_LOGGING_EXTRA_LOGGERS of the flow-run processes: roost's module loggers (``roost.hub`` retries
and resumes, ...) send their lines to the run's logs in the UI (at INFO: ``flows/identity.py``)."""

JOB_VARIABLES: dict[str, Any] = {"env": {PREFECT_FLOWS_HEARTBEAT_FREQUENCY: str(HEARTBEAT_S),
                                         PREFECT_LOGGING_EXTRA_LOGGERS: EXTRA_LOGGERS}}
"""What every roost deployment's flow-run process gets (a copy each)."""


ENTRYPOINTS: dict[str, str] = {
    "land": "flows/land.py:land",
    "rebenchmark": "flows/rebenchmark.py:rebenchmark",
    "audit": "flows/audit.py:audit",
    "sweep": "flows/sweep.py:sweep",
}

SWEEP_QUEUE = "sweep"
"""The work queue of ``sweep/<pool>`` (set up with two hosts or more): a sweep only dispatches and waits (no
GPU, little memory), so any worker may take it besides its host's queue (``--work-queue spark --work-queue
sweep``), or one on the Prefect server's machine; a sweep outlives a host whose worker dies under one of its
landings."""

DESCRIPTIONS: dict[str, str] = {
    "land": "Land a model on {host}: preflight -> download -> audit -> build -> serve -> health -> benchmark -> "
            "report.",
    "rebenchmark": "Benchmark what {host} serves (or land the profile there first when nothing is); nightly.",
    "audit": "Audit and plan a model for {host} from the Hub's headers, without downloading it (no server is "
             "started): a profile's repository, or any repo.",
    "sweep": "Land a profile with every combination of a grid of vLLM flags across the hosts of pool {host} (each host "
             "one server at a time, hosts in parallel) and compare the variants.",
}

PARAM_HELP: dict[str, str] = {
    "profile": "Model profile: a built-in or a saved model-profile block (re-run `roost setup` to list new ones).",
    "revision": "Branch, tag or commit to land (empty: the profile's revision).",
    "host": "The host this deployment serves on (fixed: one deployment per host and work queue).",
    "vllm_overrides": "Extra vLLM arguments appended last, e.g. [\"--max-num-seqs\", \"8\"].",
    "keep_serving": "Leave the server running after the run (rebenchmark then measures it nightly); empty: a "
                    "production profile keeps serving (unless-stopped), others stop; false: a one-off.",
    "port": "Port for the vLLM server (empty: the profile's fixed port, else a free one).",
    "notify": "Send the Slack notification if Slack is configured.",
    "repo": "Audit this Hub repository instead of the profile's: hf://OWNER/NAME or hf://OWNER/NAME@REVISION "
            "(planned with roost's defaults; the profile's Hub token is used).",
    "download": "Also download the checkpoint onto this host's disk and audit it there (warms the next landing).",
    "restart_policy": "Docker restart policy of the server container (empty: unless-stopped with keep_serving, a "
                      "production landing that takes it off the host's previous server; no otherwise); process "
                      "hosts ignore it.",
    "evaluate": "Run the profile's accuracy evaluations (GSM8K, MATH-500, MMLU-Pro) after the benchmark; an "
                "accuracy drop against the previous run of the same questions (McNemar, p < 0.05) is a regression.",
    "replace": "Stop containers roost did not start that hold the GPUs or the fixed port (refused otherwise); "
               "stopped with restart policy no, never removed.",
    "grid": "The flags to sweep, one axis each: [\"max-num-seqs=16,20,24\", \"max-num-batched-tokens=4096,8192\"] "
            "(on/off for a switch: \"enforce-eager=on,off\"); every combination is landed.",
    "hosts": "Hosts to land the variants on (empty: every host with a land deployment of the profile's kind).",
    "objective": "What names the best variant: peak-output (aggregate tok/s), decode or ttft (at the reference prompt).",
    "pickup_timeout_s": "A landing no worker takes within this many seconds is cancelled and its host left out.",
    "landing_timeout_s": "A landing still running after this many seconds is cancelled and reported failed.",
    "poll_s": "How often the sweep looks at its landings.",
    "mtp_ab": "After the benchmark, benchmark again without --speculative-config (same image and commit) and "
              "compare (empty: the profile's mtp_ab).",
}
"""The help the UI shows under each parameter; every parameter of every roost deployment has one
(``tests/deployments/test_parameter_forms.py``)."""

Status = Literal["created", "updated", "unchanged"]


def repo_root() -> Path:
    """The checkout the deployments load their flows from."""
    return Path(__file__).resolve().parents[1]


def default_profile(host: HostProfile, profiles: dict[str, ModelProfile]) -> str:
    """The profile a host's deployments default to: the first that targets it, else one of its kind."""
    for name, p in profiles.items():
        if p.host == host.name:
            return name
    kind = "spark" if host.accelerator == "gpu" else "cpu"
    for name, p in PROFILES.items():
        if p.host == kind:
            return name
    return "local"


def _tune_schema(schema: dict[str, Any], profile_names: list[str], defaults: dict[str, Any]) -> None:
    """Give the UI form choices, help, this deployment's defaults and a type for every parameter.

    The profile names become an enum; an optional parameter (``X | None``) gets its type (``typed``).
    """
    props: dict[str, Any] = schema.get("properties", {})
    for name, help_text in PARAM_HELP.items():
        if name in props:
            props[name].setdefault("description", help_text)
    for name, value in defaults.items():
        if name in props:
            props[name]["default"] = value
    prof = props.get("profile")
    if prof is not None and "anyOf" in prof:
        prof["anyOf"] = [({**s, "enum": profile_names} if s.get("type") == "string" else s) for s in prof["anyOf"]]
    elif prof is not None:
        prof["enum"] = profile_names
    for name, prop in props.items():
        props[name] = typed(prop)


def typed(prop: dict[str, Any]) -> dict[str, Any]:
    """An optional parameter's schema (``anyOf: [X, {type: null}]``) as ``X``'s, so the UI shows its type.

    The Prefect UI's Parameters tab shows a parameter's ``type`` and nothing for an ``anyOf``, and its
    form renders ``X``'s own input (a text field, a number, a list) instead of a "str | None" picker;
    left empty, the form sends nothing and the flow's default (None) applies. The server still
    accepts an explicit null (a sweep's, a CLI's): it validates a run's parameters with Prefect's
    ``schema_tools.validate``, which reads a non-required property with a type and no ``default`` as
    ``X`` or null (``tests/deployments/test_prefect_compat.py``). So where null was valid, the
    ``default`` is dropped (a deployment's own value stays in its parameters, which the form starts
    from) and an enum gains null.

    Left as they are: a parameter whose null was not valid already keeps its default (a fixed
    ``host``), and an optional boolean (``keep_serving``, ``mtp_ab``: None is a third choice, the
    profile's), whose UI input would be a toggle that sends false when untouched.
    """
    branches = prop.get("anyOf")
    if "type" in prop or not isinstance(branches, list):
        return prop
    some = [b for b in branches if b.get("type") != "null"]
    if len(some) != 1 or len(some) == len(branches) or not isinstance(some[0].get("type"), str):
        return prop
    null_ok = "enum" not in prop or None in prop["enum"]
    if null_ok and some[0]["type"] == "boolean":
        return prop
    out = {k: v for k, v in prop.items() if k != "anyOf"}
    for k, v in some[0].items():
        out.setdefault(k, copy.deepcopy(v))
    if null_ok:
        out.pop("default", None)
        if "enum" in out and None not in out["enum"]:
            out["enum"] = [*out["enum"], None]
    return out


def build_deployment(flow_name: str, host: HostProfile, *, pool: str, profiles: dict[str, ModelProfile],
                     source: Path | None = None, cron: str | None = None, timezone: str = DEFAULT_TIMEZONE,
                     entrypoint: str | None = None, parameters: dict[str, Any] | None = None) -> RunnerDeployment:
    """The deployment ``<flow_name>/<host>`` on work queue ``<host>`` of ``pool``, loaded from ``source``."""
    params: dict[str, Any] = {"host": freeze(host.name)}
    if flow_name in ("land", "audit", "rebenchmark"):
        params["profile"] = default_profile(host, profiles)
    params |= parameters or {}
    return _runner_deployment(
        source, entrypoint or ENTRYPOINTS[flow_name], host.name, params, profiles,
        schedule=Cron(cron, timezone=timezone) if cron else None,
        description=DESCRIPTIONS.get(flow_name, "{host}").format(host=host.name),
        tags=["roost", f"host:{host.name}"], pool=pool, queue=host.name)


def build_sweep_deployment(pool: str, hosts: list[HostProfile], *, profiles: dict[str, ModelProfile],
                           source: Path | None = None) -> RunnerDeployment:
    """``sweep/<pool>`` on the ``sweep`` queue; its profile defaults to the first host's."""
    params: dict[str, Any] = {"profile": default_profile(hosts[0], profiles) if hosts else "local"}
    return _runner_deployment(source, ENTRYPOINTS["sweep"], pool, params, profiles, schedule=None,
                              description=DESCRIPTIONS["sweep"].format(host=pool), tags=["roost", "sweep"],
                              pool=pool, queue=SWEEP_QUEUE)


def _runner_deployment(source: Path | None, entrypoint: str, name: str, params: dict[str, Any],
                       profiles: dict[str, ModelProfile], *, schedule: Any, description: str, tags: list[str],
                       pool: str, queue: str) -> RunnerDeployment:
    """One deployment from the checkout at ``source``, its parameter schema tuned (profiles as a choice)."""
    dep = cast("RunnerDeployment", RunnerDeployment.from_storage(
        storage=LocalStorage(str(source or repo_root())),
        entrypoint=entrypoint,
        name=name,
        parameters=params,
        schedule=schedule,
        description=description,
        tags=tags,
        work_pool_name=pool,
        work_queue_name=queue,
        job_variables=copy.deepcopy(JOB_VARIABLES),
        enforce_parameter_schema=True,
        _sync=True,  # type: ignore[call-arg]
    ))
    schema = parameter_schema(dep)
    _tune_schema(schema, sorted(profiles), dep.model_dump(mode="json", include={"parameters"})["parameters"])
    set_parameter_schema(dep, schema)
    return dep


def build_deployments(hosts: list[HostProfile], *, pool: str, profiles: dict[str, ModelProfile],
                      source: Path | None = None, cron: str | None = DEFAULT_CRON,
                      timezone: str = DEFAULT_TIMEZONE) -> list[RunnerDeployment]:
    """``land``, ``rebenchmark`` (scheduled with ``cron`` unless None) and ``audit`` for every host."""
    out: list[RunnerDeployment] = []
    for h in hosts:
        out.append(build_deployment("land", h, pool=pool, profiles=profiles, source=source))
        out.append(build_deployment("rebenchmark", h, pool=pool, profiles=profiles, source=source, cron=cron,
                                    timezone=timezone))
        out.append(build_deployment("audit", h, pool=pool, profiles=profiles, source=source))
    return out


def _desired(dep: RunnerDeployment) -> dict[str, Any]:
    pull = dep.storage.to_pull_step() if dep.storage else None
    return {
        "entrypoint": dep.entrypoint,
        "pull_steps": (pull if isinstance(pull, list) else [pull]) if pull else None,
        "parameters": dep.model_dump(mode="json", include={"parameters"})["parameters"],
        "parameter_openapi_schema": parameter_schema(dep),
        "work_pool_name": dep.work_pool_name,
        "work_queue_name": dep.work_queue_name,
        "job_variables": dep.job_variables,
        "tags": sorted(dep.tags),
        "description": dep.description,
        "version": dep.version,
        "enforce_parameter_schema": dep.enforce_parameter_schema,
        "paused": bool(dep.paused),
        "schedules": sorted(_schedule_key(s.schedule, s.active) for s in dep.schedules or []),
    }


def _schedule_key(schedule: Any, active: bool | None) -> tuple[str, str, bool]:
    return (str(getattr(schedule, "cron", schedule)), str(getattr(schedule, "timezone", "")), bool(active))


def _current(existing: Any) -> dict[str, Any]:
    return {
        "entrypoint": existing.entrypoint,
        "pull_steps": existing.pull_steps,
        "parameters": existing.parameters,
        "parameter_openapi_schema": existing.parameter_openapi_schema,
        "work_pool_name": existing.work_pool_name,
        "work_queue_name": existing.work_queue_name,
        "job_variables": existing.job_variables,
        "tags": sorted(existing.tags),
        "description": existing.description,
        "version": existing.version,
        "enforce_parameter_schema": existing.enforce_parameter_schema,
        "paused": bool(existing.paused),
        "schedules": sorted(_schedule_key(s.schedule, s.active) for s in existing.schedules),
    }


def apply_deployment(dep: RunnerDeployment) -> tuple[Status, list[str]]:
    """Create or update ``dep`` only where it differs from what the server holds.

    Returns the status and the names of the fields that differed (empty when unchanged). An
    unchanged deployment is not written at all, so its schedule and scheduled runs stay as they are.
    """
    version_info = deployment_version_info(dep)
    want = _desired(dep)
    with get_client(sync_client=True) as client:
        try:
            existing = client.read_deployment_by_name(dep.full_name)
        except ObjectNotFound:
            existing = None
        if existing is not None:
            have = _current(existing)
            changed = sorted(k for k in want if want[k] != have[k])
            if not changed:
                return "unchanged", []
        dep.apply(version_info=version_info, _sync=True)  # type: ignore[call-arg]
        if existing is not None and not want["schedules"]:
            for s in existing.schedules:  # apply() keeps old schedules when the new list is empty
                client.delete_deployment_schedule(existing.id, s.id)
    return ("created", []) if existing is None else ("updated", changed)


def main() -> None:  # pragma: no cover (a thin entry point; roost setup is the tested path)
    """Apply the deployments for the built-in hosts to the server at PREFECT_API_URL, in the pool ``roost``
    (``roost setup`` keeps a server's legacy ``roost-spark`` pool instead)."""
    profiles = all_profiles()
    for dep in build_deployments([load_host("spark"), load_host("cpu")], pool=DEFAULT_POOL, profiles=profiles):
        status, changed = apply_deployment(dep)
        print(f"{status:<10} {dep.full_name} {' '.join(changed)}")


if __name__ == "__main__":  # pragma: no cover
    main()
