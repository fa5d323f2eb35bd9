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
"""

from __future__ import annotations

import abc
import re
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote, urlsplit

from support import replicas
from support.hub import HubProxy

__all__ = ["CutHeaderHub", "MissingFileHub", "shrink", "write_shard_file"]

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
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(self.body)))
        handler.send_header("Content-Type", "application/octet-stream")
        handler.end_headers()
        try:
            handler.wfile.write(self.body[: self.cut])
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass
        handler.close_connection = True
