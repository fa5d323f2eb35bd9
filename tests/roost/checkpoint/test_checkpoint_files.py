"""``LocalFiles`` and ``FetchedFiles`` answer the audit alike: the same checkpoint read from a directory
or from what a preflight fetched (headers and metadata in memory) gives the same figures; a corrupt
fetched header names the file by its Hub location; ``expected_headers`` flags any other header."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import replicas

from roost.checkpoint.files import METADATA_NAMES, FetchedFiles, LocalFiles, RemoteShard
from roost.checkpoint.model import header_digest, read_checkpoint
from roost.checkpoint.safetensors_header import HeaderError
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
