"""Open WebUI's default model follows a model swap (the Ornith 1.5 recipe's troubleshooting, "Open WebUI
default model").

Open WebUI keeps the admin's default model, the models pinned for new users and the model order in its
own database, and once it has saved them they win over its ``DEFAULT_MODELS`` environment variable: a
landing that swaps the host's model (the gateway routes the new name) would leave every user on the old
default. After a swap roost sets the three keys, in Open WebUI's database or through its admin API
(``roost.gateway.openwebui_api``):

- ``ui.default_models`` (a comma-separated string of model ids, what a new chat opens with): the old
  models are replaced by the new one where they stand (an admin's multi-model default keeps its other
  models); when none of them is there, the new model alone (roost was told to keep the default on this
  host's model);
- ``ui.default_pinned_models`` (a comma-separated string too): the old models replaced by the new one
  where they stand, else the new one added at the end; the other pins are kept;
- ``ui.model_order_list`` (a JSON list of model ids): the new model first, the old ones removed (the
  gateway no longer routes them), the rest in their order.

Two layouts of Open WebUI's ``config`` table exist, both handled (the table's columns tell which):

- **per key** (Open WebUI 0.10 on: ``backend/open_webui/models/config.py``; the migration
  ``3ff2c63645b8_reshape_config_to_per_key_rows.py``): one row per key, ``key TEXT PRIMARY KEY``,
  ``value JSON`` (JSON text in SQLite), ``updated_at BIGINT`` (epoch seconds). Open WebUI reads the
  keys from the database on every request, so a running instance sees the change at once;
- **one JSON row** (Open WebUI 0.3.x-0.9.x: ``ca81bd47c050_add_config_table.py``; ``config.py``'s
  ``PersistentConfig``): ``id``, ``data`` (the whole settings tree as JSON, ``{"ui": {"default_models":
  ...}}``), ``version``, ``created_at``, ``updated_at`` (``DATETIME``). Open WebUI reads the newest row
  once, at start, and writes its in-memory copy back whenever an admin saves a setting, so a running
  instance must be restarted to apply the change (and before anyone saves a setting there).

Every write is one transaction (``BEGIN IMMEDIATE``) that changes only the three keys (every other key
and value is kept as it was) and bumps ``updated_at`` as Open WebUI does; nothing is written when the
keys already say so (idempotent). A database that cannot be opened or read, or holds no Open WebUI
settings, is an :class:`OpenWebUIError` naming the file and what to do; the landing goes on.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from roost.errors import RoostError

DEFAULT_MODELS = "ui.default_models"
PINNED_MODELS = "ui.default_pinned_models"
MODEL_ORDER = "ui.model_order_list"
KEYS = (DEFAULT_MODELS, PINNED_MODELS, MODEL_ORDER)

MAX_VALUE_BYTES = 1 << 20
"""The largest per-key value roost reads (the three hold model ids: a few hundred bytes)."""
MAX_BLOB_BYTES = 16 << 20
"""The largest one-row settings document roost reads (every setting of an instance: tens of KB)."""
BUSY_TIMEOUT_S = 5.0
"""How long a write waits for Open WebUI's own write to finish (its busy timeout is 5 s too)."""

Layout = Literal["per-key", "one-row", "api"]


class OpenWebUIError(RoostError):
    """Open WebUI's settings could not be read or changed: the landing goes on, with a warning."""


@dataclass(frozen=True)
class ModelDefaults:
    """The three settings, as Open WebUI holds them (``None``: unset)."""

    default_models: str | None = None
    pinned_models: str | None = None
    model_order: list[str] | None = None

    def as_values(self) -> dict[str, Any]:
        return {DEFAULT_MODELS: self.default_models, PINNED_MODELS: self.pinned_models, MODEL_ORDER: self.model_order}


@dataclass(frozen=True)
class OpenWebUIUpdate:
    """What roost did to Open WebUI's settings: where, which keys changed, and what they say now."""

    where: str
    layout: Layout
    changed: tuple[str, ...]
    now: ModelDefaults

    @property
    def restart_needed(self) -> bool:
        """A one-row (pre-0.10) instance reads its settings once, at start."""
        return self.layout == "one-row" and bool(self.changed)

    def summary(self) -> str:
        """One line for the stage note and the run record (no secret: a path or a base URL)."""
        what = f"default {self.now.default_models}"
        if not self.changed:
            return f"{what} already ({self.where})"
        done = f"{what} set ({', '.join(k.removeprefix('ui.') for k in self.changed)}; {self.where})"
        return done + ("; restart open-webui to apply" if self.restart_needed else "")


