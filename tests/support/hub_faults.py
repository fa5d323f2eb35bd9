"""Small Hub repositories for the preflight tests, and a FAKE fault no real Hub server can be made to show.

- :func:`shrink`: a header-exact replica (``support.replicas``) with fewer layers, a smaller vocabulary
  and a shallower vision tower — the same tensor names, dtypes and per-layer shapes, a fraction of the
  bytes (olah reads a file for ~2 s per GB before its first byte, and publishing hashes every byte).
- :func:`write_shard_file`: a one-shard checkpoint directory whose ``model.safetensors`` holds the given
  bytes (a corrupt header the real mirror then serves as is).
- :class:`CutHeaderHub` — a FAKE: a :class:`~support.hub.HubProxy` that answers one file with a
  ``200`` stating the file's full ``Content-Length``, sends the 8-byte length and half of the header,
  then closes the connection. olah always sends whole files, so a connection closed in the middle of a
  header (a reset, a proxy timeout on huggingface.co) can only be staged. Everything else is forwarded
  to the real mirror.
- :class:`MissingFileHub` — a FAKE: answers one listed file with ``404 EntryNotFound`` as huggingface.co
  answers a path absent at a revision. olah answers a file missing from its store with ``500``, and a
  file it lists is always in its store.

Faults of the Hub boundary (``roost.hub.answers``, ``roost.hub._http``), each a FAKE because olah
answers well-formed JSON, whole files with true sizes, and always answers:

- :class:`SilentHub` — a FAKE: a TCP server on loopback that accepts every connection and never writes
  a byte (a Hub hung behind a load balancer), until closed.
- :class:`AnswerHub` — a FAKE: answers one API route (``/refs``, ``/revision/``, ``/tree/``) with the
  given body; everything else goes to the real mirror.
- :class:`StallHub` — a FAKE: answers one file with ``200`` and its true ``Content-Length``, sends the
  first ``after`` bytes, then holds the connection open without writing (a body stalled mid-file).
- :class:`SizeLieHub` — a FAKE: answers one file stating a size other than the listing's, in
  ``Content-Length`` (and a body of that length) or in ``X-Linked-Size`` (with the true body).
- :class:`EchoHub` — a FAKE: answers every request ``400`` with the request's headers, the
  ``Authorization`` header among them, echoed in ``X-Error-Message`` and in a JSON body.
"""

from __future__ import annotations

import abc
import contextlib
import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from types import TracebackType
from typing import Self
from urllib.parse import unquote, urlsplit

from support import replicas
from support.hub import HubProxy

__all__ = ["AnswerHub", "CutHeaderHub", "EchoHub", "MissingFileHub", "SilentHub", "SizeLieHub", "StallHub", "shrink",
           "write_shard_file"]

_LAYER = re.compile(r"\.layers\.(\d+)\.")
_BLOCK = re.compile(r"^model\.visual\.blocks\.(\d+)\.")


def shrink(spec: replicas.ReplicaSpec, *, layers: int | None = None, vocab: int | None = None,
           vision_depth: int | None = None) -> replicas.ReplicaSpec:
    """``spec`` with its first ``layers`` decoder layers, a ``vocab``-row embedding and head, and the
    first ``vision_depth`` vision blocks; its config says the same (layer_types, vocab_size, depth)."""
    config = dict(spec.config)
    text = dict(config.get("text_config", config))
    old_vocab = int(text["vocab_size"])
    tensors = []
    for name, dtype, shape in spec.tensors:
        m = _LAYER.search(name)
        if layers is not None and m and not name.startswith("mtp.") and int(m.group(1)) >= layers:
            continue
        b = _BLOCK.match(name)
        if vision_depth is not None and b and int(b.group(1)) >= vision_depth:
            continue
        if vocab is not None and shape and shape[0] == old_vocab:
            shape = (vocab, *shape[1:])
        tensors.append((name, dtype, shape))
    if layers is not None:
        text["num_hidden_layers"] = layers
        if "layer_types" in text:
            text["layer_types"] = text["layer_types"][:layers]
    if vocab is not None:
        text["vocab_size"] = vocab
    if "text_config" in config:
        config["text_config"] = text
    else:
        config = text
    if vision_depth is not None and "vision_config" in config:
        config["vision_config"] = {**config["vision_config"], "depth": vision_depth}
    return replicas.ReplicaSpec(spec.name, config, tensors, spec.num_shards)


def write_shard_file(dest: Path, body: bytes) -> Path:
    """A tiny Qwen3 checkpoint directory whose only shard, ``model.safetensors``, holds ``body``."""
    replicas.write_replica(replicas.tiny_qwen3(layers=1, num_shards=1), dest)
    (dest / "model.safetensors").write_bytes(body)
    return dest


def send_first_bytes(handler: BaseHTTPRequestHandler, body: bytes, n: int) -> bool:
    """Answer 200 with ``body``'s full Content-Length but send only its first ``n`` bytes; False when
    the client hung up."""
    handler.send_response(200)
    handler.send_header("Content-Length", str(len(body)))
    handler.send_header("Content-Type", "application/octet-stream")
    handler.end_headers()
    try:
        handler.wfile.write(body[:n])
        handler.wfile.flush()
    except (BrokenPipeError, ConnectionResetError):
        return False
    return True


