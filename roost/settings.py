"""roost's settings: every environment variable roost reads goes through this module, and where roost
keeps things on disk.

- **Names.** One constant per variable (``HF_TOKEN = "HF_TOKEN"``...). Nowhere else in roost is a
  variable's name a string in the code (messages and docstrings may mention it): a module that reads one
  asks :func:`environment`, a module that sets one for a child process or passes it as a field name
  imports its constant (``tests/roost/test_settings.py`` checks both).
- **Values.** :class:`Environment` (pydantic-settings) holds the variables roost reads as the strings
  they are: ``None`` when unset, an empty value kept as ``""``. :func:`environment` builds it anew on
  every call, never at import, so a variable set later counts (a test's ``monkeypatch``, ``roost run``
  setting Prefect's before Prefect loads). Each reader keeps its own default, empty-value rule and check
  (``roost_home`` takes an empty ``ROOST_HOME`` as ``.``, ``gateway/db.py`` an empty ``ROOST_GATEWAY_DB``
  as unset): the readers below, or the module that reads the value.
- **Children.** :func:`child_env` is a copy of the whole environment for a process that inherits it
  (vLLM, git, olah); :func:`set_default` and :func:`log_roost_through_prefect` are the only writes.
- **Locations.** Every place on disk can be moved with one variable (``ROOST_HOME``, ``ROOST_RESULTS_DIR``,
  ``ROOST_VLLM_PYTHON``, ``ROOST_VLLM_VENVS``).

The Hub token has one precedence, everywhere: a token given, else the Prefect Secret block a model
profile names (``hf_token_secret``), else ``HF_TOKEN``, else ``HUGGING_FACE_HUB_TOKEN``, else the token
``hf auth login`` stored (``blocks.secrets.hub_token``; the environment's part is :func:`hub_token_env`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from roost.errors import UserError

# --- roost's own ---------------------------------------------------------------------------------
ROOST_HOME = "ROOST_HOME"
ROOST_RESULTS_DIR = "ROOST_RESULTS_DIR"
ROOST_VLLM_PYTHON = "ROOST_VLLM_PYTHON"
ROOST_VLLM_VENVS = "ROOST_VLLM_VENVS"
ROOST_DEBUG = "ROOST_DEBUG"
ROOST_HOST = "ROOST_HOST"
ROOST_PROGRESS = "ROOST_PROGRESS"
ROOST_RESULTS_URL = "ROOST_RESULTS_URL"
ROOST_RESULTS_STORE = "ROOST_RESULTS_STORE"
ROOST_RESULTS_STORE_CREDENTIALS = "ROOST_RESULTS_STORE_CREDENTIALS"
ROOST_GATEWAY_DB = "ROOST_GATEWAY_DB"
ROOST_GATEWAY_URL = "ROOST_GATEWAY_URL"
ROOST_GATEWAY_BACKENDS_DIR = "ROOST_GATEWAY_BACKENDS_DIR"
ROOST_GATEWAY_METRICS_TOKEN = "ROOST_GATEWAY_METRICS_TOKEN"
ROOST_GATEWAY_METRICS_USERS = "ROOST_GATEWAY_METRICS_USERS"
ROOST_MONITOR_STATE = "ROOST_MONITOR_STATE"
ROOST_GRAFANA_ADMIN_PASSWORD = "ROOST_GRAFANA_ADMIN_PASSWORD"
ROOST_OPENWEBUI_API_KEY = "ROOST_OPENWEBUI_API_KEY"
# --- the Hugging Face Hub (huggingface_hub's names) ----------------------------------------------
HF_TOKEN = "HF_TOKEN"
HUGGING_FACE_HUB_TOKEN = "HUGGING_FACE_HUB_TOKEN"
HF_ENDPOINT = "HF_ENDPOINT"
HF_HUB_OFFLINE = "HF_HUB_OFFLINE"
HF_HUB_DOWNLOAD_TIMEOUT = "HF_HUB_DOWNLOAD_TIMEOUT"
# --- vLLM, Prefect, CI ----------------------------------------------------------------------------
VLLM_API_KEY = "VLLM_API_KEY"
PREFECT_API_URL = "PREFECT_API_URL"
PREFECT_API_KEY = "PREFECT_API_KEY"
PREFECT_LOGGING_EXTRA_LOGGERS = "PREFECT_LOGGING_EXTRA_LOGGERS"
PREFECT_FLOWS_HEARTBEAT_FREQUENCY = "PREFECT_FLOWS_HEARTBEAT_FREQUENCY"
PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
PREFECT_SERVER_ANALYTICS_ENABLED = "PREFECT_SERVER_ANALYTICS_ENABLED"
PREFECT_HOME = "PREFECT_HOME"
PREFECT_UI_API_URL = "PREFECT_UI_API_URL"
PREFECT_UI_ENABLED = "PREFECT_UI_ENABLED"
PREFECT_API_DATABASE_CONNECTION_URL = "PREFECT_API_DATABASE_CONNECTION_URL"
CI = "CI"
# --- roost install (scripts/install-spark) ---------------------------------------------------------
ROOST_WORKER_ENV = "ROOST_WORKER_ENV"
SUDO_USER = "SUDO_USER"
# --- S3 credentials (the standard AWS names), Slack -----------------------------------------------
AWS_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
AWS_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
AWS_SESSION_TOKEN = "AWS_SESSION_TOKEN"
AWS_ENDPOINT_URL_S3 = "AWS_ENDPOINT_URL_S3"
AWS_ENDPOINT_URL = "AWS_ENDPOINT_URL"
AWS_REGION = "AWS_REGION"
AWS_DEFAULT_REGION = "AWS_DEFAULT_REGION"
SLACK_BOT_TOKEN = "SLACK_BOT_TOKEN"

HUB_TOKEN_VARIABLES = (HF_TOKEN, HUGGING_FACE_HUB_TOKEN)
"""Where the environment holds a Hub token, in the order roost reads them (a local Hub mirror's
process gets neither: ``roost.hub.mirror``)."""

SECRET_VARIABLES = (HF_TOKEN, HUGGING_FACE_HUB_TOKEN, VLLM_API_KEY, PREFECT_API_KEY, AWS_SECRET_ACCESS_KEY,
                    AWS_SESSION_TOKEN, ROOST_GRAFANA_ADMIN_PASSWORD, ROOST_OPENWEBUI_API_KEY)
"""Variables holding a secret: an internal error's one line never shows their values (``roost.cli``)."""

