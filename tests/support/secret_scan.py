"""Looking for planted secrets everywhere roost may have put them: files (decoded where they are
compressed), Prefect's API, process command lines, ``docker inspect`` output.

Each secret is looked for in every form a leak may take: as it is, URL-encoded (``%XX``, and ``+``
for spaces), JSON-escaped, and base64 (standard and URL-safe alphabets, at each of the three
alignments it can have inside a longer encoded text: ``Authorization: Basic``, a data URI, an
encoded header dump), so an echoed, quoted or encoded copy is found as surely as a plain one.

    scan = SecretScan({"hf token": token, "vllm key": key})
    scan.tree("results", results_dir)           # Parquet decoded, gzip/bz2/xz decompressed
    scan.text("roost run stdout", res.stdout)
    assert not scan.hits, scan.report()
    print(scan.report())                        # where it looked, how many bytes, what it found
"""

from __future__ import annotations

import base64
import bz2
import gzip
import json
import lzma
import os
import re
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

GZIP, BZ2, XZ, ZSTD = b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00", b"\x28\xb5\x2f\xfd"
PARQUET = b"PAR1"


def base64_cores(raw: bytes) -> dict[str, bytes]:
    """The part of ``raw``'s base64 encoding that is the same whatever surrounds it, for each alignment
    (0, 1 or 2 bytes before it in the encoded text) and alphabet: the 4-character groups made of
    ``raw``'s bytes only."""
    out: dict[str, bytes] = {}
    for k in (0, 1, 2):
        encoded = base64.b64encode(b"\0" * k + raw)
        start = 4 if k else 0  # the first group mixes in what came before
        end = (k + len(raw)) // 3 * 4  # a last, partial group depends on what comes after
        core = encoded[start:end]
        if len(core) >= 12:
            out[f"base64 (offset {k})"] = core
            out[f"base64url (offset {k})"] = core.replace(b"+", b"-").replace(b"/", b"_")
    return out


def forms(value: str) -> dict[str, bytes]:
    """Every form of ``value`` the scan looks for, by name (duplicates dropped)."""
    raw = value.encode()
    candidates = {
        "plain": raw,
        "url-encoded": quote(value, safe="").encode(),
        "form-encoded": quote_plus(value, safe="").encode(),
        "json-escaped": json.dumps(value)[1:-1].encode(),
        **base64_cores(raw),
    }
    out: dict[str, bytes] = {}
    seen: set[bytes] = set()
    for name, b in candidates.items():
        if b not in seen:
            seen.add(b)
            out[name] = b
    return out


@dataclass
class Hit:
    where: str
    secret: str
    form: str
    context: str


@dataclass
class Area:
    """One place looked at: how many items (files, rows, processes) and bytes."""

    name: str
    items: int = 0
    bytes: int = 0


@dataclass
class SecretScan:
    secrets: Mapping[str, str]
    since: float | None = None
    """When the secrets were made (epoch seconds): a file not modified since cannot hold them and is
    not read (counted apart): what earlier tests of the session left."""
    hits: list[Hit] = field(default_factory=list)
    areas: dict[str, Area] = field(default_factory=dict)
    opaque: list[str] = field(default_factory=list)
    """Files the scan could not decode (compressed in a format it does not read): looked at raw only."""
    files: list[str] = field(default_factory=list)
    """Every file read."""
    older: Area = field(default_factory=lambda: Area("files older than the secrets (not read)"))

    def __post_init__(self) -> None:
        assert all(len(v) >= 12 for v in self.secrets.values()), "plant distinctive secrets (12+ characters)"
        self._forms: dict[bytes, tuple[str, str]] = {}
        for name, value in self.secrets.items():
            for form, b in forms(value).items():
                self._forms[b] = (name, form)
        alternatives = sorted(self._forms, key=len, reverse=True)
        self._re = re.compile(b"|".join(re.escape(b) for b in alternatives))

    def _area(self, area: str) -> Area:
        return self.areas.setdefault(area, Area(area))

    def blob(self, area: str, where: str, data: bytes, *, count: bool = True) -> None:
        """Look for every secret in ``data`` (found at ``where``, counted under ``area``)."""
        a = self._area(area)
        if count:
            a.items += 1
        a.bytes += len(data)
        for m in self._re.finditer(data):
            name, form = self._forms[m.group(0)]
            lo, hi = max(0, m.start() - 60), min(len(data), m.end() + 60)
            context = (data[lo:m.start()] + b"<" + name.encode() + b">" + data[m.end():hi]).decode("utf-8", "replace")
            self.hits.append(Hit(where, name, form, context))

    def text(self, area: str, where: str, text: str) -> None:
        self.blob(area, where, text.encode("utf-8", "surrogateescape"))

    def json(self, area: str, where: str, obj: Any) -> None:
        """An object as JSON (the secrets' JSON-escaped forms cover what escaping changes)."""
        self.text(area, where, json.dumps(obj, default=str, ensure_ascii=False))

    def file(self, area: str, path: Path) -> None:
        """A file as it is, and decoded: a Parquet file's rows and metadata, a compressed file's content."""
        try:
            st = path.stat()
            if self.since is not None and st.st_mtime < self.since:
                self.older.items += 1
                self.older.bytes += st.st_size
                return
            data = path.read_bytes()
        except OSError:
            return  # gone meanwhile (a temporary file)
        self.files.append(str(path))
        self.blob(area, str(path), data)
        for where, decoded in decoded_forms(path, data, self.opaque):
            self.blob(area, where, decoded, count=False)

    def tree(self, area: str, root: Path, *, skip: Iterable[Path] = ()) -> None:
        """Every regular file under ``root`` (symlinks not followed; ``skip``: directories left out)."""
        skipped = {p.resolve() for p in skip}
        for path in walk(root, skipped):
            self.file(area, path)

    def report(self) -> str:
        lines = ["secret scan: " + ", ".join(f"{n!r} ({len(v)} chars)" for n, v in self.secrets.items())]
        total = 0
        for a in self.areas.values():
            lines.append(f"  {a.name:<44} {a.items:>7} items {a.bytes:>14,} bytes")
            total += a.bytes
        lines.append(f"  {'total':<44} {sum(a.items for a in self.areas.values()):>7} items {total:>14,} bytes")
        if self.older.items:
            lines.append(f"  {self.older.name:<44} {self.older.items:>7} items {self.older.bytes:>14,} bytes")
        if self.opaque:
            lines.append(f"  not decoded (looked at raw only): {self.opaque}")
        lines.append(f"  hits: {len(self.hits)}")
        lines += [f"    {h.secret} ({h.form}) in {h.where}: ...{h.context!r}..." for h in self.hits[:50]]
        return "\n".join(lines)


