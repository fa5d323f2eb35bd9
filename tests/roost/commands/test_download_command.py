"""``roost download`` end to end against a real olah (HF_ENDPOINT): exit 0 / 1 / 2 and the JSON contract."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.cli import ROOST
from support.hub import local_hub, shard_name, write_checkpoint_files

from roost.hub.mirror import HubMirror
from roost.hub.publish import lfs_object_path, mirror_repo_path, publish_repo
from roost.units import format_bytes


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HubMirror, str]]:
    base = tmp_path_factory.mktemp("cli-hub")
    src = write_checkpoint_files(base / "src", shard_sizes=[2_000_000, 500_000], seed=11)
    with local_hub(base / "mirrors", {"acme/cli-model": src}) as (mirror, commits):
        yield mirror, commits["acme/cli-model"]


FILES = sorted([  # roost.hub.patterns: everything but original/*.pth and .gitattributes
    "README.md", "chat_template.jinja", "config.json", "generation_config.json", "model.safetensors.index.json",
    shard_name(1, 2), shard_name(2, 2), "tokenizer.json", "tokenizer_config.json",
])


def roost_download(
    endpoint: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, "HF_ENDPOINT": endpoint, **(env or {})}
    full_env.pop("HF_TOKEN", None)
    return subprocess.run([ROOST, "download", *args], env=full_env, capture_output=True, text=True, timeout=300)


def test_json_contract_then_cached(hub: tuple[HubMirror, str], tmp_path: Path) -> None:
    mirror, commit = hub
    first = roost_download(mirror.endpoint, "acme/cli-model", "--local-dir", str(tmp_path), "--json")
    assert first.returncode == 0, first.stderr
    out = json.loads(first.stdout)
    assert out.keys() == {
        "repo_id", "revision", "commit", "local_dir", "files", "bytes", "cached",
        "downloaded_bytes", "hashed_bytes", "seconds", "endpoint",
    }
    assert out["repo_id"] == "acme/cli-model" and out["commit"] == commit and out["cached"] is False
    assert out["revision"] == "main" and out["endpoint"] == mirror.endpoint
    assert out["local_dir"] == str(tmp_path.resolve())
    assert [f["path"] for f in out["files"]] == FILES
    for f in out["files"]:
        assert f.keys() == {
            "path", "size", "sha256", "verified", "lfs", "git_oid", "source", "resumed_from", "corrupt_copy",
        }
        assert f["verified"] is True and f["source"] == "download" and f["resumed_from"] == 0
        assert f["corrupt_copy"] is None
        assert f["sha256"] == hashlib.sha256((tmp_path / f["path"]).read_bytes()).hexdigest()
    assert out["bytes"] == sum(f["size"] for f in out["files"]) == out["downloaded_bytes"] == out["hashed_bytes"]

    again = roost_download(
        mirror.endpoint, "acme/cli-model", "--revision", "main", "--local-dir", str(tmp_path), "--json"
    )
    assert again.returncode == 0 and json.loads(again.stdout)["cached"] is True
    assert "skipping download and hashing" in again.stderr


def test_default_directory_is_the_checkpoint_dir_and_the_summary_line(
    hub: tuple[HubMirror, str], tmp_path: Path
) -> None:
    mirror, commit = hub
    env_home = tmp_path / "home"
    r = roost_download(mirror.endpoint, "acme/cli-model", env={"ROOST_HOME": str(env_home)})
    assert r.returncode == 0, r.stderr
    target = env_home / "models" / "acme--cli-model"
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*") if p.is_file() and ".roost" not in p.parts) == FILES
    size = sum((target / f).stat().st_size for f in FILES)
    assert r.stdout.startswith(
        f"acme/cli-model@{commit} verified in {target}: {len(FILES)} files, {format_bytes(size)} "
        f"(fetched {format_bytes(size)}, hashed {format_bytes(size)}, "
    )


def test_a_corrupt_cached_file_is_fetched_again_and_one_the_hub_serves_wrong_exits_1(
    hub: tuple[HubMirror, str], tmp_path: Path
) -> None:
    mirror, _ = hub
    repo = "acme/cli-rots"
    src = write_checkpoint_files(tmp_path / "src", shard_sizes=[300_000], seed=12)
    publish_repo(src, mirror.mirrors_root, repo)
    dl = tmp_path / "dl"
    name = shard_name(1, 1)
    assert roost_download(mirror.endpoint, repo, "--local-dir", str(dl)).returncode == 0
    shard = dl / name
    expected = hashlib.sha256(shard.read_bytes()).hexdigest()
    data = bytearray(shard.read_bytes())
    data[10] ^= 0x01
    shard.write_bytes(bytes(data))
    found = hashlib.sha256(bytes(data)).hexdigest()

    fixed = roost_download(mirror.endpoint, repo, "--local-dir", str(dl))
    assert fixed.returncode == 0, fixed.stderr
    assert hashlib.sha256(shard.read_bytes()).hexdigest() == expected
    [line] = [line for line in fixed.stderr.splitlines() if "corrupt" in line]
    assert line.startswith(f"roost: corrupt file fetched again: {name}: sha256 expected {expected}, found {found} ")
    assert "1 corrupt file set aside and fetched again" in fixed.stdout
    assert "Traceback" not in fixed.stderr and "roost: error:" not in fixed.stderr

    # the copy on disk rots again, and so does the Hub's stored object: the file as fetched again fails, exit 1
    shard.write_bytes(bytes(data))
    obj = lfs_object_path(mirror_repo_path(mirror.mirrors_root, repo), expected)
    served = bytearray(obj.read_bytes())
    served[20] ^= 0x01
    obj.write_bytes(bytes(served))
    bad = roost_download(mirror.endpoint, repo, "--local-dir", str(dl))
    assert bad.returncode == 1 and bad.stdout == ""
    copies = sorted((dl / ".roost" / "corrupt").iterdir())  # each kept, neither over the other
    assert len(copies) == 2 and all(c.read_bytes() == bytes(data) for c in copies)
    errors = [line for line in bad.stderr.splitlines() if line.startswith("roost: error:")]
    assert len(errors) == 1
    assert (f"{name}: sha256 expected {expected}, found {hashlib.sha256(bytes(served)).hexdigest()} (as fetched "
            f"again, after the copy on disk was found changed since roost verified it (sha256 {found}); that copy "
            f"is kept at {copies[-1]})") in errors[0]
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
