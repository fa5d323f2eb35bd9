"""``roost audit PATH [--host] [--json]``: the JSON contract, exit 0/1/2, and one clear line for bad input."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import replicas
from support.cli import ROOST, roost_exe
from support.contract import AUDIT_JSON_KEYS
from support.errors import assert_one_line_error
from support.hub import GatedHub
from support.hub_faults import CutHeaderHub, MissingFileHub, write_shard_file
from typer.testing import CliRunner, Result

from roost.checkpoint.writer import header_bytes
from roost.cli import app
from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo


@pytest.fixture(scope="module")
def ornith_9b(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return replicas.write_replica(replicas.ornith_9b(), tmp_path_factory.mktemp("cli") / "ornith-9b")


def run(*args: str) -> tuple[int, str, str]:
    r = CliRunner().invoke(app, list(args))
    return r.exit_code, r.stdout, r.stderr


def test_json_contract_real_entry_point(ornith_9b: Path) -> None:
    r = subprocess.run([ROOST, "audit", str(ornith_9b), "--host", "spark", "--json"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == AUDIT_JSON_KEYS
    assert (out["tensor_count"], out["index_tensor_count"], out["visual_tensor_count"], out["mtp_tensor_count"]) == (760, 760, 333, 0)
    assert round(out["decode_bytes_per_token"] / 1e9, 2) == 15.87 and round(out["decode_ceiling_tok_s"], 1) == 17.2
    assert out["kv_bytes_per_token"] == 32768
    assert [(f["code"], f["severity"]) for f in out["findings"]] == [
        ("MTP_ADVERTISED_NOT_SHIPPED", "warning"), ("VISION_TOWER_PRESENT", "info")]
    assert all(list(f) == ["code", "severity", "message"] for f in out["findings"])
    assert out["vllm_args"] == ["--served-model-name", "ornith-9b", "--max-model-len", "262144",
                                "--kv-cache-memory-bytes", "8650752000"]
    assert isinstance(out["vllm_args"], list) and all(isinstance(a, str) for a in out["vllm_args"])


def test_human_summary(ornith_9b: Path) -> None:
    code, out, _ = run("audit", str(ornith_9b))
    assert code == 0
    assert "decode reads 15.87 GB/token -> ceiling 17.2 tok/s on spark" in out
    assert "MTP_ADVERTISED_NOT_SHIPPED" in out


def _single_shard(d: Path, body: bytes) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    spec = replicas.tiny_qwen3(layers=1, num_shards=1)
    replicas.write_replica(spec, d)
    (d / "model.safetensors").write_bytes(body)
    return d


def test_truncated_file(tmp_path: Path) -> None:
    d = _single_shard(tmp_path / "m", b"\x05\x00")
    assert_one_line_error(*run("audit", str(d))[::2], "model.safetensors", "truncated")


def test_header_length_larger_than_file(tmp_path: Path) -> None:
    d = _single_shard(tmp_path / "m", (1 << 40).to_bytes(8, "little") + b"{}")
    assert_one_line_error(*run("audit", str(d))[::2], "larger than the file allows")


def test_non_json_header(tmp_path: Path) -> None:
    d = _single_shard(tmp_path / "m", (6).to_bytes(8, "little") + b"{oops}")
    assert_one_line_error(*run("audit", str(d))[::2], "not valid JSON")


def test_unknown_dtype(tmp_path: Path) -> None:
    h = json.dumps({"w": {"dtype": "Q7", "shape": [2], "data_offsets": [0, 2]}}).encode()
    d = _single_shard(tmp_path / "m", len(h).to_bytes(8, "little") + h + b"\0\0")
    assert_one_line_error(*run("audit", str(d))[::2], "unknown dtype 'Q7'")


def test_offsets_out_of_range(tmp_path: Path) -> None:
    h = json.dumps({"w": {"dtype": "U8", "shape": [64], "data_offsets": [0, 64]}}).encode()
    d = _single_shard(tmp_path / "m", len(h).to_bytes(8, "little") + h + b"\0" * 10)
    assert_one_line_error(*run("audit", str(d))[::2], "run past the data section")


def test_overlapping_offsets(tmp_path: Path) -> None:
    h = json.dumps({"a": {"dtype": "U8", "shape": [8], "data_offsets": [0, 8]},
                    "b": {"dtype": "U8", "shape": [8], "data_offsets": [4, 12]}}).encode()
    d = _single_shard(tmp_path / "m", len(h).to_bytes(8, "little") + h + b"\0" * 12)
    assert_one_line_error(*run("audit", str(d))[::2], "'b'", "overlaps 'a'")


def test_index_naming_a_missing_shard(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.ornith_9b(), tmp_path / "m")
    (d / "model-00003-of-00004.safetensors").unlink()
    code, out, err = run("audit", str(d), "--json")
    assert code == 1
    found = {f["code"] for f in json.loads(out)["findings"]}
    assert "MISSING_SHARD" in found
    assert err.strip().startswith("roost: error: ") and "MISSING_SHARD" in err and "Traceback" not in err


def test_index_naming_a_tensor_absent_from_its_shard(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=2), tmp_path / "m")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.layers.0.self_attn.q_proj.weight"] = (
        "model-00002-of-00002.safetensors"
        if idx["weight_map"]["model.layers.0.self_attn.q_proj.weight"] == "model-00001-of-00002.safetensors"
        else "model-00001-of-00002.safetensors"
    )
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    code, out, err = run("audit", str(d))
    assert code == 1
    assert "INDEX_SHARD_MISMATCH" in out and "q_proj.weight" in out
    assert "INDEX_SHARD_MISMATCH" in err and "Traceback" not in err


def test_dot_dot_path_in_index(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=2), tmp_path / "m")
    idx = json.loads((d / "model.safetensors.index.json").read_text())
    idx["weight_map"]["model.norm.weight"] = "../../etc/passwd"
    (d / "model.safetensors.index.json").write_text(json.dumps(idx))
    assert_one_line_error(*run("audit", str(d))[::2], "'../../etc/passwd'", "outside the checkpoint directory")


def test_config_missing_required_field(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=1), tmp_path / "m")
    cfg = json.loads((d / "config.json").read_text())
    del cfg["num_attention_heads"]
    (d / "config.json").write_text(json.dumps(cfg))
    assert_one_line_error(*run("audit", str(d))[::2], "config.json", "missing field 'num_attention_heads'")


def test_config_not_json(tmp_path: Path) -> None:
    d = replicas.write_replica(replicas.llama_dense(num_shards=1), tmp_path / "m")
    (d / "config.json").write_text("{")
    assert_one_line_error(*run("audit", str(d))[::2], "config.json", "not valid JSON")


def test_empty_directory(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    assert_one_line_error(*run("audit", str(tmp_path / "empty"))[::2], "empty checkpoint directory")


def test_missing_path_and_unknown_host(tmp_path: Path, ornith_9b: Path) -> None:
    assert_one_line_error(*run("audit", str(tmp_path / "nope"))[::2], "no such directory")
    assert_one_line_error(*run("audit", str(ornith_9b), "--host", "moon")[::2], "unknown host profile 'moon'")


def test_layer_gap_exit_1(tmp_path: Path) -> None:
    spec = replicas.llama_dense(num_shards=1)
    spec.tensors = [t for t in spec.tensors if ".layers.7." not in t[0]]
    d = replicas.write_replica(spec, tmp_path / "m")
    code, out, _ = run("audit", str(d), "--json")
    assert code == 1 and any(f["code"] == "LAYER_GAP" for f in json.loads(out)["findings"])


def test_no_traceback_through_real_entry_point(tmp_path: Path) -> None:
    """The installed console script maps a corrupt shard to one line and exit 2."""
    d = tmp_path / "m"
    replicas.write_replica(replicas.tiny_qwen3(layers=1, num_shards=1), d)
    head, _ = header_bytes([("w", "BF16", (4, 4))])
    (d / "model.safetensors").write_bytes(head)  # data section missing
    r = roost_exe("audit", str(d))
    assert_one_line_error(r.returncode, r.stderr, exact=True)


# --- hf://OWNER/NAME[@REVISION]: the same audit, read from a Hub on loopback (olah) -------------------

HUB_KEYS = [*AUDIT_JSON_KEYS, "repo_id", "commit", "bytes_fetched"]


class CliHub:
    def __init__(self, mirror: HubMirror, sources: dict[str, Path], commits: dict[str, str]) -> None:
        self.mirror, self.sources, self.commits = mirror, sources, commits


@pytest.fixture(scope="module")
def cli_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CliHub]:
    base = tmp_path_factory.mktemp("cli-hub")
    sources = {
        "acme/tiny": replicas.write_replica(replicas.tiny_qwen3(num_shards=2), base / "src" / "acme--tiny"),
        "acme/tiny-missing": replicas.write_replica(replicas.tiny_qwen3(num_shards=3), base / "src" / "acme--tiny-missing"),
        "acme/too-long": write_shard_file(base / "src" / "too-long", (1 << 40).to_bytes(8, "little") + b"{}"),
        "acme/not-json": write_shard_file(base / "src" / "not-json", (6).to_bytes(8, "little") + b"{oops}"),
    }
    (sources["acme/tiny-missing"] / "model-00002-of-00003.safetensors").unlink()
    commits = {repo: publish_repo(src, base / "mirrors", repo) for repo, src in sources.items()}
    with HubMirror(base / "mirrors", workdir=base / "olah") as mirror:
        yield CliHub(mirror, sources, commits)


@pytest.fixture
def hub_env(cli_hub: CliHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """HF_ENDPOINT at the mirror, no token, a preflight cache of this test's own."""
    monkeypatch.setenv("HF_ENDPOINT", cli_hub.mirror.endpoint)
    monkeypatch.setenv("ROOST_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return dict(os.environ)


def _hub_error(r: Result, want_code: int, *fragments: str) -> str:
    """One ``roost: error:`` line on stderr, the exit code, and no exception other than the exit."""
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert_one_line_error(r.exit_code, r.stderr, *fragments, want_code=want_code)
    return r.stderr


def test_hub_json_contract_real_entry_point(cli_hub: CliHub, hub_env: dict[str, str]) -> None:
    """``roost audit hf://...@COMMIT --json``: every key of the local JSON with the same values, then the three Hub keys."""
    commit = cli_hub.commits["acme/tiny"]
    r = subprocess.run([ROOST, "audit", f"hf://acme/tiny@{commit}", "--json"], capture_output=True, text=True,
                       timeout=120, env=hub_env)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert list(out) == HUB_KEYS
    assert (out["repo_id"], out["commit"], out["path"]) == ("acme/tiny", commit, f"hf://acme/tiny@{commit}")
    weights = sum(p.stat().st_size for p in cli_hub.sources["acme/tiny"].glob("*.safetensors"))
    assert 0 < out["bytes_fetched"] < weights
    code, local_out, _ = run("audit", str(cli_hub.sources["acme/tiny"]), "--json")
    local = json.loads(local_out)
    assert code == 0 and list(local) == AUDIT_JSON_KEYS
    assert {k: out[k] for k in AUDIT_JSON_KEYS if k not in ("path", "audit_seconds")} == \
        {k: v for k, v in local.items() if k not in ("path", "audit_seconds")}


def test_hub_branch_resolves_to_its_commit_and_is_cached(cli_hub: CliHub, hub_env: dict[str, str]) -> None:
    first = CliRunner().invoke(app, ["audit", "hf://acme/tiny", "--json"])
    assert first.exit_code == 0, first.stderr
    again = CliRunner().invoke(app, ["audit", "hf://acme/tiny@main", "--json"])
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert a["commit"] == b["commit"] == cli_hub.commits["acme/tiny"]
    assert 0 < b["bytes_fetched"] < a["bytes_fetched"]  # the second costs one refs call
    human = CliRunner().invoke(app, ["audit", "hf://acme/tiny"])
    assert human.exit_code == 0 and f"hf://acme/tiny@{cli_hub.commits['acme/tiny']}: " in human.stdout
    assert "read from the Hub" in human.stdout


@pytest.mark.parametrize(("url", "code", "fragments"), [
    ("hf://acme/nope", 2, ("repository acme/nope does not exist on http://127.0.0.1:",)),
    ("hf://acme/tiny@v9", 2, ("revision 'v9' does not exist in acme/tiny (branches: main; tags: none)",)),
    ("hf://acme/tiny@abc1234", 2, ("revision 'abc1234' does not exist in acme/tiny",)),
    ("hf://acme/too-long", 2, ("hf://acme/too-long@", "/model.safetensors: header length 1,099,511,627,776 is larger "
                               "than the file allows",)),
    ("hf://acme/not-json", 2, ("hf://acme/not-json@", "/model.safetensors", "not valid JSON")),
    ("hf://acme/tiny-missing", 1, ("hf://acme/tiny-missing@", "MISSING_SHARD")),
    ("hf://acme", 2, ("'hf://acme' is not a Hub repository URL: write hf://OWNER/NAME",)),
    ("hf://acme/tiny/model.safetensors", 2, ("is not a Hub repository URL",)),
    ("hf://acme/tiny@", 2, ("is not a Hub repository URL",)),
    ("hf://acme/ti ny@main", 2, ("is not a Hub repository URL",)),
    ("hf://acme/tiny@a@b", 2, ("is not a Hub repository URL",)),
])
def test_hub_bad_input_is_one_line(hub_env: dict[str, str], url: str, code: int, fragments: tuple[str, ...]) -> None:
    _hub_error(CliRunner().invoke(app, ["audit", url]), code, *fragments)


def test_hub_missing_shard_json_still_printed(hub_env: dict[str, str]) -> None:
    r = CliRunner().invoke(app, ["audit", "hf://acme/tiny-missing", "--json"])
    out = json.loads(r.stdout)
    assert r.exit_code == 1 and out["findings"][0]["code"] == "MISSING_SHARD"
    assert out["repo_id"] == "acme/tiny-missing" and "model-00002-of-00003.safetensors" in out["findings"][0]["message"]


def test_hub_gated_without_then_with_a_token(cli_hub: CliHub, hub_env: dict[str, str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    with GatedHub(cli_hub.mirror.endpoint, "acme/tiny", token="hf_gate_test_token") as gated:
        monkeypatch.setenv("HF_ENDPOINT", gated.endpoint)
        err = _hub_error(CliRunner().invoke(app, ["audit", "hf://acme/tiny"]), 2,
                         "acme/tiny is a gated repository and no token was given (HTTP 401)")
        monkeypatch.setenv("HF_TOKEN", "hf_gate_test_token")
        ok = CliRunner().invoke(app, ["audit", "hf://acme/tiny", "--json"])
    assert "hf_gate_test_token" not in err
    assert ok.exit_code == 0, ok.stderr
    assert json.loads(ok.stdout)["commit"] == cli_hub.commits["acme/tiny"]


def test_hub_listed_shard_answering_404(cli_hub: CliHub, hub_env: dict[str, str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    with MissingFileHub(cli_hub.mirror.endpoint, "model-00001-of-00002.safetensors") as fake:
        monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
        _hub_error(CliRunner().invoke(app, ["audit", "hf://acme/tiny"]), 2,
                   "model-00001-of-00002.safetensors is listed in acme/tiny@", "answered HTTP 404 for it")


def test_hub_connection_closed_mid_header_real_entry_point(cli_hub: CliHub, hub_env: dict[str, str]) -> None:
    """FAKE server (olah sends whole files): retried with the preflight's policy (4 attempts, ~3 s),
    then one error line and exit 1; the retries are logged as warnings before it, never a traceback."""
    name = "model-00001-of-00002.safetensors"
    body = (cli_hub.sources["acme/tiny"] / name).read_bytes()
    n = int.from_bytes(body[:8], "little")
    with CutHeaderHub(cli_hub.mirror.endpoint, name, body, cut=8 + n // 2) as fake:
        r = subprocess.run([ROOST, "audit", "hf://acme/tiny"], capture_output=True, text=True, timeout=120,
                           env={**hub_env, "HF_ENDPOINT": fake.endpoint})
    assert r.returncode == 1 and fake.attempts == 4 and "Traceback" not in r.stderr
    *retries, last = r.stderr.strip().splitlines()
    assert [line.split("; retry ")[1].split(" ")[0] for line in retries] == ["1/3", "2/3", "3/3"]
    assert last.startswith("roost: error: ") and "4 attempts failed" in last and name in last
    assert "peer closed connection" in last and f"check that {fake.endpoint} is reachable" in last

