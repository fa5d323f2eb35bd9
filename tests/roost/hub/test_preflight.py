"""The preflight from the Hub against a real Hub server on loopback (olah, which ignores ``Range``) and
one that honours it (``RangeHub``): what it reads of header-exact replicas gives the findings, figures,
vLLM arguments and plan of the local audit of the same files; it reads a few hundred kilobytes of
hundreds of megabytes; it answers a commit it read before with no network at all.

The replicas are shrunk (4 layers, a 4,096-row vocabulary, 2 vision blocks: ``support.hub_faults.shrink``)
so that publishing them and olah's reading of each file before its first byte stay within seconds;
their tensor names, dtypes and per-layer shapes are the real ones.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from support import replicas
from support.hub import HubProxy, RangeHub
from support.hub_faults import CutHeaderHub, MissingFileHub, SilentHub, SizeLieHub, shrink

from roost.checkpoint.model import header_digest, read_checkpoint
from roost.checkpoint.safetensors_header import INDEX_NAME
from roost.errors import StageFailed, UserError
from roost.hosts import SPARK
from roost.hub._retries import RetryPolicy
from roost.hub.mirror import HubMirror
from roost.hub.preflight import FIRST_READ, HubRef, Preflight, is_hub_url, parse_hub_url, preflight
from roost.hub.publish import publish_repo
from roost.net import free_port
from roost.plan.inputs import PlanInputs
from roost.plan.preflight import plan_checkpoint
from roost.plan.report import AuditReport, audit_for_host
from roost.settings import repo_dir_name

NVFP4 = "acme/nvfp4-mtp"
"""ModelOpt mixed precision MoE with MTP and a vision tower; one shard's header is over 64 KiB."""
BROKEN = "acme/nvfp4-broken"
"""The same export with one expert's weight_scale and the whole MTP head left out."""
MISSING = "acme/tiny-missing"
"""Three shards in the index, the second one not in the repository."""
TINY = "acme/tiny"
REPOS = (NVFP4, BROKEN, MISSING)
FAST = RetryPolicy(attempts=2, base_s=0.01, cap_s=0.02)


@dataclass
class PreflightHub:
    mirror: HubMirror
    mirrors_root: Path
    sources: dict[str, Path]
    commits: dict[str, str]

    @property
    def endpoint(self) -> str:
        return self.mirror.endpoint


def _broken_spec() -> replicas.ReplicaSpec:
    spec = shrink(replicas.nvfp4_moe_mtp(layers=4, experts=8, num_shards=2), vocab=4096, vision_depth=2)
    gone = "model.language_model.layers.1.mlp.experts.3.down_proj.weight_scale"
    spec.tensors = [t for t in spec.tensors if t[0] != gone and not t[0].startswith("mtp.")]
    return spec


@pytest.fixture(scope="module")
def hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PreflightHub]:
    base = tmp_path_factory.mktemp("preflight-hub")
    specs = {
        NVFP4: shrink(replicas.nvfp4_moe_mtp(layers=4, experts=16, num_shards=2), vocab=4096, vision_depth=2),
        BROKEN: _broken_spec(),
        MISSING: replicas.tiny_qwen3(num_shards=3),
        TINY: replicas.tiny_qwen3(num_shards=2),
    }
    # each source directory is named as the preflight names the repository (org--name), so the served
    # model name in the vLLM arguments is the same for both
    sources = {repo: replicas.write_replica(spec, base / "src" / repo_dir_name(repo)) for repo, spec in specs.items()}
    (sources[MISSING] / "model-00002-of-00003.safetensors").unlink()
    mirrors = base / "mirrors"
    commits = {repo: publish_repo(src, mirrors, repo, lfs_store="hardlink") for repo, src in sources.items()}
    with HubMirror(mirrors, workdir=base / "olah") as mirror:
        yield PreflightHub(mirror, mirrors, sources, commits)


@pytest.fixture(scope="module")
def range_hub(hub: PreflightHub) -> Iterator[RangeHub]:
    with RangeHub(hub.endpoint, hub.mirrors_root) as rh:
        yield rh


