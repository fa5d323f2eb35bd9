"""``LocalFiles`` and ``FetchedFiles`` answer the audit alike: the same checkpoint read from a directory
or from what a preflight fetched (headers and metadata in memory) gives the same figures, and the same
hostile bytes the same one-line refusal; a corrupt fetched header names the file by its Hub location;
``expected_headers`` flags any other header. A directory's reads stay inside it (symlinks resolved; a
Hugging Face cache snapshot's links into its repository's blobs allowed) and take regular files only."""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from support import replicas
from support.errors import assert_one_line_message

from roost.checkpoint.files import METADATA_NAMES, FetchedFiles, LocalFiles, RemoteShard
from roost.checkpoint.model import header_digest, read_checkpoint
from roost.checkpoint.safetensors_header import HeaderError
from roost.errors import UserError
from roost.hosts import SPARK
from roost.plan.report import audit_for_host

LOCATION = "hf://acme/m@" + "ab" * 20


def fetched(d: Path, *, header_of: dict[str, bytes] | None = None) -> FetchedFiles:
    """What a preflight of ``d`` would hold: every top-level file's size, the metadata files, the headers."""
    shards = {}
    for p in sorted(d.glob("*.safetensors")):
        raw = p.read_bytes()
        n = int.from_bytes(raw[:8], "little")
        shards[p.name] = RemoteShard(size=p.stat().st_size, header=(header_of or {}).get(p.name, raw[8 : 8 + n]))
    return FetchedFiles(location=LOCATION, name=d.name, files={p.name: p.stat().st_size for p in d.iterdir()},
                        small={n: (d / n).read_bytes() for n in METADATA_NAMES if (d / n).is_file()}, shards=shards)


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replicas.write_replica(replicas.tiny_qwen3(num_shards=3), tmp_path_factory.mktemp("files") / "m")


def test_fetched_and_local_read_the_same_checkpoint(model: Path) -> None:
    local, remote = read_checkpoint(model), read_checkpoint(fetched(model))
    assert (remote.location, local.location) == (LOCATION, str(model))
    assert remote.name == local.name == "m"
    assert remote.shards_read == local.shards_read and remote.tensors == local.tensors
    assert remote.weight_bytes == local.weight_bytes and remote.index == local.index
    a, b = audit_for_host(fetched(model), SPARK), audit_for_host(LocalFiles(model), SPARK)
    assert a.model_dump(exclude={"path", "audit_seconds"}) == b.model_dump(exclude={"path", "audit_seconds"})


def test_a_corrupt_fetched_header_names_the_hub_file(model: Path) -> None:
    name = "model-00002-of-00003.safetensors"
    with pytest.raises(HeaderError, match=rf"^{LOCATION}/{name}: .*not valid JSON"):
        read_checkpoint(fetched(model, header_of={name: b"{oops}"}))


def test_expected_headers(model: Path) -> None:
    files = fetched(model)
    digests = {n: header_digest(s.header) for n, s in files.shards.items()}
    assert read_checkpoint(model, digests).header_changed == []
    assert read_checkpoint(model, None).header_changed == []
    other = {**digests, "model-00003-of-00003.safetensors": header_digest(b"{}")}
    assert read_checkpoint(model, other).header_changed == ["model-00003-of-00003.safetensors"]
    lacking = {k: v for k, v in digests.items() if k != "model-00001-of-00003.safetensors"}
    assert read_checkpoint(model, lacking).header_changed == ["model-00001-of-00003.safetensors"]
    report = audit_for_host(model, SPARK, expected_headers=other)
    assert [(f.code, f.severity) for f in report.findings] == [("HEADER_CHANGED", "error")]
    assert "model-00003-of-00003.safetensors" in report.findings[0].message and str(model) in report.findings[0].message


# ------------------------------------------------- what a directory holds in a file's place, and symlinks


def _copy(model: Path, dest: Path) -> Path:
    shutil.copytree(model, dest)
    return dest


def _one_line_error(d: Path | FetchedFiles) -> str:
    with pytest.raises(UserError) as e:
        read_checkpoint(d)
    return assert_one_line_message(e.value)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json", "hf_quant_config.json",
                                  "model-00002-of-00003.safetensors"])
