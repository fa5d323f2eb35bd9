"""Stand-ins for Open WebUI (not installed here: its package and dependencies are hundreds of MB), for
``roost.gateway.openwebui`` and ``roost.gateway.openwebui_api``.

**Its database.** The ``config`` table as SQLAlchemy emits it for SQLite from Open WebUI's own migrations
(the DDL below is what their ``op.create_table`` produced, run once against a scratch database, from the
open-webui 0.12.4 wheel):

- per key, ``backend/open_webui/migrations/versions/3ff2c63645b8_reshape_config_to_per_key_rows.py``
  (Open WebUI 0.10 on; the model is ``backend/open_webui/models/config.py``);
- one JSON row, ``backend/open_webui/migrations/versions/ca81bd47c050_add_config_table.py`` (0.3.x-0.9.x;
  ``backend/open_webui/config.py``'s ``save_to_db`` writes it).

Rows are written as Open WebUI writes them (JSON text; in the one-row layout the whole settings tree) and
read back through SQLAlchemy's JSON and DATETIME types, as Open WebUI reads them.

**Its admin API.** A loopback server implementing the contract of the endpoint roost calls,
``GET``/``POST /api/v1/configs/models`` in ``backend/open_webui/routers/configs.py`` (0.12.4): admin only
(``Authorization: Bearer``, 401 otherwise), the form ``ModelsConfigForm`` (``DEFAULT_MODELS`` and
``DEFAULT_PINNED_MODELS`` strings or null and ``MODEL_ORDER_LIST`` a list, all required: 422 without;
``DEFAULT_MODEL_METADATA`` and ``DEFAULT_MODEL_PARAMS`` optional, stored as null when missing, as its
``form_data.model_dump()`` upsert does), the stored form answered back. It can also misbehave as a hostile
server would: answer too much, too slowly, compressed, or not JSON.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from roost.net import free_port

PER_KEY_DDL = """CREATE TABLE config (
	"key" TEXT NOT NULL,
	value JSON NOT NULL,
	updated_at BIGINT,
	PRIMARY KEY ("key")
)"""
ONE_ROW_DDL = """CREATE TABLE config (
	id INTEGER NOT NULL,
	data JSON NOT NULL,
	version INTEGER NOT NULL,
	created_at DATETIME DEFAULT CURRENT_TIMESTAMP NOT NULL,
	updated_at DATETIME DEFAULT CURRENT_TIMESTAMP,
	PRIMARY KEY (id)
)"""

OTHER_KEYS = {"ui.enable_signup": False, "rag.top_k": 5, "ui.prompt_suggestions": [{"title": ["Hi"], "content": "é"}],
              "openai.api_base_urls": ["http://127.0.0.1:8080/v1"], "models.default_metadata": {"capabilities": {}}}
OLD_STAMP = 1_700_000_000


def per_key_db(path: Path, values: dict[str, object]) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute(PER_KEY_DDL)
        conn.executemany("INSERT INTO config VALUES (?, ?, ?)",
                         [(k, json.dumps(v, ensure_ascii=False), OLD_STAMP) for k, v in values.items()])
    conn.close()
    return path


def per_key_rows(path: Path) -> dict[str, tuple[object, int]]:
    """key -> (value, updated_at), read as Open WebUI's Config model reads them (SQLAlchemy's JSON type)."""
    table = sa.Table("config", sa.MetaData(), sa.Column("key", sa.Text, primary_key=True), sa.Column("value", sa.JSON),
                     sa.Column("updated_at", sa.BigInteger))
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        rows = {k: (v, t) for k, v, t in conn.execute(sa.select(table))}
    engine.dispose()
    return rows


def one_row_db(path: Path, data: object, rows: int = 1) -> Path:
    with sqlite3.connect(path) as conn:
        conn.execute(ONE_ROW_DDL)
        for _ in range(rows):
            conn.execute("INSERT INTO config (data, version, created_at, updated_at) VALUES (?, 0, ?, ?)",
                         (json.dumps(data), "2026-01-01 00:00:00", "2026-01-01 00:00:00"))
    conn.close()
    return path


def one_row(path: Path) -> tuple[dict[str, object], object]:
    """The newest row's settings and updated_at, through SQLAlchemy's JSON and DateTime types."""
    table = sa.Table("config", sa.MetaData(), sa.Column("id", sa.Integer, primary_key=True), sa.Column("data", sa.JSON),
                     sa.Column("updated_at", sa.DateTime))
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.connect() as conn:
        data, stamp = conn.execute(sa.select(table.c.data, table.c.updated_at).order_by(table.c.id.desc())).first()  # type: ignore[misc]
    engine.dispose()
    return data, stamp


ADMIN_KEY = "sk-admin-0123456789abcdef"
PATH = "/api/v1/configs/models"
REQUIRED = ("DEFAULT_MODELS", "DEFAULT_PINNED_MODELS", "MODEL_ORDER_LIST")
OPTIONAL = ("DEFAULT_MODEL_METADATA", "DEFAULT_MODEL_PARAMS")


class OpenWebUIStandIn(ThreadingHTTPServer):
    def __init__(self) -> None:
        super().__init__(("127.0.0.1", free_port()), _Handler)
        self.form: dict[str, Any] = {"DEFAULT_MODELS": "ornith-1.0", "DEFAULT_PINNED_MODELS": "gpt-x,ornith-1.0",
                                     "MODEL_ORDER_LIST": ["gpt-x", "ornith-1.0"],
                                     "DEFAULT_MODEL_METADATA": {"capabilities": {"vision": True}},
                                     "DEFAULT_MODEL_PARAMS": {"temperature": 0.6}}
        self.posts: list[dict[str, Any]] = []
        self.misbehave = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/"


class _Handler(BaseHTTPRequestHandler):
    server: OpenWebUIStandIn

    def log_message(self, *args: object) -> None:
        pass

    def _answer(self, status: int, doc: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _admin(self) -> bool:
        if self.path != PATH:
            self._answer(404, {"detail": "Not Found"})
            return False
        if self.headers.get("Authorization") != f"Bearer {ADMIN_KEY}":
            self._answer(401, {"detail": "Not authenticated"})
            return False
        return True

    def _misbehave(self) -> bool:
        mode = self.server.misbehave
        if mode == "huge":
            self._answer(200, {"DEFAULT_MODELS": "x" * (2 << 20)})
        elif mode == "not-json":
            body = b"<html>login</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        elif mode == "gzip":
            self._answer(200, self.server.form, {"Content-Encoding": "gzip"})
        elif mode == "slow":
            self.send_response(200)
            self.send_header("Content-Length", "1000")
            self.end_headers()
            for _ in range(100):  # a byte every 50 ms: each read is quick, the whole is not
                self.wfile.write(b" ")
                self.wfile.flush()
                time.sleep(0.05)
        else:
            return False
        return True

    def do_GET(self) -> None:
        if self._admin() and not self._misbehave():
            self._answer(200, self.server.form)

    def do_POST(self) -> None:
        if not self._admin():
            return
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        missing = [f for f in REQUIRED if f not in body]
        if missing:
            self._answer(422, {"detail": [{"loc": ["body", f], "msg": "Field required"} for f in missing]})
            return
        self.server.posts.append(body)
        if self.server.misbehave != "forget":
            self.server.form = {f: body.get(f) for f in REQUIRED + OPTIONAL}
        self._answer(200, self.server.form)



@contextmanager
def open_webui_stand_in() -> Iterator[OpenWebUIStandIn]:
    server = OpenWebUIStandIn()
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