def _normalised(doc: dict[str, Any], location: str) -> dict[str, Any]:
    """A report's JSON without its timing and Hub fields, its location written as ``<ckpt>``."""
    text = json.dumps({k: v for k, v in doc.items() if k not in ("audit_seconds", "repo_id", "commit", "bytes_fetched")})
    out: dict[str, Any] = json.loads(text.replace(location, "<ckpt>"))
    return out


def _local_and_remote(hub: PreflightHub, repo: str, endpoint: str, cache: Path) -> tuple[Preflight, AuditReport, AuditReport]:
    pf = preflight(HubRef(repo_id=repo), endpoint=endpoint, cache_root=cache, retry=FAST)
    return pf, audit_for_host(hub.sources[repo], SPARK), audit_for_host(pf.files, SPARK)


EXPECTED_FINDINGS = {
    NVFP4: [("MTP_PRESENT", "info"), ("VISION_TOWER_PRESENT", "info")],
    BROKEN: [("MTP_ADVERTISED_NOT_SHIPPED", "warning"), ("VISION_TOWER_PRESENT", "info"), ("NVFP4_INCOMPLETE", "error")],
    MISSING: [("MISSING_SHARD", "error"), ("LAYER_INCOMPLETE", "error")],
}


@pytest.mark.parametrize("server", ["olah", "range"])
@pytest.mark.parametrize("repo", REPOS)
def test_preflight_equals_the_local_audit(hub: PreflightHub, range_hub: RangeHub, tmp_path: Path, repo: str,
                                         server: str) -> None:
    """Findings (code, severity, message), every figure, the vLLM arguments and the plan: identical."""
    endpoint = hub.endpoint if server == "olah" else range_hub.endpoint
    pf, local, remote = _local_and_remote(hub, repo, endpoint, tmp_path / "cache")
    src = hub.sources[repo]
    assert (pf.repo_id, pf.revision, pf.commit, pf.stats.cached) == (repo, "main", hub.commits[repo], False)
    assert remote.path == f"hf://{repo}@{hub.commits[repo]}"
    assert [(f.code, f.severity) for f in remote.findings] == EXPECTED_FINDINGS[repo]
    assert _normalised(remote.to_json(), remote.path) == _normalised(local.to_json(), str(src))
    assert remote.vllm_args == local.vllm_args and "--served-model-name" in remote.vllm_args
    for inputs in (PlanInputs(kv_cache_memory_bytes=2 * 1024**3), PlanInputs(kv_cache_memory_bytes=1024**2),
                   PlanInputs(kv_cache_memory_bytes=2 * 1024**3, max_model_len=4096)):
        plan_local = plan_checkpoint(local, SPARK, inputs)
        plan_remote = plan_checkpoint(remote, SPARK, inputs)
        assert _normalised(plan_remote.to_json(), remote.path) == _normalised(plan_local.to_json(), str(src))
        assert (plan_remote.refusal() is None) == (plan_local.refusal() is None)
    # what was read: every shard's header, not a byte of tensor data; a small fraction of the weights
    shards_on_disk = sorted(p.name for p in src.glob("*.safetensors"))
    assert sorted(pf.files.shards) == shards_on_disk and pf.stats.shards == len(shards_on_disk)
    for name, shard in pf.files.shards.items():
        raw = (src / name).read_bytes()[: 8 + len(shard.header)]
        assert int.from_bytes(raw[:8], "little") == len(shard.header) and raw[8:] == shard.header
        assert shard.size == (src / name).stat().st_size
    assert pf.stats.weight_bytes == sum((src / n).stat().st_size for n in shards_on_disk)
    least = sum(8 + len(s.header) for s in pf.files.shards.values())  # (RangeHub gzips the metadata files)
    assert least <= pf.bytes_fetched < pf.stats.weight_bytes / (100 if repo != MISSING else 2)