ROOST_LOGGER = "roost"
"""The logger name roost's modules log under (``roost.hub``...): Prefect sends its lines to a run's
logs when it is among ``PREFECT_LOGGING_EXTRA_LOGGERS``."""


def _var(name: str, description: str) -> Any:
    """A field read from the variable ``name`` (and only that name, case included)."""
    return Field(default=None, validation_alias=name, description=description)


class Environment(BaseSettings):
    """The environment variables roost reads, as they are now: ``None`` when unset, the string otherwise
    (an empty one included). Build it with :func:`environment` (per call: never cached)."""

    model_config = SettingsConfigDict(case_sensitive=True, extra="ignore", frozen=True)

    roost_home: str | None = _var(ROOST_HOME, "State that outlives a run (default ~/.cache/roost).")
    roost_results_dir: str | None = _var(ROOST_RESULTS_DIR, "The local results store and reports (./results).")
    roost_vllm_python: str | None = _var(ROOST_VLLM_PYTHON, "The process backend's vLLM interpreter.")
    roost_vllm_venvs: str | None = _var(ROOST_VLLM_VENVS, "Where the named vLLM venvs are (~/.cache/roost).")
    roost_debug: str | None = _var(ROOST_DEBUG, "Set: an internal error raises with its traceback.")
    roost_host: str | None = _var(ROOST_HOST, "The host profile `roost doctor` checks (default spark).")
    roost_progress: str | None = _var(ROOST_PROGRESS, "rich, plain or off: how progress is shown.")
    roost_results_url: str | None = _var(ROOST_RESULTS_URL, "The worker's results URL (over the host's).")
    roost_results_store: str | None = _var(ROOST_RESULTS_STORE, "The results store: a directory or s3://.")
    roost_results_store_credentials: str | None = _var(
        ROOST_RESULTS_STORE_CREDENTIALS, "The Roost Store Credentials block of an s3:// store.")
    roost_gateway_db: str | None = _var(ROOST_GATEWAY_DB, "The gateway's database URL.")
    roost_gateway_url: str | None = _var(ROOST_GATEWAY_URL, "The gateway as the worker reaches it (over the host's gateway_url; empty: none).")
    roost_gateway_backends_dir: str | None = _var(ROOST_GATEWAY_BACKENDS_DIR, "The gateway's backend registry.")
    roost_gateway_metrics_token: str | None = _var(ROOST_GATEWAY_METRICS_TOKEN, "The gateway's /metrics token.")
    roost_gateway_metrics_users: str | None = _var(ROOST_GATEWAY_METRICS_USERS, "Forwarded users the gateway "
                                                   "labels by name in /metrics (--metrics-users).")
    roost_monitor_state: str | None = _var(ROOST_MONITOR_STATE, "The monitoring stack's state file.")
    roost_grafana_admin_password: str | None = _var(ROOST_GRAFANA_ADMIN_PASSWORD, "Grafana's admin password.")
    roost_openwebui_api_key: str | None = _var(ROOST_OPENWEBUI_API_KEY, "An Open WebUI admin's API key (when the "
                                               "host names no Secret block for it).")
    hf_token: str | None = _var(HF_TOKEN, "The Hub token.")
    hugging_face_hub_token: str | None = _var(HUGGING_FACE_HUB_TOKEN, "The Hub token (huggingface_hub's "
                                                                      "older name).")
    hf_endpoint: str | None = _var(HF_ENDPOINT, "The Hub's base URL (default https://huggingface.co).")
    hf_hub_offline: str | None = _var(HF_HUB_OFFLINE, "1, true or yes: resolve revisions from the cache only.")
    hf_hub_download_timeout: str | None = _var(HF_HUB_DOWNLOAD_TIMEOUT, "Seconds a Hub read waits (30).")
    vllm_api_key: str | None = _var(VLLM_API_KEY, "The key vLLM servers require (over the Secret block).")
    prefect_api_url: str | None = _var(PREFECT_API_URL, "The Prefect server; unset: a temporary one.")
    prefect_api_key: str | None = _var(PREFECT_API_KEY, "The Prefect Cloud API key.")
    prefect_logging_extra_loggers: str | None = _var(PREFECT_LOGGING_EXTRA_LOGGERS,
                                                     "Loggers Prefect sends to a run's logs.")
    ci: str | None = _var(CI, "Set (not 0/false/no): plain progress lines.")
    sudo_user: str | None = _var(SUDO_USER, "Who ran sudo (roost install runs the box's services as them).")
    aws_access_key_id: str | None = _var(AWS_ACCESS_KEY_ID, "S3 access key id.")
    aws_secret_access_key: str | None = _var(AWS_SECRET_ACCESS_KEY, "S3 secret key.")
    aws_session_token: str | None = _var(AWS_SESSION_TOKEN, "S3 session token.")
    aws_endpoint_url_s3: str | None = _var(AWS_ENDPOINT_URL_S3, "S3-compatible endpoint (over AWS_ENDPOINT_URL).")
    aws_endpoint_url: str | None = _var(AWS_ENDPOINT_URL, "S3-compatible endpoint.")
    aws_region: str | None = _var(AWS_REGION, "S3 region (over AWS_DEFAULT_REGION).")
    aws_default_region: str | None = _var(AWS_DEFAULT_REGION, "S3 region.")

    @classmethod
    def of(cls, source: Mapping[str, str]) -> Environment:
        """The variables as ``source`` holds them (another process's environment, a test's mapping), and
        nothing from this process's."""
        values: dict[str, Any] = {name: source.get(str(field.validation_alias))
                                  for name, field in cls.model_fields.items()}
        return cls.model_construct(**values)


