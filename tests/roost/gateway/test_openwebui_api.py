"""Open WebUI's default model follows a swap through its admin API (``roost.gateway.openwebui_api``),
against the loopback stand-in of ``tests/support/openwebui.py`` (the contract of Open WebUI's
``/api/v1/configs/models``, and the ways a hostile server misbehaves)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from support.openwebui import ADMIN_KEY, OpenWebUIStandIn, open_webui_stand_in

from roost.gateway import openwebui_api
from roost.gateway.openwebui import OpenWebUIError
from roost.gateway.openwebui_api import follow_swap_via_api
from roost.net import free_port


@pytest.fixture
def owui() -> Iterator[OpenWebUIStandIn]:
    with open_webui_stand_in() as server:
        yield server


def test_the_admin_api_sets_the_three_fields_keeps_the_rest_and_is_idempotent(owui: OpenWebUIStandIn) -> None:
    done = follow_swap_via_api(owui.url, ADMIN_KEY, "ornith-1.5", ["ornith-1.0"])
    assert done.layout == "api" and not done.restart_needed and len(owui.posts) == 1
    assert owui.form == {"DEFAULT_MODELS": "ornith-1.5", "DEFAULT_PINNED_MODELS": "gpt-x,ornith-1.5",
                         "MODEL_ORDER_LIST": ["ornith-1.5", "gpt-x"],
                         "DEFAULT_MODEL_METADATA": {"capabilities": {"vision": True}},  # sent back, not nulled
                         "DEFAULT_MODEL_PARAMS": {"temperature": 0.6}}
    assert done.summary() == f"default ornith-1.5 set (default_models, default_pinned_models, model_order_list; " \
                             f"{owui.url.rstrip('/')})"
    again = follow_swap_via_api(owui.url, ADMIN_KEY, "ornith-1.5", ["ornith-1.0"])
    assert again.changed == () and len(owui.posts) == 1  # nothing sent


def test_an_older_form_without_the_metadata_fields_is_sent_back_as_it_came(owui: OpenWebUIStandIn) -> None:
    owui.form = {"DEFAULT_MODELS": None, "MODEL_ORDER_LIST": None, "DEFAULT_PINNED_MODELS": None}
    follow_swap_via_api(owui.url, ADMIN_KEY, "new", [])
    assert owui.posts == [{"DEFAULT_MODELS": "new", "DEFAULT_PINNED_MODELS": "new", "MODEL_ORDER_LIST": ["new"]}]


@pytest.mark.parametrize("key", ["sk-not-an-admin-key-42", ""])
def test_a_refused_or_missing_key_is_said_and_never_shown(owui: OpenWebUIStandIn, key: str) -> None:
    with pytest.raises(OpenWebUIError, match="refused the key" if key else "no Open WebUI API key") as err:
        follow_swap_via_api(owui.url, key, "new", ["old"])
    assert (key or ADMIN_KEY) not in str(err.value) and owui.posts == []


@pytest.mark.parametrize("mode, match", [
    ("huge", "more than 1,048,576 bytes"),
    ("not-json", "no JSON object"),
    ("gzip", "answered compressed"),
    ("slow", "took over 0.5 s"),
    ("forget", "did not keep the new default model"),
])
def test_a_hostile_or_broken_answer_is_bounded_and_said(owui: OpenWebUIStandIn, monkeypatch: pytest.MonkeyPatch,
                                                        mode: str, match: str) -> None:
    monkeypatch.setattr(openwebui_api, "TIMEOUT_S", 0.5)
    owui.misbehave = mode
    started = time.monotonic()
    with pytest.raises(OpenWebUIError, match=match) as err:
        follow_swap_via_api(owui.url, ADMIN_KEY, "new", ["ornith-1.0"])
    assert time.monotonic() - started < 3 and ADMIN_KEY not in str(err.value)


def test_a_wrong_url_or_nothing_listening_is_said(owui: OpenWebUIStandIn) -> None:
    with pytest.raises(OpenWebUIError, match="answered 404"):
        follow_swap_via_api(owui.url + "openwebui/", ADMIN_KEY, "new", [])
    with pytest.raises(OpenWebUIError, match="could not be reached"):
        follow_swap_via_api(f"http://127.0.0.1:{free_port()}/", ADMIN_KEY, "new", [])