def test_a_header_over_64_kib_takes_a_second_range(hub: PreflightHub, range_hub: RangeHub, tmp_path: Path) -> None:
    """RangeHub: every shard request is a 206; what the server sent of each shard is what the client
    asked for (64 KiB, or the length prefix + header when that is longer); ``bytes_fetched`` is those
    bytes plus the metadata files and the two API answers (refs, tree listing)."""
    range_hub.requests.clear()
    range_hub.served.clear()
    pf = preflight(HubRef(repo_id=NVFP4), endpoint=range_hub.endpoint, cache_root=tmp_path / "cache", retry=FAST)
    commit = hub.commits[NVFP4]
    shard_requests = [r for r in range_hub.requests if ".safetensors " in r]
    assert shard_requests and all(r.endswith(" 206") for r in shard_requests)
    long_headers = [n for n, s in pf.files.shards.items() if 8 + len(s.header) > FIRST_READ]
    assert long_headers, "the fixture must have a shard whose header does not fit the first range"
    for name, shard in pf.files.shards.items():
        assert range_hub.served[name] == max(FIRST_READ, 8 + len(shard.header)), name
        assert sum(f"/{name} " in r for r in shard_requests) == (2 if name in long_headers else 1)
    with httpx.Client() as c:  # the API answers, read as the client reads them (the proxy forwards olah's)
        api = sum(c.get(f"{range_hub.endpoint}{p}", params=q, follow_redirects=True).num_bytes_downloaded
                  for p, q in ((f"/api/models/{NVFP4}/refs", None),
                               (f"/api/models/{NVFP4}/tree/{commit}", {"recursive": "false", "expand": "false"})))
    assert pf.bytes_fetched == sum(range_hub.served.values()) + api
    assert set(range_hub.served) == {*pf.files.shards, "config.json", INDEX_NAME}


def test_the_missing_shard_is_never_asked_for(hub: PreflightHub, tmp_path: Path) -> None:
    with HubProxy(hub.endpoint) as proxy:
        pf = preflight(HubRef(repo_id=MISSING), endpoint=proxy.endpoint, cache_root=tmp_path / "c", retry=FAST)
    assert sorted(pf.files.shards) == ["model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"]
    assert not any("model-00002-of-00003" in r for r in proxy.requests)
    index = json.loads((hub.sources[MISSING] / INDEX_NAME).read_text())["weight_map"]
    named = sum(1 for s in index.values() if s == "model-00002-of-00003.safetensors")
    assert named > 0 and read_checkpoint(pf.files).missing_shards == {"model-00002-of-00003.safetensors": named}


# --- the cache ------------------------------------------------------------------------------------