def environment(source: Mapping[str, str] | None = None) -> Environment:
    """The environment variables roost reads, read now: from this process, or from ``source``."""
    return Environment() if source is None else Environment.of(source)


def child_env(*, without: Iterable[str] = ()) -> dict[str, str]:
    """A copy of this process's whole environment, for a child process that inherits it (less the
    variables named in ``without``)."""
    drop = set(without)
    return {k: v for k, v in os.environ.items() if k not in drop}


def set_value(name: str, value: str | None) -> None:
    """Set ``name`` for this process and its children (``None``: unset it)."""
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def values_of(*names: str) -> dict[str, str]:
    """The variables among ``names`` that are set to a non-empty value (to carry them into a service's
    environment file)."""
    return {name: value for name in names if (value := os.environ.get(name))}


def secret_values() -> list[str]:
    """The values of :data:`SECRET_VARIABLES` (``""`` for one unset), to redact from a message."""
    return [os.environ.get(name, "") for name in SECRET_VARIABLES]


def set_default(name: str, value: str) -> None:
    """Set ``name`` for this process and its children unless it is set already (even to ``""``)."""
    os.environ.setdefault(name, value)


def with_roost_logger(extra_loggers: str) -> str:
    """``PREFECT_LOGGING_EXTRA_LOGGERS`` (comma-separated logger names) with ``roost`` among them."""
    names = [n.strip() for n in extra_loggers.split(",") if n.strip()]
    return ",".join(names if ROOST_LOGGER in names else [*names, ROOST_LOGGER])


def log_roost_through_prefect() -> None:
    """Add ``roost`` to ``PREFECT_LOGGING_EXTRA_LOGGERS`` (keeping the loggers already named there), so
    roost's module loggers (``roost.hub`` retries and resumes...) reach the run's logs at INFO
    (``flows/identity.py``). Call it before anything loads Prefect, which reads it once."""
    os.environ[PREFECT_LOGGING_EXTRA_LOGGERS] = with_roost_logger(environment().prefect_logging_extra_loggers or "")


