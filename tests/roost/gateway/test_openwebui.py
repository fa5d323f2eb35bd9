"""Open WebUI's default model follows a swap (``roost.gateway.openwebui``), on databases laid out as Open
WebUI's own migrations lay them out (the stand-ins of ``tests/support/openwebui.py``, which names the
Open WebUI source files they follow)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from support.openwebui import OLD_STAMP, OTHER_KEYS, one_row, one_row_db, per_key_db, per_key_rows

from roost.errors import UserError
from roost.gateway import openwebui
from roost.gateway.openwebui import ModelDefaults, OpenWebUIError, follow, follow_swap_in_db
from roost.hosts import CPU

# --- the rules -------------------------------------------------------------------------------------


def test_the_new_model_takes_the_old_ones_places() -> None:
    now = follow(ModelDefaults("old", "gpt-x,old", ["gpt-x", "old", "other"]), "new", ["old"])
    assert now == ModelDefaults("new", "gpt-x,new", ["new", "gpt-x", "other"])
    # an admin's multi-model default keeps its other model; two retired models become one new one
    assert follow(ModelDefaults("a,old1,old2", "old2", None), "new", ["old1", "old2"]) == \
        ModelDefaults("a,new", "new", ["new"])
    # a default that names none of the host's models: the new model alone; the pins gain it at the end
    assert follow(ModelDefaults("gpt-x", "gpt-x", []), "new", ["old"]) == ModelDefaults("new", "gpt-x,new", ["new"])
    # nothing set yet (Open WebUI's DEFAULT_MODELS unset), spaces and repeats in what an admin typed
    assert follow(ModelDefaults(None, " a , a ,", ["a", "a"]), "new", []) == ModelDefaults("new", "a,new", ["new", "a"])


def test_following_twice_changes_nothing_more() -> None:
    once = follow(ModelDefaults("old", "gpt-x,old", ["gpt-x", "old"]), "new", ["old"])
    assert follow(once, "new", ["old"]) == once
    assert follow(once, "new", ["new"]) == once  # the same name landed again


@pytest.mark.parametrize("name", ["", "a,b", "tab\there", " spaced"])
def test_a_name_open_webui_cannot_hold_is_refused(tmp_path: Path, name: str) -> None:
    db = per_key_db(tmp_path / "webui.db", {"ui.default_models": "old"})
    with pytest.raises(OpenWebUIError, match="cannot be an Open WebUI default"):
        follow_swap_in_db(db, name, ["old"])
    assert per_key_rows(db)["ui.default_models"] == ("old", OLD_STAMP)


# --- per-key rows (Open WebUI 0.10 on) ----------------------------------------------------------------


def test_per_key_sets_three_keys_keeps_the_rest_and_is_idempotent(tmp_path: Path) -> None:
    db = per_key_db(tmp_path / "webui.db", OTHER_KEYS | {"ui.default_models": "ornith-1.0",
                                                          "ui.default_pinned_models": "gpt-x,ornith-1.0",
                                                          "ui.model_order_list": ["gpt-x", "ornith-1.0", "z"]})
    before = per_key_rows(db)
    done = follow_swap_in_db(db, "ornith-1.5", ["ornith-1.0"])
    assert done.layout == "per-key" and not done.restart_needed
    assert done.changed == ("ui.default_models", "ui.default_pinned_models", "ui.model_order_list")
    assert done.summary() == (f"default ornith-1.5 set (default_models, default_pinned_models, model_order_list; {db})")
    after = per_key_rows(db)
    assert after["ui.default_models"][0] == "ornith-1.5"
    assert after["ui.default_pinned_models"][0] == "gpt-x,ornith-1.5"
    assert after["ui.model_order_list"][0] == ["ornith-1.5", "gpt-x", "z"]
    assert all(after[k][1] > OLD_STAMP for k in openwebui.KEYS)  # updated_at bumped, epoch seconds
    assert {k: v for k, v in after.items() if k not in openwebui.KEYS} == \
        {k: v for k, v in before.items() if k not in openwebui.KEYS}  # every other key and stamp as it was

    again = follow_swap_in_db(db, "ornith-1.5", ["ornith-1.0"])
    assert again.changed == () and again.summary() == f"default ornith-1.5 already ({db})"
    assert per_key_rows(db) == after  # nothing written, not even a stamp


def test_per_key_rows_open_webui_has_not_seeded_are_inserted(tmp_path: Path) -> None:
    db = per_key_db(tmp_path / "webui.db", {"ui.enable_signup": True})
    follow_swap_in_db(db, "new", [])
    rows = per_key_rows(db)
    assert {k: v for k, (v, _) in rows.items()} == {"ui.enable_signup": True, "ui.default_models": "new",
                                                    "ui.default_pinned_models": "new", "ui.model_order_list": ["new"]}


def test_a_list_valued_default_some_releases_wrote_is_read(tmp_path: Path) -> None:
    # models/config.py's repair_config_rows joins such lists into the comma-separated string
    db = per_key_db(tmp_path / "webui.db", {"ui.default_models": ["old"], "ui.default_pinned_models": ["a", "old"]})
    follow_swap_in_db(db, "new", ["old"])
    rows = per_key_rows(db)
    assert rows["ui.default_models"][0] == "new" and rows["ui.default_pinned_models"][0] == "a,new"


# --- one JSON row (Open WebUI before 0.10) -------------------------------------------------------------


def test_one_row_changes_the_ui_keys_only_and_asks_for_a_restart(tmp_path: Path) -> None:
    data = {"version": 0, "ui": {"default_models": "old", "default_pinned_models": "old", "enable_signup": False,
                                 "prompt_suggestions": [{"title": ["Hi"], "content": "é"}]},
            "rag": {"top_k": 5, "web": {"search": {"enable": True}}}, "openai": {"api_keys": ["sk-upstream"]}}
    db = one_row_db(tmp_path / "webui.db", data)
    done = follow_swap_in_db(db, "new", ["old"])
    assert done.layout == "one-row" and done.restart_needed
    assert done.summary().endswith("; restart open-webui to apply")
    stored, stamp = one_row(db)
    expected = json.loads(json.dumps(data))
    expected["ui"] |= {"default_models": "new", "default_pinned_models": "new", "model_order_list": ["new"]}
    assert stored == expected
    assert str(stamp) > "2026-01-01 00:00:00"  # a datetime SQLAlchemy parses, as save_to_db stores it

    again = follow_swap_in_db(db, "new", ["old"])
    assert again.changed == () and not again.restart_needed
    assert one_row(db) == (stored, stamp)


def test_one_row_writes_the_newest_row_the_one_open_webui_loads(tmp_path: Path) -> None:
    db = one_row_db(tmp_path / "webui.db", {"ui": {"default_models": "old"}}, rows=2)
    follow_swap_in_db(db, "new", ["old"])
    with sqlite3.connect(db) as conn:
        datas = [json.loads(d) for (d,) in conn.execute("SELECT data FROM config ORDER BY id")]
    conn.close()
    assert [d["ui"]["default_models"] for d in datas] == ["old", "new"]


# --- what cannot be done is said, and nothing is changed ---------------------------------------------


def test_a_missing_database_is_named_and_not_created(tmp_path: Path) -> None:
    db = tmp_path / "data" / "webui.db"
    with pytest.raises(OpenWebUIError, match=r"webui\.db not found: set the host's openwebui_db"):
        follow_swap_in_db(db, "new", [])
    assert not db.exists()


@pytest.mark.parametrize("setup, match", [
    (lambda p: p.write_bytes(b"not a database" * 100), "could not be updated"),
    (lambda p: sqlite3.connect(p).execute("CREATE TABLE users (id TEXT)"), "has no Open WebUI config table"),
    (lambda p: one_row_db(p, {"ui": {}}, rows=0), "set DEFAULT_MODELS in Open WebUI's environment"),
    (lambda p: one_row_db(p, ["not", "settings"]), "no ui section"),
    (lambda p: per_key_db(p, {"ui.model_order_list": "a,b"}), "not a list of model ids"),
    (lambda p: per_key_db(p, {"ui.default_models": {"id": "x"}}), "holds dict, not model ids"),
])
def test_an_unusable_database_is_a_clear_error(tmp_path: Path, setup: object, match: str) -> None:
    db = tmp_path / "webui.db"
    setup(db)  # type: ignore[operator]
    before = db.read_bytes()
    with pytest.raises(OpenWebUIError, match=match) as err:
        follow_swap_in_db(db, "new", ["old"])
    assert "\n" not in str(err.value)
    assert db.read_bytes() == before


def test_a_database_open_webui_is_writing_is_waited_for_then_reported(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(openwebui, "BUSY_TIMEOUT_S", 0.2)
    db = per_key_db(tmp_path / "webui.db", {"ui.default_models": "old"})
    writer = sqlite3.connect(db, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(OpenWebUIError, match="database is locked"):
            follow_swap_in_db(db, "new", ["old"])
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert follow_swap_in_db(db, "new", ["old"]).changed


# --- the host profile's fields -------------------------------------------------------------------------


@pytest.mark.parametrize("fields, match", [
    ({"openwebui_db": "webui.db"}, "openwebui_db 'webui.db': give the absolute path"),
    ({"openwebui_db": "/srv/webui.db", "openwebui_url": "http://127.0.0.1:3000/"}, "both set: keep one"),
    ({"openwebui_api_key_secret": "owui-key"}, "without openwebui_url"),
    ({"openwebui_url": "http://admin:sk-1@127.0.0.1:3000/"}, "openwebui_url: must not contain a user name"),
    ({"openwebui_url": "ftp://127.0.0.1/"}, "must be an http:// or https:// URL"),
])
def test_host_profile_fields_are_checked(fields: dict[str, str], match: str) -> None:
    with pytest.raises(UserError, match=match) as err:
        CPU.model_validate(CPU.model_dump() | fields)
    assert "sk-1" not in str(err.value)


def test_host_profile_fields_default_to_none_and_validate() -> None:
    assert (CPU.openwebui_db, CPU.openwebui_url, CPU.openwebui_api_key_secret) == ("", "", "")
    host = CPU.model_validate(CPU.model_dump() | {"openwebui_url": "http://127.0.0.1:3000",
                                                  "openwebui_api_key_secret": "owui-key"})
    assert host.openwebui_url == "http://127.0.0.1:3000/"


# --- the run record and the report -------------------------------------------------------------------


def test_an_older_record_loads_and_the_report_says_what_became_of_the_default() -> None:
    from support.samples import spark_record

    from roost.records import RunRecord, StageTiming
    from roost.report.sections.timeline import openwebui_para

    data = json.loads(spark_record().model_dump_json())
    del data["openwebui"]  # a record from before the field
    record = RunRecord.model_validate(data)
    assert record.openwebui == "" and openwebui_para(record) is None  # no gateway stage: no server kept

    kept = record.model_copy(update={"stages": [StageTiming(stage="gateway", seconds=0.1)],
                                     "openwebui": "failed: Open WebUI database /srv/webui.db not found: set ..."})
    para = openwebui_para(kept)
    assert para is not None and para.text.startswith(
        "Open WebUI's default model was not changed: setting it failed (Open WebUI database /srv/webui.db not found")
    assert f"an admin makes `{record.meta.served_model_name}` the default, pins it and puts it first" in para.text