@pytest.mark.parametrize("kind", ["a directory", "a FIFO (named pipe)"])
def test_a_directory_or_fifo_in_a_files_place_is_named(model: Path, tmp_path: Path, name: str, kind: str) -> None:
    """Not "not found" (the old answer), and a FIFO is never opened for a blocking read (it would wait for a writer)."""
    d = _copy(model, tmp_path / "m")
    (d / name).unlink(missing_ok=True)
    if kind == "a directory":
        (d / name).mkdir()
    else:
        os.mkfifo(d / name)
    msgs: list[str] = []
    worker = threading.Thread(target=lambda: msgs.append(_one_line_error(d)), daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert not worker.is_alive(), "reading the checkpoint waited on the FIFO"
    assert msgs and msgs[0].startswith(f"{d / name} is {kind}, not a regular file"), msgs


def test_a_dangling_shard_symlink_is_named(model: Path, tmp_path: Path) -> None:
    d = _copy(model, tmp_path / "m")
    (d / "model-00001-of-00003.safetensors").unlink()
    (d / "model-00001-of-00003.safetensors").symlink_to(tmp_path / "gone.safetensors")
    assert "model-00001-of-00003.safetensors: a symlink to nothing" in _one_line_error(d)


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json", "model-00003-of-00003.safetensors"])
def test_a_symlink_leading_outside_the_checkpoint_is_refused(model: Path, tmp_path: Path, name: str) -> None:
    """The index's text check for ``../`` does not see symlinks: every file read is resolved first."""
    d = _copy(model, tmp_path / "m")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (d / name).rename(outside / name)
    (d / name).symlink_to(outside / name)
    msg = _one_line_error(d)
    assert msg.startswith(f"{d / name}: leads to {outside / name}, outside the checkpoint directory {d}")


def test_a_symlinked_subdirectory_is_resolved_too(model: Path, tmp_path: Path) -> None:
    """``sub/x.safetensors`` passes the index's text check; ``sub`` linking out of the directory does not."""
    d = _copy(model, tmp_path / "m")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (d / "model-00003-of-00003.safetensors").rename(outside / "x.safetensors")
    (d / "sub").symlink_to(outside)
    index = json.loads((d / "model.safetensors.index.json").read_text())
    index["weight_map"] = {k: "sub/x.safetensors" if v.endswith("00003.safetensors") else v
                           for k, v in index["weight_map"].items()}
    (d / "model.safetensors.index.json").write_text(json.dumps(index))
    assert "sub/x.safetensors: leads to " in _one_line_error(d)


def test_symlinks_within_the_checkpoint_are_followed(model: Path, tmp_path: Path) -> None:
    d = _copy(model, tmp_path / "m")
    (d / "real").mkdir()
    for name in ("config.json", "model-00002-of-00003.safetensors"):
        (d / name).rename(d / "real" / name)
        (d / name).symlink_to(Path("real") / name)
    assert read_checkpoint(d).tensors == read_checkpoint(model).tensors


def _hf_cache(model: Path, root: Path, *, blob_dir: Path | None = None) -> Path:
    """``model`` laid out as the Hugging Face cache does: ``models--acme--m/snapshots/<rev>/<file>`` symlinks
    to ``../../blobs/<hash>`` (or to ``blob_dir``, when given)."""
    repo = root / "hub" / "models--acme--m"
    snap = repo / "snapshots" / ("ab" * 20)
    snap.mkdir(parents=True)
    blobs = blob_dir or repo / "blobs"
    blobs.mkdir(parents=True, exist_ok=True)
    for i, f in enumerate(sorted(model.iterdir())):
        shutil.copy(f, blobs / f"{i:064x}")
        (snap / f.name).symlink_to(os.path.relpath(blobs / f"{i:064x}", snap))
    return snap


def test_a_hugging_face_cache_snapshot_is_a_checkpoint(model: Path, tmp_path: Path) -> None:
    """Its files are symlinks to ``../../blobs/``: inside the repository's cache directory, so allowed."""
    snap = _hf_cache(model, tmp_path)
    assert all((snap / n).is_symlink() for n in ("config.json", "model-00001-of-00003.safetensors"))
    ck = read_checkpoint(snap)
    assert ck.tensors == read_checkpoint(model).tensors and ck.shards_read == read_checkpoint(model).shards_read
    assert ck.name == "acme--m"  # the repository's, as a preflight names it; not the revision's hash
    link = tmp_path / "link-to-snapshot"  # reached through a symlink to the snapshot: the same boundary
    link.symlink_to(snap)
    assert read_checkpoint(link).tensors == ck.tensors


def test_a_cache_snapshot_linking_out_of_its_repository_is_refused(model: Path, tmp_path: Path) -> None:
    snap = _hf_cache(model, tmp_path, blob_dir=tmp_path / "other-repo-blobs")
    msg = _one_line_error(snap)
    assert "outside the checkpoint directory" in msg and msg.endswith("copy the file into the checkpoint or remove the link")
    assert str(tmp_path / "hub" / "models--acme--m") in msg


# ------------------------------------ a directory and a Hub preflight refuse the same bytes the same way


def _fetched_from_bytes(files: dict[str, bytes]) -> FetchedFiles:
    shards = {}
    for n, b in files.items():
        if n.endswith(".safetensors"):
            k = int.from_bytes(b[:8], "little")
            shards[n] = RemoteShard(size=len(b), header=b[8: 8 + k])
    return FetchedFiles(location=LOCATION, name="m", files={n: len(b) for n, b in files.items()},
                        small={n: b for n, b in files.items() if n in METADATA_NAMES}, shards=shards)


def _config_with(model: Path, **fields: object) -> bytes:
    return json.dumps(json.loads((model / "config.json").read_bytes()) | fields).encode()


HOSTILE: dict[str, tuple[str, Callable[[Path], bytes]]] = {
    "num_hidden_layers 2**64": ("config.json", lambda m: _config_with(m, num_hidden_layers=2**64)),
    "5000 digits": ("config.json", lambda m: _config_with(m, num_hidden_layers=7).replace(b": 7", b": " + b"9" * 5000)),
    "nested 100000 deep": ("config.json", lambda m: b"[" * 100_000 + b"]" * 100_000),
    "rope_scaling x": ("config.json", lambda m: _config_with(m, rope_scaling="x")),
    "3 KV heads of 16": ("config.json", lambda m: _config_with(m, num_attention_heads=16, num_key_value_heads=3)),
    "index traversal": ("model.safetensors.index.json",
                        lambda m: json.dumps({"weight_map": {"a": "../../etc/x.safetensors"}}).encode()),
    "index nested": ("model.safetensors.index.json",
                     lambda m: b'{"weight_map": {}, "m": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"),
    "shape is a string": ("model-00001-of-00003.safetensors", lambda m: _shard_with_shape(m, "")),
    "F4 shape past a float": ("model-00001-of-00003.safetensors", lambda m: _shard_with_shape(m, [2**63 - 1] * 20, "F4")),
}


def _shard_with_shape(model: Path, shape: object, dtype: str | None = None) -> bytes:
    b = (model / "model-00001-of-00003.safetensors").read_bytes()
    k = int.from_bytes(b[:8], "little")
    header = json.loads(b[8: 8 + k])
    name = next(n for n in header if n != "__metadata__")
    header[name]["shape"] = shape
    header[name]["dtype"] = dtype or header[name]["dtype"]
    raw = json.dumps(header).encode()
    return len(raw).to_bytes(8, "little") + raw + b[8 + k:]


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_local_and_fetched_refuse_alike(model: Path, tmp_path: Path, case: str) -> None:
    """``roost audit DIR`` and ``roost audit hf://...`` (FetchedFiles) parse with the same functions: the same
    hostile bytes are the same one-line refusal, naming the file where each found it."""
    name, make = HOSTILE[case]
    d = _copy(model, tmp_path / "m")
    (d / name).write_bytes(make(model))
    local = _one_line_error(d)
    remote = _one_line_error(_fetched_from_bytes({p.name: p.read_bytes() for p in d.iterdir()}))
    assert local.startswith(f"{d / name}: ") and remote.startswith(f"{LOCATION}/{name}: ")
    assert local.removeprefix(str(d)) == remote.removeprefix(LOCATION)