def hub_token_env() -> tuple[str, str] | None:
    """The Hub token the environment holds and the variable it is in: ``HF_TOKEN``, else
    ``HUGGING_FACE_HUB_TOKEN`` (the first set to a non-empty value); None when neither is. The
    environment's part of the one precedence (``blocks.secrets.hub_token``; checked by
    ``roost.hub._endpoint.resolve_token``)."""
    env = environment()
    for name, value in ((HF_TOKEN, env.hf_token), (HUGGING_FACE_HUB_TOKEN, env.hugging_face_hub_token)):
        if value:
            return value, name
    return None


def hub_offline() -> bool:
    """``HF_HUB_OFFLINE`` as huggingface_hub reads it: 1, true or yes (any case)."""
    return (environment().hf_hub_offline or "").lower() in ("1", "true", "yes")


# --- locations --------------------------------------------------------------------------------------


def roost_home() -> Path:
    """State that outlives a run: the vLLM venv, generated demo models, the local Hub mirror, downloads.

    ``ROOST_HOME`` (default ``~/.cache/roost``).
    """
    home = environment().roost_home
    return Path(home if home is not None else Path.home() / ".cache" / "roost").expanduser()


def repo_dir_name(repo_id: str) -> str:
    """``org/name`` -> ``org--name``: the directory name of a Hub repository under roost's home."""
    return repo_id.replace("/", "--")


def checkpoint_dir(repo_id: str) -> Path:
    """Where a Hub repository's checkpoint is downloaded: ``$ROOST_HOME/models/<org>--<name>``.

    One directory per repository; a new commit updates it in place (the download manifest records
    which commit it holds). ``land``, ``audit`` and ``roost download`` all use it.
    """
    return roost_home() / "models" / repo_dir_name(repo_id)


def results_dir() -> Path:
    """The append-only results store and the reports: ``ROOST_RESULTS_DIR`` (default ``./results``)."""
    results = environment().roost_results_dir
    return Path(results if results is not None else "results").expanduser().resolve()


def vllm_python() -> Path:
    """The Python interpreter of the venv that runs vLLM for the ``process`` backend.

    ``ROOST_VLLM_PYTHON`` (default ``$ROOST_HOME/vllm-venv/bin/python``); ``scripts/bootstrap`` creates it.
    """
    env = environment().roost_vllm_python
    return Path(env) if env else roost_home() / "vllm-venv" / "bin" / "python"


def vllm_venv_root() -> Path:
    """Where the named vLLM venvs are (``vllm-venv-0.24.0``...): ``ROOST_VLLM_VENVS`` (default
    ``~/.cache/roost``, where ``scripts/bootstrap`` builds them).

    Not ``ROOST_HOME``: the tests give each session its own home, and a venv is 3-6 GB.
    """
    root = environment().roost_vllm_venvs
    return Path(root if root is not None else Path.home() / ".cache" / "roost").expanduser()


def check_vllm_venv(value: str, field: str = "vllm_venv") -> str:
    """``value`` (stripped) when it names a venv: empty, a name under :func:`vllm_venv_root`, or an
    absolute path; every ``/``-separated part non-empty and neither ``.`` nor ``..``. UserError otherwise."""
    venv = value.strip()
    if not venv:
        return ""
    parts = venv.removeprefix("/").split("/")
    bad = [p for p in parts if p in ("", ".", "..")]
    if bad:
        raise UserError(f"{field} {value!r}: give a venv name under {vllm_venv_root()} (e.g. vllm-venv-0.24.0) or an "
                        f"absolute path, without empty, '.' or '..' parts")
    return venv


def vllm_python_for(venv: str) -> Path:
    """The interpreter of the vLLM venv a host names (``HostProfile.vllm_venv``): ``<venv>/bin/python`` for an
    absolute path, ``<root>/<venv>/bin/python`` for a name (root: :func:`vllm_venv_root`); empty:
    :func:`vllm_python`. Whether it exists is :func:`require_vllm_python`'s."""
    venv = check_vllm_venv(venv)
    if not venv:
        return vllm_python()
    base = Path(venv) if venv.startswith("/") else vllm_venv_root() / venv
    return base / "bin" / "python"


def require_vllm_python(python: Path, venv: str = "", host: str = "") -> Path:
    """``python`` when it exists; a UserError saying how to get it otherwise (for a host's ``vllm_venv``,
    naming the host and the field)."""
    if python.exists():
        return python
    if venv:
        whose = f"host {host}'s vllm_venv {venv!r}" if host else f"vllm_venv {venv!r}"
        raise UserError(f"vLLM interpreter {python} not found ({whose}): run `bash scripts/bootstrap`, which builds "
                        f"the vLLM venvs under {vllm_venv_root()} (ROOST_VLLM_VENVS), or point the host's vllm_venv "
                        "at a venv that has vLLM")
    raise UserError(f"vLLM interpreter {python} not found: run `bash scripts/bootstrap` or set ROOST_VLLM_PYTHON")