def _ids(value: str | None) -> list[str]:
    return [m.strip() for m in (value or "").split(",") if m.strip()]


def _dedupe(ids: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(ids))


def follow(current: ModelDefaults, new: str, old: Iterable[str]) -> ModelDefaults:
    """The settings after ``new`` replaced the host's ``old`` models (the module docstring's rules)."""
    gone = {o for o in old if o and o != new}
    defaults = _ids(current.default_models)
    defaults = _dedupe(new if m in gone else m for m in defaults) if gone & set(defaults) else [new]
    pinned = _dedupe(new if m in gone else m for m in _ids(current.pinned_models))
    if new not in pinned:
        pinned.append(new)
    order = [new] + [m for m in _dedupe(current.model_order or []) if m != new and m not in gone]
    return ModelDefaults(",".join(defaults), ",".join(pinned), order)


def check_model_id(name: str) -> str:
    """``name`` if Open WebUI can hold it in its comma-separated settings (no comma, no control character)."""
    if not name or "," in name or not name.isprintable() or name != name.strip():
        raise OpenWebUIError(f"the served model name {name!r} cannot be an Open WebUI default (empty, a comma, "
                             "a control character or surrounding spaces): set the default by hand")
    return name


def model_ids_value(key: str, value: Any, where: str) -> str | None:
    """A default/pinned models value as the comma-separated string it should be (a list, the shape some
    releases wrote and 0.12 repairs, is joined); anything else is an OpenWebUIError."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(m, str) for m in value):
        return ",".join(m.strip() for m in value if m.strip())
    raise OpenWebUIError(f"{key} in {where} holds {type(value).__name__}, not model ids: set it again in Open "
                         "WebUI (Admin Settings > Settings > Models)")


def order_value(value: Any, where: str) -> list[str] | None:
    """The model order list (``None`` entries, which an older form let through, dropped)."""
    if value is None:
        return None
    if isinstance(value, list) and all(m is None or isinstance(m, str) for m in value):
        return [m for m in value if m]
    raise OpenWebUIError(f"{MODEL_ORDER} in {where} holds {type(value).__name__}, not a list of model ids: set "
                         "the order again in Open WebUI (Admin Settings > Settings > Models)")


def defaults_of(values: dict[str, Any], where: str) -> ModelDefaults:
    return ModelDefaults(model_ids_value(DEFAULT_MODELS, values.get(DEFAULT_MODELS), where),
                         model_ids_value(PINNED_MODELS, values.get(PINNED_MODELS), where),
                         order_value(values.get(MODEL_ORDER), where))


def changed_keys(before: ModelDefaults, after: ModelDefaults) -> tuple[str, ...]:
    b, a = before.as_values(), after.as_values()
    return tuple(k for k in KEYS if b[k] != a[k])


def _connect(db: Path) -> sqlite3.Connection:
    if not db.is_file():
        raise OpenWebUIError(f"Open WebUI database {db} not found: set the host's openwebui_db to Open WebUI's "
                             "webui.db (its DATA_DIR, /app/backend/data in its container, mounted on the host)")
    try:  # mode=rw: never create a database; isolation_level=None: the transaction is ours (BEGIN IMMEDIATE)
        return sqlite3.connect(f"{db.resolve().as_uri()}?mode=rw", uri=True, timeout=BUSY_TIMEOUT_S,
                               isolation_level=None)
    except sqlite3.Error as exc:
        raise OpenWebUIError(f"Open WebUI database {db} cannot be opened for writing ({exc}): give the worker's "
                             "user write access to it and its directory") from None


def _layout(conn: sqlite3.Connection, db: Path) -> Layout:
    columns = {row[1] for row in conn.execute("PRAGMA table_info(config)")}
    if {"key", "value", "updated_at"} <= columns:
        return "per-key"
    if {"id", "data", "updated_at"} <= columns:
        return "one-row"
    raise OpenWebUIError(f"{db} has no Open WebUI config table: is openwebui_db Open WebUI's webui.db, and has "
                         "Open WebUI started on it once?")


def _json(text: Any, what: str, limit: int) -> Any:
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    if isinstance(text, int | float):  # SQLite's JSON column has numeric affinity: a JSON number comes back a number
        return text
    if not isinstance(text, str) or len(text) > limit:
        raise OpenWebUIError(f"{what} is not a JSON text of at most {limit:,} bytes: Open WebUI wrote no such value; "
                             "check that the file is Open WebUI's database")
    try:
        return json.loads(text)
    except ValueError:
        raise OpenWebUIError(f"{what} is not valid JSON: check that the file is Open WebUI's database") from None


def _per_key(conn: sqlite3.Connection, where: str, new: str, old: Sequence[str]) -> tuple[tuple[str, ...], ModelDefaults]:
    marks = ",".join("?" * len(KEYS))
    rows = conn.execute(f"SELECT key, value FROM config WHERE key IN ({marks})", KEYS).fetchall()
    values = {k: _json(v, f"{k} in {where}", MAX_VALUE_BYTES) for k, v in rows}
    before = defaults_of(values, where)
    after = follow(before, new, old)
    changed = changed_keys(before, after)
    stamp = int(time.time())  # Config.upsert's updated_at: epoch seconds
    for key in changed:
        conn.execute("INSERT INTO config (key, value, updated_at) VALUES (?, ?, ?) ON CONFLICT(key) DO UPDATE SET "
                     "value = excluded.value, updated_at = excluded.updated_at",
                     (key, json.dumps(after.as_values()[key], ensure_ascii=False), stamp))
    return changed, after


def _one_row(conn: sqlite3.Connection, where: str, new: str, old: Sequence[str]) -> tuple[tuple[str, ...], ModelDefaults]:
    row = conn.execute("SELECT id, data FROM config ORDER BY id DESC LIMIT 1").fetchone()  # what Open WebUI loads
    if row is None:
        raise OpenWebUIError(f"{where} holds no saved Open WebUI settings (the config table is empty): set "
                             "DEFAULT_MODELS in Open WebUI's environment (its systemd unit or container) and restart it")
    data = _json(row[1], f"the settings in {where}", MAX_BLOB_BYTES)
    ui = data.get("ui", {}) if isinstance(data, dict) else None
    if not isinstance(ui, dict):
        raise OpenWebUIError(f"the settings in {where} are not Open WebUI's (no ui section): check openwebui_db")
    before = defaults_of({k: ui.get(k.removeprefix("ui.")) for k in KEYS}, where)
    after = follow(before, new, old)
    changed = changed_keys(before, after)
    if changed:
        for key in changed:
            ui[key.removeprefix("ui.")] = after.as_values()[key]
        data["ui"] = ui
        # save_to_db's updated_at = datetime.now(), stored as SQLAlchemy's SQLite DATETIME text
        stamp = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")  # Open WebUI writes local time
        conn.execute("UPDATE config SET data = ?, updated_at = ? WHERE id = ?", (json.dumps(data), stamp, row[0]))
    return changed, after


def follow_swap_in_db(db: Path, new: str, old: Sequence[str]) -> OpenWebUIUpdate:
    """Set Open WebUI's default, pinned and ordered models in its SQLite database ``db`` after ``new``
    replaced ``old`` on the host: one transaction, the three keys only, nothing written when they
    already say so. An unusable database is an :class:`OpenWebUIError` (nothing is changed)."""
    check_model_id(new)
    where = str(db)
    conn = _connect(db)
    try:
        conn.execute("BEGIN IMMEDIATE")
        try:
            layout = _layout(conn, db)
            changed, after = (_per_key if layout == "per-key" else _one_row)(conn, where, new, old)
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(sqlite3.Error):  # the error that stopped it is the one to report
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as exc:
        raise OpenWebUIError(f"Open WebUI database {db} could not be updated ({exc}): check that it is Open WebUI's "
                             "webui.db and that the worker may write it") from None
    finally:
        conn.close()
    return OpenWebUIUpdate(where=where, layout=layout, changed=changed, now=after)