class _OneFileFake(HubProxy, abc.ABC):
    """A proxy that answers ``GET /<repo>/resolve/<rev>/<path>`` for one file ``path`` itself (``answer``);
    every other request goes to the mirror."""

    def __init__(self, mirror_endpoint: str, path: str, *, host: str = "127.0.0.1") -> None:
        super().__init__(mirror_endpoint, host=host)
        self.path = path
        self.attempts = 0
        self._attempts_lock = threading.Lock()

    def serve(self, handler: BaseHTTPRequestHandler) -> bool:
        parts = unquote(urlsplit(handler.path).path).lstrip("/").split("/")
        if handler.command != "GET" or len(parts) < 5 or parts[2] != "resolve" or "/".join(parts[4:]) != self.path:
            return False
        with self._attempts_lock:
            self.attempts += 1
        self.answer(handler)
        return True

    @abc.abstractmethod
    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        """Write the whole answer to ``handler``'s request for ``path``."""


class MissingFileHub(_OneFileFake):
    """FAKE (olah cannot do this): the file ``path`` answers ``404`` with ``X-Error-Code: EntryNotFound``."""

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        message = f"{self.path} does not exist at this revision"
        body = b'{"error": "Entry not found"}'
        self.record("GET", handler.path, 404)
        handler.send_response(404)
        handler.send_header("X-Error-Code", "EntryNotFound")
        handler.send_header("X-Error-Message", message)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)


class CutHeaderHub(_OneFileFake):
    """FAKE (olah cannot do this): the file ``path`` is answered with ``200``, ``Content-Length:
    len(body)`` and only the first ``cut`` bytes of ``body`` (the whole file), then the connection is
    closed. ``attempts`` counts those requests."""

    def __init__(self, mirror_endpoint: str, path: str, body: bytes, cut: int, *, host: str = "127.0.0.1") -> None:
        super().__init__(mirror_endpoint, path, host=host)
        self.body = body
        self.cut = cut

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        self.record("GET", handler.path, 200)
        send_first_bytes(handler, self.body, self.cut)
        handler.close_connection = True


class SilentHub:
    """FAKE (olah always answers): accepts every TCP connection on loopback and never writes a byte.
    ``accepted`` counts the connections; ``close()`` drops them all."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port = self._listener.getsockname()[1]
        self._closing = threading.Event()
        self.accepted = 0
        self._held: list[socket.socket] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept, name="silent-hub", daemon=True)
        self._thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closing.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.accepted += 1
                self._held.append(conn)

    def close(self) -> None:
        self._closing.set()  # accept() polls: closing the socket would not wake it
        self._thread.join(timeout=5)
        self._listener.close()
        with self._lock:
            for conn in self._held:
                with contextlib.suppress(OSError):
                    conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


class AnswerHub(HubProxy):
    """FAKE (olah answers well-formed JSON): a request whose path (without the query) contains ``route``
    is answered ``200`` with ``body`` as ``application/json``; ``extra_headers`` are added (a ``Link``
    header, say). Everything else goes to the real mirror."""

    def __init__(self, mirror_endpoint: str, route: str, body: bytes, *, extra_headers: dict[str, str] | None = None,
                 host: str = "127.0.0.1") -> None:
        super().__init__(mirror_endpoint, host=host)
        self.route = route
        self.body = body
        self.extra_headers = extra_headers or {}
        self.answered = 0

    def serve(self, handler: BaseHTTPRequestHandler) -> bool:
        if handler.command != "GET" or self.route not in urlsplit(handler.path).path:
            return False
        self.answered += 1
        self.record("GET", handler.path, 200)
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(self.body)))
        for name, value in self.extra_headers.items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(self.body)
        return True


class StallHub(_OneFileFake):
    """FAKE (olah sends whole files): the file ``path`` is answered ``200`` with ``Content-Length:
    len(body)``, its first ``after`` bytes, then nothing more while the connection stays open (until the
    client gives up or ``release`` is set)."""

    def __init__(self, mirror_endpoint: str, path: str, body: bytes, after: int, *, host: str = "127.0.0.1") -> None:
        super().__init__(mirror_endpoint, path, host=host)
        self.body = body
        self.after = after
        self.release = threading.Event()

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        self.record("GET", handler.path, 200)
        if not send_first_bytes(handler, self.body, self.after):
            return
        self.release.wait(60)
        handler.close_connection = True

    def stop(self) -> None:
        self.release.set()
        super().stop()


class SizeLieHub(_OneFileFake):
    """FAKE (olah states true sizes): the file ``path`` is answered ``200`` stating ``claimed`` bytes —
    in ``Content-Length``, with the first ``claimed`` bytes of ``body`` (``header="content-length"``),
    or in ``X-Linked-Size``, with the whole true body (``header="x-linked-size"``)."""

    def __init__(self, mirror_endpoint: str, path: str, body: bytes, claimed: int, header: str, *,
                 host: str = "127.0.0.1") -> None:
        super().__init__(mirror_endpoint, path, host=host)
        self.body = body
        self.claimed = claimed
        self.header = header

    def answer(self, handler: BaseHTTPRequestHandler) -> None:
        body = self.body[: self.claimed] if self.header == "content-length" else self.body
        self.record("GET", handler.path, 200)
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(body)))
        if self.header == "x-linked-size":
            handler.send_header("X-Linked-Size", str(self.claimed))
        handler.send_header("Content-Type", "application/octet-stream")
        handler.end_headers()
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            handler.wfile.write(body)


class EchoHub(HubProxy):
    """FAKE (olah echoes nothing): every request is answered ``400`` with all its headers — the
    ``Authorization`` header among them — in ``X-Error-Message`` and in a JSON body."""

    def serve(self, handler: BaseHTTPRequestHandler) -> bool:
        echoed = "; ".join(f"{k}: {v}" for k, v in handler.headers.items())
        body = json.dumps({"error": f"bad request: {echoed}", "headers": dict(handler.headers.items())}).encode()
        self.record(handler.command, handler.path, 400)
        handler.send_response(400)
        handler.send_header("X-Error-Code", "BadRequest")
        handler.send_header("X-Error-Message", f"bad request: {echoed}")
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
        return True