def test_a_commit_read_before_needs_no_network(hub: PreflightHub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    commit = hub.commits[TINY]
    first = preflight(HubRef(repo_id=TINY, revision=commit), endpoint=hub.endpoint, cache_root=cache)
    assert not first.stats.cached and first.bytes_fetched > 0 and first.commit == commit
    dead = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    again = preflight(HubRef(repo_id=TINY, revision=commit), endpoint=dead, cache_root=cache)
    assert (again.stats.cached, again.bytes_fetched, again.commit) == (True, 0, commit)
    assert again.files == first.files and again.header_digests() == first.header_digests()
    assert _normalised(audit_for_host(again.files, SPARK).to_json(), again.files.location) == \
        _normalised(audit_for_host(first.files, SPARK).to_json(), first.files.location)

    # a branch costs one refs call, and answers from the cache of the commit it resolves to
    with HubProxy(hub.endpoint) as proxy:
        branch = preflight(HubRef(repo_id=TINY, revision="main"), endpoint=proxy.endpoint, cache_root=cache)
    assert proxy.requests == [f"GET /api/models/{TINY}/refs 200"]
    assert branch.stats.cached and branch.commit == commit and 0 < branch.bytes_fetched < 1000

    # HF_HUB_OFFLINE: the commit the branch last resolved to, no network
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    offline = preflight(HubRef(repo_id=TINY, revision="main"), endpoint=dead, cache_root=cache)
    assert (offline.stats.cached, offline.bytes_fetched, offline.commit) == (True, 0, commit)
    with pytest.raises(UserError, match=r"HF_HUB_OFFLINE is set and acme/tiny@v9 was never preflighted"):
        preflight(HubRef(repo_id=TINY, revision="v9"), endpoint=dead, cache_root=cache)


def test_a_cold_cache_reads_the_hub_again(hub: PreflightHub, tmp_path: Path) -> None:
    """Another cache root (another machine) reads everything again; the answer is the same."""
    a = preflight(HubRef(repo_id=TINY), endpoint=hub.endpoint, cache_root=tmp_path / "a")
    b = preflight(HubRef(repo_id=TINY), endpoint=hub.endpoint, cache_root=tmp_path / "b")
    assert not a.stats.cached and not b.stats.cached and a.files == b.files and b.bytes_fetched == a.bytes_fetched


# --- the header the download must match -------------------------------------------------------------


def test_a_shard_rewritten_after_the_preflight_is_header_changed(hub: PreflightHub, tmp_path: Path) -> None:
    pf = preflight(HubRef(repo_id=TINY), endpoint=hub.endpoint, cache_root=tmp_path / "c")
    local = tmp_path / repo_dir_name(TINY)
    shutil.copytree(hub.sources[TINY], local)
    expected = pf.header_digests()
    assert set(expected) == {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
    same = audit_for_host(local, SPARK, expected_headers=expected)
    assert read_checkpoint(local, expected).header_changed == []
    assert "HEADER_CHANGED" not in {f.code for f in same.findings} and not same.has_errors

    # the same tensors at the same offsets, under a header whose __metadata__ says something else
    shard = local / "model-00002-of-00002.safetensors"
    body = shard.read_bytes()
    n = int.from_bytes(body[:8], "little")
    doc = json.loads(body[8 : 8 + n])
    doc["__metadata__"] = {**doc.get("__metadata__", {}), "rewritten": "after the preflight"}
    header = json.dumps(doc).encode()
    shard.write_bytes(len(header).to_bytes(8, "little") + header + body[8 + n :])
    assert header_digest(header) != expected[shard.name]
    changed = audit_for_host(local, SPARK, expected_headers=expected)
    assert [(f.code, f.severity) for f in changed.findings if f.code == "HEADER_CHANGED"] == [("HEADER_CHANGED", "error")]
    assert shard.name in next(f.message for f in changed.findings if f.code == "HEADER_CHANGED")
    assert read_checkpoint(local, expected).header_changed == [shard.name]
    # without the preflight's digests the rewritten shard is a valid checkpoint
    assert not audit_for_host(local, SPARK).has_errors


# --- faults ----------------------------------------------------------------------------------------


def test_connection_closed_mid_header_is_retried_then_unreachable(hub: PreflightHub, tmp_path: Path) -> None:
    name = "model-00001-of-00002.safetensors"
    body = (hub.sources[TINY] / name).read_bytes()
    n = int.from_bytes(body[:8], "little")
    said = (r"reading the header of model-00001-of-00002\.safetensors in acme/tiny@[0-9a-f]{12}: 2 attempts failed, "
            r"last with RemoteProtocolError: peer closed connection")
    with CutHeaderHub(hub.endpoint, name, body, cut=8 + n // 2) as fake, pytest.raises(StageFailed, match=said) as err:
        preflight(HubRef(repo_id=TINY), endpoint=fake.endpoint, cache_root=tmp_path / "c", retry=FAST)
    assert fake.attempts == 2 and err.value.exit_code == 1
    assert not (tmp_path / "c" / "acme--tiny" / hub.commits[TINY]).exists()  # nothing half-read is cached


def test_a_listed_shard_answering_404(hub: PreflightHub, tmp_path: Path) -> None:
    name = "model-00002-of-00002.safetensors"
    with MissingFileHub(hub.endpoint, name) as fake, pytest.raises(UserError) as err:
        preflight(HubRef(repo_id=TINY), endpoint=fake.endpoint, cache_root=tmp_path / "c", retry=FAST)
    assert fake.attempts == 1  # a 404 is an answer, not a fault worth retrying
    assert str(err.value) == (f"{name} is listed in {TINY}@{hub.commits[TINY]} but {fake.endpoint} answered HTTP 404 "
                              "for it: check the revision, or report the broken repository to its owner")


def test_a_server_answering_ranges_with_short_slices_is_asked_for_the_rest(hub: PreflightHub, tmp_path: Path) -> None:
    """HTTP lets a server answer ``bytes=0-65535`` with fewer bytes (a ``206`` naming the slice it sent):
    the rest of the length prefix and header is asked for with further ranges, never given up on."""
    name = "model-00001-of-00002.safetensors"
    header_end = 8 + int.from_bytes((hub.sources[TINY] / name).read_bytes()[:8], "little")
    with RangeHub(hub.endpoint, hub.mirrors_root, slice_bytes=header_end // 3 + 1) as short:
        pf = preflight(HubRef(repo_id=TINY), endpoint=short.endpoint, cache_root=tmp_path / "c", retry=FAST)
        gets = [(r, st) for p, r, st in short.gets if p == name]
    assert pf.files.shards[name].header == (hub.sources[TINY] / name).read_bytes()[8:header_end]
    assert len(gets) == 3 and all(st == 206 for _, st in gets)  # three slices, no retry
    assert gets[0][0] == f"bytes=0-{FIRST_READ - 1}"


def test_an_x_linked_size_against_the_listing_is_refused(hub: PreflightHub, tmp_path: Path) -> None:
    name = "model-00001-of-00002.safetensors"
    body = (hub.sources[TINY] / name).read_bytes()
    with SizeLieHub(hub.endpoint, name, body, len(body) + 1, "x-linked-size") as lie, pytest.raises(UserError) as err:
        preflight(HubRef(repo_id=TINY), endpoint=lie.endpoint, cache_root=tmp_path / "c", retry=FAST)
    assert f"/{name}: the server says the file holds {len(body) + 1:,} bytes (X-Linked-Size) but the listing says " \
           f"{len(body):,}" in str(err.value)
    assert not (tmp_path / "c" / "acme--tiny" / hub.commits[TINY]).exists()


def test_a_hub_that_never_answers_bounds_the_preflight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_DOWNLOAD_TIMEOUT", "1")
    with SilentHub() as silent:
        t0 = time.monotonic()
        with pytest.raises(StageFailed) as err:
            preflight(HubRef(repo_id=TINY), endpoint=silent.endpoint, cache_root=tmp_path / "c", retry=FAST)
        took = time.monotonic() - t0
    assert str(err.value).startswith(f"preflight: listing refs of {TINY}: nothing answered at {silent.endpoint} "
                                     "(ReadTimeout")
    assert took < 10 and silent.accepted == FAST.unanswered_attempts


@pytest.mark.parametrize("url", ["hf://acme", "hf://acme/", "hf:///tiny", "hf://acme/tiny/extra", "hf://acme/tiny@",
                                 "hf://acme/tiny@a@b", "hf://acme/ti ny", "hf://acme/tiny.", "hf://acme/ti..ny",
                                 "hf://-acme/tiny", "hf://acme/tiny@main extra"])
def test_bad_hub_urls(url: str) -> None:
    assert is_hub_url(url)
    with pytest.raises(UserError, match=r"is not a Hub repository URL: write hf://OWNER/NAME"):
        parse_hub_url(url)


def test_good_hub_urls() -> None:
    assert parse_hub_url("hf://Qwen/Qwen3-0.6B") == HubRef(repo_id="Qwen/Qwen3-0.6B", revision="main")
    assert parse_hub_url("hf://acme/m.v2@refs/pr/1") == HubRef(repo_id="acme/m.v2", revision="refs/pr/1")
    assert str(parse_hub_url("hf://a/b@" + "0" * 40)) == "hf://a/b@" + "0" * 40
    assert not is_hub_url("/models/acme--tiny")


def test_a_revision_git_would_not_accept_is_a_user_error_naming_the_form() -> None:
    """``hf://OWNER/NAME@bad..ref`` is refused as the URL's shape (one line, exit 2), before any request."""
    with pytest.raises(UserError, match="is not a Hub repository URL"):
        parse_hub_url("hf://acme/model@bad..ref")

