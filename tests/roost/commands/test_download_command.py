"""``roost download`` end to end against a real olah (HF_ENDPOINT): exit 0 / 1 / 2 and the JSON contract."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from roost.hub.mirror import HubMirror, local_hub
from roost.hub.testing import shard_name, write_checkpoint_files

ROOST = str(Path(sys.executable).parent / "roost")


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubMirror, str]]:
    base = tmp_path_factory.mktemp("cli-hub")
    src = write_checkpoint_files(base / "src", shard_sizes=[2_000_000, 500_000], seed=11)
    with local_hub(base / "mirrors", {"acme/cli-model": src}) as (mirror, commits):
        yield mirror, commits["acme/cli-model"]


def roost_download(endpoint: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_ENDPOINT": endpoint}
    env.pop("HF_TOKEN", None)
    return subprocess.run([ROOST, "download", *args], env=env, capture_output=True, text=True, timeout=300)


def test_json_contract_then_cached(hub: tuple[HubMirror, str], tmp_path: Path) -> None:
    mirror, commit = hub
    first = roost_download(mirror.endpoint, "acme/cli-model", "--local-dir", str(tmp_path), "--json")
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert {"repo_id", "commit", "local_dir", "files", "bytes", "cached"} <= out.keys()
    assert out["repo_id"] == "acme/cli-model" and out["commit"] == commit and out["cached"] is False
    assert out["local_dir"] == str(tmp_path.resolve())
    for f in out["files"]:
        assert {"path", "size", "sha256", "verified"} <= f.keys() and f["verified"] is True
        assert f["sha256"] == hashlib.sha256((tmp_path / f["path"]).read_bytes()).hexdigest()
    assert out["bytes"] == sum(f["size"] for f in out["files"])

    again = roost_download(
        mirror.endpoint, "acme/cli-model", "--revision", "main", "--local-dir", str(tmp_path), "--json"
    )
    assert again.returncode == 0 and json.loads(again.stdout)["cached"] is True
    assert "skipping download and hashing" in again.stderr


def test_integrity_failure_exits_1_naming_the_file(hub: tuple[HubMirror, str], tmp_path: Path) -> None:
    mirror, _ = hub
    assert roost_download(mirror.endpoint, "acme/cli-model", "--local-dir", str(tmp_path)).returncode == 0
    shard = tmp_path / shard_name(2, 2)
    data = bytearray(shard.read_bytes())
    data[10] ^= 0x01
    shard.write_bytes(bytes(data))

    bad = roost_download(mirror.endpoint, "acme/cli-model", "--local-dir", str(tmp_path))
    assert bad.returncode == 1
    assert f"{shard_name(2, 2)}: sha256 expected" in bad.stderr
    assert hashlib.sha256(bytes(data)).hexdigest() in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["acme/not-there"], "repository acme/not-there does not exist"),
        (["acme/cli-model", "--revision", "nope"], "revision 'nope' does not exist in acme/cli-model"),
        (["not a repo id"], "is not of the form ORG/NAME"),
    ],
)
def test_unusable_input_exits_2_with_one_line(
    hub: tuple[HubMirror, str], tmp_path: Path, args: list[str], needle: str
) -> None:
    mirror, _ = hub
    r = roost_download(mirror.endpoint, *args, "--local-dir", str(tmp_path))
    assert r.returncode == 2
    assert needle in r.stderr and r.stderr.count("roost: error:") == 1 and "Traceback" not in r.stderr
