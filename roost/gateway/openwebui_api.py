"""Open WebUI's default model follows a swap through its admin API (the alternative to writing its
database, ``roost.gateway.openwebui``): for an instance roost cannot reach on disk (another machine, a
PostgreSQL database), and it applies at once without a restart, in every release.

The endpoint is the one Open WebUI's own admin page (Admin Settings > Settings > Models) uses:
``GET`` and ``POST /api/v1/configs/models`` (``backend/open_webui/routers/configs.py``: ``get_models_config``
/ ``set_models_config``, admin only). Its form is ``ModelsConfigForm``: ``DEFAULT_MODELS`` (a comma-separated
string or null), ``DEFAULT_PINNED_MODELS`` (the same), ``MODEL_ORDER_LIST`` (a list of model ids), and
since 0.10 ``DEFAULT_MODEL_METADATA`` and ``DEFAULT_MODEL_PARAMS`` (objects). The POST stores every field
of the form, a missing optional one as null, so roost reads the form first and sends it back whole with
the three model fields changed (an admin's default model metadata and parameters are kept).

The key is an Open WebUI API key of an admin (``sk-...``, Settings > Account > API keys; API keys must be
enabled: Admin Settings > Settings > General), sent as ``Authorization: Bearer``; it is never logged nor
part of an error. What the server answers is hostile: each call is bounded in time and size, and the
form is checked before anything is sent back.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

import httpx

from roost.gateway.openwebui import (
    DEFAULT_MODELS,
    MODEL_ORDER,
    PINNED_MODELS,
    ModelDefaults,
    OpenWebUIError,
    OpenWebUIUpdate,
    changed_keys,
    check_model_id,
    defaults_of,
    follow,
)
from roost.net import ReadCut, read_capped

MODELS_CONFIG_PATH = "api/v1/configs/models"
MAX_ANSWER_BYTES = 1 << 20
"""The largest answer read (the form holds model ids and two small objects)."""
TIMEOUT_S = 10.0
"""Each wait of a call (connecting, sending, each read), and the reading of the whole answer."""

FIELDS = {DEFAULT_MODELS: "DEFAULT_MODELS", PINNED_MODELS: "DEFAULT_PINNED_MODELS", MODEL_ORDER: "MODEL_ORDER_LIST"}
"""The form's field for each setting (``MODELS_CONFIG_KEYS`` in ``routers/configs.py``)."""


def _call(client: httpx.Client, method: str, where: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """One bounded call; the JSON object answered, or an OpenWebUIError that shows neither key nor body."""
    deadline = time.monotonic() + TIMEOUT_S
    try:
        with client.stream(method, MODELS_CONFIG_PATH, json=body) as answer:
            if answer.status_code in (401, 403):
                raise OpenWebUIError(f"Open WebUI at {where} refused the key ({answer.status_code}): store an admin's "
                                     "API key (sk-..., with API keys enabled) in the host's openwebui_api_key_secret "
                                     "Secret block or ROOST_OPENWEBUI_API_KEY")
            if answer.status_code != 200:
                raise OpenWebUIError(f"Open WebUI at {where} answered {answer.status_code} to {method} "
                                     f"/{MODELS_CONFIG_PATH}: check openwebui_url (its base URL) and its log")
            if answer.headers.get("content-encoding", "identity").lower() != "identity":
                raise OpenWebUIError(f"Open WebUI at {where} answered compressed although asked not to: is "
                                     "openwebui_url Open WebUI, or a proxy in front of it?")
            raw = read_capped(answer.iter_raw(), MAX_ANSWER_BYTES, deadline)
    except ReadCut:
        raise OpenWebUIError(f"Open WebUI at {where} answered more than {MAX_ANSWER_BYTES:,} bytes or "
                             f"took over {TIMEOUT_S:g} s: is openwebui_url Open WebUI?") from None
    except httpx.HTTPError as exc:
        raise OpenWebUIError(f"Open WebUI at {where} could not be reached ({type(exc).__name__}): check "
                             "openwebui_url and that Open WebUI runs") from None
    try:
        doc = json.loads(raw)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise OpenWebUIError(f"Open WebUI at {where} answered /{MODELS_CONFIG_PATH} with no JSON object: is "
                             "openwebui_url Open WebUI's base URL?")
    return doc


def _defaults(form: dict[str, Any], where: str) -> ModelDefaults:
    return defaults_of({key: form.get(field) for key, field in FIELDS.items()}, f"Open WebUI at {where}")


def follow_swap_via_api(base_url: str, api_key: str, new: str, old: Sequence[str],
                        transport: httpx.BaseTransport | None = None) -> OpenWebUIUpdate:
    """Set Open WebUI's default, pinned and ordered models through its admin API at ``base_url`` after
    ``new`` replaced ``old`` on the host; nothing is sent when they already say so."""
    check_model_id(new)
    if not api_key:
        raise OpenWebUIError("no Open WebUI API key: store an admin's API key in the Secret block the host's "
                             "openwebui_api_key_secret names, or in ROOST_OPENWEBUI_API_KEY")
    where = base_url.rstrip("/")
    # identity: what is read is what is counted (no compressed answer to inflate past the bound)
    headers = {"Authorization": f"Bearer {api_key}", "Accept": "application/json", "Accept-Encoding": "identity"}
    with httpx.Client(base_url=base_url, headers=headers, timeout=httpx.Timeout(TIMEOUT_S), transport=transport,
                      follow_redirects=False, trust_env=False) as client:
        form = _call(client, "GET", where)
        before = _defaults(form, where)
        after = follow(before, new, old)
        changed = changed_keys(before, after)
        if changed:
            sent = form | {field: after.as_values()[key] for key, field in FIELDS.items()}
            kept = _defaults(_call(client, "POST", where, sent), where)
            if kept != after:
                raise OpenWebUIError(f"Open WebUI at {where} did not keep the new default model (it answered "
                                     f"{kept.default_models!r}): set it by hand in Admin Settings > Settings > Models")
    return OpenWebUIUpdate(where=where, layout="api", changed=changed, now=after)
