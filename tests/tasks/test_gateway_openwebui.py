"""The gateway stage makes a swapped-in model Open WebUI's default (``flows/stages/gateway.py`` through
``tasks/gateway.py``): on a real Prefect server, two landings on one host (the second replacing the first),
with the host naming Open WebUI's database, then its admin API with the key in a real Secret block, then
nothing (the report says what to change by hand). The databases and the API server are the stand-ins of
``tests/support/openwebui.py`` (Open WebUI's own table layout and endpoint contract)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.openwebui import ADMIN_KEY, open_webui_stand_in, per_key_db, per_key_rows
from support.samples import spark_record

from roost.hosts import CPU, HostProfile
from roost.records import RunRecord

OLD, NEW = "ornith-1.0", "ornith-1.5"


@pytest.fixture
def backends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ROOST_GATEWAY_BACKENDS_DIR", str(tmp_path / "backends"))
    return tmp_path / "backends"


def _swap(host: HostProfile) -> RunRecord:
    """Land OLD on the host, then NEW in its place (the production swap); NEW's record."""
    from prefect import flow

    from flows.stages.gateway import gateway_stage

    @flow(name="gateway-openwebui-test")
    def land(name: str, port: int) -> RunRecord:
        record = spark_record()
        record = record.model_copy(update={"stages": [], "meta": record.meta.model_copy(update={"served_model_name": name})})
        gateway_stage(record, f"http://127.0.0.1:{port}", name, host)
        return record

    land(OLD, 18001)
    return land(NEW, 18002)


@pytest.mark.slow
def test_the_swap_sets_open_webuis_default_in_its_database(prefect_api: str, backends: Path, tmp_path: Path) -> None:
    db = per_key_db(tmp_path / "webui.db", {"ui.default_models": OLD, "ui.default_pinned_models": OLD,
                                             "ui.model_order_list": [OLD, "gpt-x"], "ui.enable_signup": False})
    record = _swap(CPU.model_copy(update={"openwebui_db": str(db)}))
    values = {k: v for k, (v, _) in per_key_rows(db).items()}
    assert values == {"ui.default_models": NEW, "ui.default_pinned_models": NEW, "ui.model_order_list": [NEW, "gpt-x"],
                      "ui.enable_signup": False}
    assert record.openwebui == f"default {NEW} set (default_models, default_pinned_models, model_order_list; {db})"
    [st] = record.stages
    assert st.status == "completed" and f"; Open WebUI {record.openwebui}" in st.note and "replaced" in st.note

    from roost.report.sections.timeline import openwebui_para
    para = openwebui_para(record)
    assert para is not None and para.text == f"Open WebUI: {record.openwebui}."


@pytest.mark.slow
def test_the_swap_uses_the_admin_api_with_the_key_from_a_secret_block(prefect_api: str, backends: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    from prefect.blocks.system import Secret
    from pydantic import SecretStr

    with open_webui_stand_in() as server:
        Secret(value=SecretStr(ADMIN_KEY)).save("roost-test-openwebui-key", overwrite=True)
        host = CPU.model_copy(update={"openwebui_url": server.url, "openwebui_api_key_secret": "roost-test-openwebui-key"})
        with caplog.at_level(logging.INFO):
            record = _swap(host)
        assert server.form["DEFAULT_MODELS"] == NEW and server.form["MODEL_ORDER_LIST"][0] == NEW
        assert record.openwebui.startswith(f"default {NEW} set (") and record.status != "failed"

        # a Secret block that is not there: a warning and a "failed" line; the landing goes on
        missing = host.model_copy(update={"openwebui_api_key_secret": "no-such-openwebui-key"})
        with caplog.at_level(logging.INFO):
            failed = _swap(missing)
        assert failed.openwebui.startswith("failed: Prefect Secret block 'no-such-openwebui-key'")
        assert [s.status for s in failed.stages] == ["completed"]
        assert ADMIN_KEY not in caplog.text and ADMIN_KEY not in record.model_dump_json()


@pytest.mark.slow
def test_without_open_webui_the_report_says_what_to_do_by_hand(prefect_api: str, backends: Path) -> None:
    from roost.report.sections.timeline import openwebui_para

    record = _swap(CPU)
    assert record.openwebui == "" and "Open WebUI" not in record.stages[0].note
    para = openwebui_para(record)
    assert para is not None
    assert "the host names no Open WebUI (`openwebui_db` or `openwebui_url`" in para.text
    assert f"makes `{NEW}` the default, pins it and puts it first" in para.text
    assert openwebui_para(spark_record().model_copy(update={"stages": []})) is None  # no kept server, no line