def walk(root: Path, skipped: set[Path]) -> Iterator[Path]:
    if not root.exists():
        return
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if (here / d).resolve() not in skipped]
        for name in filenames:
            p = here / name
            if p.is_file() and not p.is_symlink():
                yield p


def decoded_forms(path: Path, data: bytes, opaque: list[str]) -> list[tuple[str, bytes]]:
    """What ``data`` holds when decoded: Parquet rows (every column, as JSON) and key-value metadata;
    gzip, bzip2 or xz content (decoded again, once, if it is itself Parquet or compressed)."""
    out: list[tuple[str, bytes]] = []
    head = data[:6]
    try:
        if data[:4] == PARQUET and data[-4:] == PARQUET:
            out.append((f"{path} (rows)", parquet_text(data)))
        elif head.startswith(GZIP):
            out.append((f"{path} (gunzip)", gzip.decompress(data)))
        elif head.startswith(BZ2):
            out.append((f"{path} (bunzip2)", bz2.decompress(data)))
        elif head.startswith(XZ):
            out.append((f"{path} (unxz)", lzma.decompress(data)))
        elif head.startswith(ZSTD):
            opaque.append(str(path))
    except (OSError, EOFError, ValueError, lzma.LZMAError) as exc:
        if not head.startswith(BZ2) or path.suffix == ".bz2":  # "BZh" starts ordinary text too
            opaque.append(f"{path} ({type(exc).__name__})")
    return out


def parquet_text(data: bytes) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(pa.BufferReader(data))
    meta = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in (table.schema.metadata or {}).items()}
    return json.dumps({"metadata": meta, "rows": table.to_pylist()}, default=str, ensure_ascii=False).encode()


# --- processes ---------------------------------------------------------------------------------


def cmdlines() -> dict[int, bytes]:
    """Every process's command line now (pid -> argv joined by NUL), as ``ps`` shows them to any user."""
    out: dict[int, bytes] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    out[int(entry.name)] = f.read()
            except OSError:
                continue
    return out


class CmdlineSampler:
    """Samples every process's command line every ``interval_s`` in a thread, keeping each distinct
    (pid, command line) seen; ``sample()`` takes one more at once (call it while a server runs)."""

    def __init__(self, interval_s: float = 0.25) -> None:
        self.interval_s = interval_s
        self.seen: dict[tuple[int, bytes], None] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="cmdline-sampler", daemon=True)

    def sample(self) -> None:
        now = cmdlines()
        with self._lock:
            self.samples += 1
            for pid, cmd in now.items():
                self.seen.setdefault((pid, cmd), None)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def __enter__(self) -> CmdlineSampler:
        self.sample()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def matching(self, needle: bytes) -> list[bytes]:
        with self._lock:
            return [cmd for (_pid, cmd) in self.seen if needle in cmd]

    def scan_into(self, scan: SecretScan, *, skip: Iterable[Sequence[str]] = ()) -> None:
        """Every command line seen, but those of the argument lists in ``skip`` (processes the caller
        started with those arguments: what they hold is the caller's, not what roost put there)."""
        with self._lock:
            items = list(self.seen)
        tails = [b"\0".join(a.encode() for a in args[1:]) + b"\0" for args in skip if len(args) > 1]
        area = f"process command lines ({self.samples} samples)"
        for pid, cmd in items:
            if any(cmd.endswith(t) for t in tails):
                continue
            shown = cmd.replace(b"\0", b" ")[:120].decode("utf-8", "replace")
            scan.blob(area, f"/proc/{pid}/cmdline: {shown}", cmd)


# --- Prefect ------------------------------------------------------------------------------------


def without_secret_fields(data: Any, paths: Iterable[str]) -> Any:
    """A block document's data without the values its schema declares secret (``secret_fields``:
    dotted paths, ``*`` for every key at that level): what is left must hold no secret."""
    data = json.loads(json.dumps(data, default=str))
    for path in paths:
        _drop(data, path.split("."))
    return data


def _drop(node: Any, parts: list[str]) -> None:
    if not isinstance(node, dict) or not parts:
        return
    head, rest = parts[0], parts[1:]
    keys = list(node) if head == "*" else [head] if head in node else []
    for k in keys:
        if rest:
            _drop(node[k], rest)
        else:
            node[k] = "<secret field>"
