"""The hostile-input corpus: what a careless or hostile user can hand roost, and what roost must answer.

Every case is one ``roost`` command line (with its environment) over generated files and fake
servers on loopback (:mod:`support.hostile_servers`). What each case promises:

- exit ``code`` (2 unusable input, 1 a check failed), never a traceback nor an "internal error";
- exit 2: exactly one stderr line, ``roost: error: ...``;
- no planted secret in anything printed;
- done within ``timeout_s`` (no hang) and within the memory bound (no unbounded read).

Placeholders in ``argv`` and ``env`` (``{ckpt}``, ``{openai}``...) name the workspace's files and
servers (:func:`build_workspace`).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLANTED_KEY = "sk-roost-planted-vllm-key-5d1e7c"
PLANTED_HF = "hf_rOoStPlAnTeDhUbToKeN0042"
PLANTED_PASSWORD = "pw-roost-planted-9f3a"
SECRETS = (PLANTED_KEY, PLANTED_HF, PLANTED_PASSWORD)


@dataclass(frozen=True)
class Case:
    id: str
    argv: tuple[str, ...]
    code: int | tuple[int, ...] = 2
    env: dict[str, str] = field(default_factory=dict)
    timeout_s: float = 20.0

    def codes(self) -> tuple[int, ...]:
        return self.code if isinstance(self.code, tuple) else (self.code,)


CASES: list[Case] = []


def case(id: str, *argv: str, code: int | tuple[int, ...] = 2, env: dict[str, str] | None = None,
         timeout_s: float = 20.0) -> None:
    assert all(c.id != id for c in CASES), id
    CASES.append(Case(id, argv, code, env or {}, timeout_s))


# ------------------------------------------------------------------------------------------ workspace

def _patch_config(d: Path, patch: dict[str, Any] | None = None, raw: bytes | None = None) -> None:
    cfg = d / "config.json"
    if raw is not None:
        cfg.write_bytes(raw)
        return
    doc = json.loads(cfg.read_text())
    doc.update(patch or {})
    cfg.write_text(json.dumps(doc))


def _patch_index(d: Path, fn: Callable[[dict[str, Any]], Any]) -> None:
    idx = d / "model.safetensors.index.json"
    doc = json.loads(idx.read_text())
    out = fn(doc)
    idx.write_text(out if isinstance(out, str) else json.dumps(out if out is not None else doc))


def _first_shard(d: Path) -> Path:
    return sorted(d.glob("*.safetensors"))[0]


def _patch_header(d: Path, fn: Callable[[dict[str, Any]], Any]) -> None:
    """Rewrite the first shard's header through ``fn`` (the data section kept as it is)."""
    s = _first_shard(d)
    b = s.read_bytes()
    n = int.from_bytes(b[:8], "little")
    h = json.loads(b[8:8 + n])
    out = fn(h)
    hb = out if isinstance(out, bytes) else json.dumps(out if out is not None else h).encode()
    s.write_bytes(len(hb).to_bytes(8, "little") + hb + b[8 + n:])


def _first_tensor(h: dict[str, Any]) -> dict[str, Any]:
    return h[next(k for k in h if k != "__metadata__")]  # type: ignore[no-any-return]


CONFIG_MUTATIONS: dict[str, dict[str, Any]] = {
    "layers-2e64": {"num_hidden_layers": 2**64},
    "layers-text": {"num_hidden_layers": "x"},
    "layers-neg": {"num_hidden_layers": -1},
    "layers-zero": {"num_hidden_layers": 0},
    "layers-bool": {"num_hidden_layers": True},
    "layers-float": {"num_hidden_layers": 1.5},
    "layers-list": {"num_hidden_layers": [2]},
    "head-dim-zero": {"head_dim": 0},
    "head-dim-neg": {"head_dim": -4},
    "heads-zero": {"num_attention_heads": 0},
    "kv-heads-zero": {"num_key_value_heads": 0},
    "kv-heads-not-divisor": {"num_key_value_heads": 3},
    "hidden-zero": {"hidden_size": 0},
    "derived-head-dim-zero": {"hidden_size": 2, "num_attention_heads": 4, "head_dim": None},
    "vocab-2e70": {"vocab_size": 2**70},
    "heads-2e63": {"num_attention_heads": 2**63},
    "window-zero": {"max_position_embeddings": 0},
    "window-1e308": {"max_position_embeddings": 1e308},
    "window-2e64": {"max_position_embeddings": 2**64},
    "dtype-number": {"torch_dtype": 5},
    "dtype-unknown": {"torch_dtype": "int3"},
    "arch-string": {"architectures": "Qwen3ForCausalLM"},
    "arch-empty": {"architectures": []},
    "arch-number": {"architectures": [5]},
    "rope-scaling-string": {"rope_scaling": "x"},
    "rope-scaling-number": {"rope_scaling": 5},
    "quant-config-number": {"quantization_config": 3},
    "quant-config-string": {"quantization_config": "fp8"},
    "text-config-string": {"text_config": "x"},
}

CONFIG_RAW: dict[str, bytes] = {
    "int-5000-digits": b'{"num_hidden_layers": ' + b"9" * 5000 + b"}",
    "nested-100k": b"[" * 100_000 + b"]" * 100_000,
    "json-list": b"[1, 2]",
    "not-utf8": b"\xff\xfe\x00",
    "empty-file": b"",
    "truncated": b'{"architectures": ["Qwen3ForCausalLM"], "hidden_size": ',
    "nan-layers": b'{"architectures": ["Qwen3ForCausalLM"], "num_hidden_layers": NaN}',
}

INDEX_MUTATIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "weight-map-null": lambda j: {**j, "weight_map": None},
    "weight-map-list": lambda j: {**j, "weight_map": []},
    "index-is-list": lambda j: [],
    "index-not-json": lambda j: "{not json",
    "shard-name-int": lambda j: {**j, "weight_map": {k: 5 for k in j["weight_map"]}},
    "shard-name-dotdot": lambda j: {**j, "weight_map": {**j["weight_map"], next(iter(j["weight_map"])): "../../etc/passwd"}},
    "shard-name-absolute": lambda j: {**j, "weight_map": {**j["weight_map"], next(iter(j["weight_map"])): "/etc/passwd"}},
    "shard-name-newline": lambda j: {**j, "weight_map": {**j["weight_map"], next(iter(j["weight_map"])): "a\nb.safetensors"}},
    "shard-name-missing": lambda j: {**j, "weight_map": {**j["weight_map"], next(iter(j["weight_map"])): "model-09-of-09.safetensors"}},
    "index-nested": lambda j: "[" * 50_000 + "]" * 50_000,
}

HEADER_MUTATIONS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "shape-empty-string": lambda h: (_first_tensor(h).update(shape=""), h)[1],
    "shape-huge": lambda h: (_first_tensor(h).update(shape=[2**62, 2**62, 2**62]), h)[1],
    "shape-negative": lambda h: (_first_tensor(h).update(shape=[-1, 4]), h)[1],
    "shape-strings": lambda h: (_first_tensor(h).update(shape=["a", "b"]), h)[1],
    "shape-f4-huge": lambda h: (_first_tensor(h).update(dtype="F4", shape=[2**62, 2**62, 3]), h)[1],
    "dtype-unknown": lambda h: (_first_tensor(h).update(dtype="Z9"), h)[1],
    "dtype-number": lambda h: (_first_tensor(h).update(dtype=7), h)[1],
    "offsets-one": lambda h: (_first_tensor(h).update(data_offsets=[0]), h)[1],
    "offsets-huge": lambda h: (_first_tensor(h).update(data_offsets=[0, 2**80]), h)[1],
    "offsets-reversed": lambda h: (_first_tensor(h).update(data_offsets=[10, 0]), h)[1],
    "entry-null": lambda h: {k: (None if i == 1 else v) for i, (k, v) in enumerate(h.items())},
    "header-list": lambda h: b"[1, 2, 3]",
    "header-not-json": lambda h: b"{\"a\": ",
    "header-nested": lambda h: b"[" * 20_000 + b"]" * 20_000,
    "metadata-number": lambda h: {**h, "__metadata__": {"format": 5}},
}


def build_workspace(root: Path) -> dict[str, str]:
    """Generate every file the corpus reads under ``root``; the placeholders' values."""
    from roost.demo.model import generate_tiny_model

    root.mkdir(parents=True, exist_ok=True)
    base = generate_tiny_model(root / "ckpt")
    ws: dict[str, str] = {"ckpt": str(base), "root": str(root)}

    def variant(name: str, fn: Callable[[Path], None]) -> None:
        d = root / "v" / name
        shutil.copytree(base, d)
        fn(d)
        ws[name] = str(d)

    for name, patch in CONFIG_MUTATIONS.items():
        variant(f"cfg-{name}", lambda d, p=patch: _patch_config(d, {k: v for k, v in p.items()}))
    for name, raw in CONFIG_RAW.items():
        variant(f"cfg-{name}", lambda d, r=raw: _patch_config(d, raw=r))
    for name, fn in INDEX_MUTATIONS.items():
        variant(f"idx-{name}", lambda d, f=fn: _patch_index(d, f))
    for name, fn in HEADER_MUTATIONS.items():
        variant(f"hdr-{name}", lambda d, f=fn: _patch_header(d, f))

    def config_is(kind: str) -> Callable[[Path], None]:
        def make(d: Path) -> None:
            cfg = d / "config.json"
            cfg.unlink()
            if kind == "dir":
                cfg.mkdir()
            elif kind == "fifo":
                os.mkfifo(cfg)
            elif kind == "outside":
                cfg.symlink_to(base / "config.json")  # a real config, but outside this checkpoint
            elif kind == "loop":
                cfg.symlink_to(cfg)
            elif kind == "huge":
                with open(cfg, "wb") as f:  # sparse: 3 GB of zeros after a valid start
                    f.write(b'{"a": "')
                    f.truncate(3 * 1024**3)
        return make

    for kind in ("dir", "fifo", "outside", "loop", "huge"):
        variant(f"cfg-is-{kind}", config_is(kind))

    def shard_is(kind: str) -> Callable[[Path], None]:
        def make(d: Path) -> None:
            s = _first_shard(d)
            if kind == "outside":
                target = root / "outside-shard.safetensors"
                shutil.move(s, target)
                s.symlink_to(target)
            elif kind == "empty":
                s.write_bytes(b"")
            elif kind == "seven-bytes":
                s.write_bytes(b"\x01" * 7)
            elif kind == "len-2e63":
                b = s.read_bytes()
                s.write_bytes((2**63).to_bytes(8, "little") + b[8:])
            elif kind == "len-zero":
                s.write_bytes(b"\x00" * 8 + b"{}")
            elif kind == "dir":
                s.unlink()
                s.mkdir()
            elif kind == "fifo":
                s.unlink()
                os.mkfifo(s)
        return make

    for kind in ("outside", "empty", "seven-bytes", "len-2e63", "len-zero", "dir", "fifo"):
        variant(f"shard-{kind}", shard_is(kind))

    # files of other kinds
    (root / "fifo").exists() or os.mkfifo(root / "fifo")
    ws["fifo"] = str(root / "fifo")
    (root / "a-file").write_text("not a directory\n")
    ws["file"] = str(root / "a-file")
    (root / "empty.log").write_text("")
    ws["empty_log"] = str(root / "empty.log")
    (root / "binary.log").write_bytes(bytes(range(256)) * 1000)
    ws["binary_log"] = str(root / "binary.log")
    long_line = "ERROR " * 60_000 + "\n" + "Using " * 60_000 + "\n" + "/a" * 100_000 + " torch_compile_cache truncated\n"
    (root / "long-lines.log").write_text(long_line * 3)
    ws["long_log"] = str(root / "long-lines.log")
    with open(root / "sparse.log", "wb") as f:  # 4 GB of zeros (sparse), a failure at the end
        f.truncate(4 * 1024**3)
        f.seek(0, os.SEEK_END)
        f.write(b"\nERROR 12-04 10:00:00 [core.py:1] EngineCore failed to start\n")
    ws["sparse_log"] = str(root / "sparse.log")
    (root / "not.parquet").write_text("this is not parquet\n")
    ws["not_parquet"] = str(root / "not.parquet")
    (root / "bad.jsonl").write_text('{"question": 1}\n[not json\n' + "[" * 10_000 + "\n")
    ws["bad_jsonl"] = str(root / "bad.jsonl")
    ws["long_path"] = str(root / ("a" * 5000))
    ws["long_name"] = str(root / ("b" * 300))
    ws["newline_path"] = str(root / "evil\nroost: error: forged line")
    ws["escape_path"] = str(root / "evil\x1b[31mred")
    (root / "locked").mkdir(exist_ok=True)
    (root / "locked").chmod(stat.S_IRUSR | stat.S_IXUSR)
    ws["readonly_dir"] = str(root / "locked")
    return ws


# --------------------------------------------------------------------------------------------- cases

KV = ("--kv-cache-memory-bytes", "1000000000")

for _name in [*CONFIG_MUTATIONS, *CONFIG_RAW, "is-dir", "is-fifo", "is-outside", "is-loop", "is-huge"]:
    case(f"audit-config-{_name}", "audit", f"{{cfg-{_name}}}")
    case(f"plan-config-{_name}", "plan", f"{{cfg-{_name}}}", *KV)
for _name in INDEX_MUTATIONS:
    case(f"audit-index-{_name}", "audit", f"{{idx-{_name}}}", code=(1, 2))
for _name in HEADER_MUTATIONS:
    case(f"audit-header-{_name}", "audit", f"{{hdr-{_name}}}", code=(1, 2))
for _name in ("outside", "empty", "seven-bytes", "len-2e63", "len-zero", "dir", "fifo"):
    case(f"audit-shard-{_name}", "audit", f"{{shard-{_name}}}", code=(1, 2))

# paths
for _cmd in ("audit", "plan", "diagnose"):
    case(f"{_cmd}-path-too-long", _cmd, "{long_path}")
    case(f"{_cmd}-name-too-long", _cmd, "{long_name}")
    case(f"{_cmd}-path-with-newline", _cmd, "{newline_path}")
    case(f"{_cmd}-path-with-escape", _cmd, "{escape_path}")
    case(f"{_cmd}-path-fifo", _cmd, "{fifo}")
case("audit-path-is-file", "audit", "{file}")
case("audit-dev-null", "audit", "/dev/null")
case("plan-path-missing-with-kv", "plan", "{root}/nope", *KV)
case("diagnose-dev-zero", "diagnose", "/dev/zero")
case("diagnose-dev-urandom", "diagnose", "/dev/urandom")
case("diagnose-dir", "diagnose", "{root}")
case("diagnose-empty-log", "diagnose", "{empty_log}", code=1)
case("diagnose-binary-log", "diagnose", "{binary_log}", code=(0, 1))
case("diagnose-long-lines", "diagnose", "{long_log}", code=1, timeout_s=30)
case("diagnose-4gb-sparse-log", "diagnose", "{sparse_log}", code=0, timeout_s=30)
case("diagnose-exit-code-huge", "diagnose", "{empty_log}", "--exit-code", "9" * 400)
case("diagnose-exit-code-text", "diagnose", "{empty_log}", "--exit-code", "abc")

# CLI values
case("plan-kv-inf", "plan", "{ckpt}", "--kv-cache-memory-bytes", "1e400")
case("plan-kv-huge", "plan", "{ckpt}", "--kv-cache-memory-bytes", "9" * 5000)
case("plan-kv-negative", "plan", "{ckpt}", "--kv-cache-memory-bytes", "-5")
case("plan-kv-one-byte", "plan", "{ckpt}", "--kv-cache-memory-bytes", "1", code=1)
case("plan-window-zero", "plan", "{ckpt}", *KV, "--max-model-len", "0")
case("plan-window-beyond", "plan", "{ckpt}", *KV, "--max-model-len", "99999999")
case("plan-unknown-host", "plan", "{ckpt}", *KV, "--host", "nosuchhost")
case("plan-unknown-profile", "plan", "--profile", "nosuch")
case("audit-unknown-host", "audit", "{ckpt}", "--host", "nosuchhost")
case("audit-hub-url-bad", "audit", "hf://not a repo")
case("audit-hub-url-dotdot", "audit", "hf://../../etc")
case("audit-hub-url-bad-revision", "audit", "hf://acme/model@bad..ref")
BENCH = ("bench", "{openai}/ok", "--model", "m")
for _opt, _val in [("--output-tokens", "0"), ("--output-tokens", "9" * 400), ("--output-tokens", "-3"),
                   ("--repeats", "-1"), ("--repeats", "0"), ("--warmup", "-1"), ("--concurrency", "1e999"),
                   ("--concurrency", "abc"), ("--concurrency", "0"), ("--concurrency", "-4"), ("--concurrency", "70000"),
                   ("--prompt-lengths", "x"), ("--prompt-lengths", "0"), ("--prompt-lengths", "9" * 40),
                   ("--max-num-seqs", "0"), ("--max-model-len", "-1"), ("--concurrency-prompt-tokens", "0")]:
    case(f"bench-{_opt.strip('-')}-{_val[:8]}", *BENCH, _opt, _val)
case("bench-output-is-dir", *BENCH, "--output", "{root}")
case("bench-output-path-too-long", *BENCH, "--output", "{long_path}")
case("bench-output-under-a-file", *BENCH, "--output", "{file}/x.json")
case("bench-output-readonly-dir", *BENCH, "--output", "{readonly_dir}/x.json", code=(1, 2))
case("bench-url-bad-ipv6", "bench", "http://[::1", "--model", "m")
case("bench-url-ftp", "bench", "ftp://127.0.0.1/", "--model", "m")
case("bench-url-port-range", "bench", "http://127.0.0.1:99999", "--model", "m")
case("bench-url-userinfo-password", "bench", f"http://user:{PLANTED_PASSWORD}@[::1", "--model", "m")
case("bench-url-empty-host", "bench", "http://:80", "--model", "m")
case("bench-url-newline", "bench", "http://127.0.0.1:1/\nx", "--model", "m", code=(1, 2))
case("bench-url-refused-userinfo", "bench", f"http://user:{PLANTED_PASSWORD}@127.0.0.1:9", "--model", "m",
     "--prompt-lengths", "8", "--concurrency", "", "--warmup", "0", "--repeats", "1", code=1)
case("bench-url-host-label-too-long", "bench", "http://" + "a" * 300 + ":8000", "--model", "m", *("--prompt-lengths",
     "8", "--concurrency", "", "--warmup", "0", "--repeats", "1"), code=(1, 2))
case("bench-url-space-in-host", "bench", "http://exa mple:8000", "--model", "m")
case("bench-url-port-text", "bench", "http://127.0.0.1:80x", "--model", "m")
case("bench-url-unicode-host", "bench", "http://\u2603\u2603.invalid:8000", "--model", "m", *("--prompt-lengths",
     "8", "--concurrency", "", "--warmup", "0", "--repeats", "1"), code=(1, 2))
case("bench-missing-model", "bench", "{openai}/ok")
case("bench-api-key-option-echo", "bench", "{openai}/echo-headers", "--model", "m", "--api-key", PLANTED_KEY,
     "--prompt-lengths", "8", "--concurrency", "", "--warmup", "0", "--repeats", "1", "--output-tokens", "4",
     code=1)

# server answers: /v1/models and chat completions a real server would not send
QUICK = ("--prompt-lengths", "8", "--concurrency", "2", "--warmup", "0", "--repeats", "1", "--output-tokens", "4",
         "--max-model-len", "4096")
for _mode in ("models-null", "models-list", "models-string", "models-truncated", "models-not-json", "models-id-int",
              "models-item-null", "models-deep"):
    case(f"bench-answer-{_mode}", "bench", f"{{openai}}/{_mode}", "--model", "m", *QUICK)
    case(f"eval-answer-{_mode}", "eval", f"{{openai}}/{_mode}", "--model", "m", "--task", "gsm8k",
         "--dataset", "{gsm8k}", "--limit", "2", "--quiet")
case("bench-answer-models-huge", "bench", "{openai}/models-huge", "--model", "m", *QUICK, timeout_s=40)
for _mode in ("echo-headers", "echo-headers-500", "always-500", "always-429", "no-stream", "garbage-stream",
              "empty-stream", "error-in-stream", "models-len-str", "models-len-neg", "models-len-huge"):
    case(f"bench-answer-{_mode}", "bench", f"{{openai}}/{_mode}", "--model", "m", *QUICK, code=1)
case("bench-json-echo-headers", "bench", "{openai}/echo-headers", "--model", "m", *QUICK, "--json", code=1)
case("bench-output-echo-headers", "bench", "{openai}/echo-headers", "--model", "m", *QUICK, "--output",
     "{root}/echo.json", code=1)
case("bench-server-never-answers", "bench", "{silent}", "--model", "m", *QUICK, code=1, timeout_s=60)
case("eval-server-never-answers", "eval", "{silent}", "--model", "m", "--task", "gsm8k", "--dataset", "{gsm8k}",
     "--limit", "1", "--quiet", code=(1, 2), timeout_s=60)

# eval values and files
EVAL = ("eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset", "{gsm8k}", "--quiet")
case("eval-task-unknown", "eval", "{openai}/ok", "--model", "m", "--task", "nosuch")
for _opt, _val in [("--limit", "-1"), ("--limit", "0"), ("--limit", "9" * 400), ("--temperature", "nan"),
                   ("--temperature", "inf"), ("--temperature", "1e400"), ("--temperature", "-1"), ("--top-p", "2"),
                   ("--top-p", "nan"), ("--top-k", "-5"), ("--concurrency", "0"), ("--max-tokens", "0"),
                   ("--per-category", "-2")]:
    case(f"eval-{_opt.strip('-')}-{_val[:8]}", *EVAL, _opt, _val)
case("eval-dataset-fifo", "eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset", "{fifo}")
case("eval-dataset-dir-empty", "eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset", "{readonly_dir}")
case("eval-dataset-not-parquet", "eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset", "{not_parquet}")
case("eval-dataset-bad-jsonl", "eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset", "{bad_jsonl}")
case("eval-dataset-too-long", "eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset", "{long_path}")
case("eval-log-is-dir", *EVAL, "--log", "{root}")
case("eval-log-fifo", *EVAL, "--log", "{fifo}")
case("eval-log-garbage", *EVAL, "--log", "{bad_jsonl}")

# run: refused before Prefect or anything else starts (the bound is far below a temporary server's start)
case("run-vllm-arg-pool-one-byte", "run", "--vllm-arg=--kv-cache-memory-bytes=1", code=1, timeout_s=15)
for _i, _arg in enumerate(["--kv-cache-memory-bytes=abc", "--max-model-len=0", "--max_model_len=0",
                           "--max-model-len=99999999", "--max-num-seqs=-1",
                           f"--api-key={PLANTED_KEY}", f"--api_key={PLANTED_KEY}", f"--api-ke={PLANTED_KEY}",
                           f"--api-key {PLANTED_KEY}", f"--hf_token={PLANTED_HF}", f"--hf-tok={PLANTED_HF}"]):
    case(f"run-vllm-arg-{_i:02d}", "run", f"--vllm-arg={_arg}", timeout_s=15)
case("run-port-above-range", "run", "--port", "70000")
case("run-port-negative", "run", "--port", "-5")
case("run-port-text", "run", "--port", "abc")
case("run-restart-policy", "run", "--restart-policy", "sometimes")
case("run-unknown-profile", "run", "--profile", "nosuch")
case("run-unknown-host", "run", "--host", "nosuchhost")
case("run-profile-newline", "run", "--profile", "a\nroost: error: forged")
case("run-revision-dotdot", "run", "--revision", "../../etc")
case("run-revision-space", "run", "--revision", "main branch")
case("run-model-dir-without-dry-run", "run", "--model-dir", "{ckpt}")
case("run-dry-run-model-dir-fifo", "run", "--dry-run", "--model-dir", "{fifo}")
case("run-dry-run-model-dir-too-long", "run", "--dry-run", "--model-dir", "{long_path}")
case("run-bad-results-url", "run", env={"ROOST_RESULTS_URL": "not a url"})

# download
case("download-repo-dotdot", "download", "../../x")
case("download-repo-three-parts", "download", "a/b/c")
case("download-repo-empty", "download", "")
case("download-repo-space", "download", "a b/c")
case("download-repo-newline", "download", "a/b\nroost: error: forged")
case("download-repo-too-long", "download", "a/" + "b" * 5000)
case("download-revision-dotdot", "download", "a/b", "--revision", "../../etc")
case("download-local-dir-too-long", "download", "a/b", "--local-dir", "{long_path}")
case("download-local-dir-is-file", "download", "a/b", "--local-dir", "{file}")
case("download-endpoint-not-a-url", "download", "a/b", env={"HF_ENDPOINT": "notaurl"})
case("download-endpoint-ftp", "download", "a/b", env={"HF_ENDPOINT": "ftp://127.0.0.1"})
case("download-endpoint-port-range", "download", "a/b", env={"HF_ENDPOINT": "http://127.0.0.1:99999"})
case("download-endpoint-userinfo", "download", "a/b", env={"HF_ENDPOINT": f"http://u:{PLANTED_PASSWORD}@[::1"})
case("download-endpoint-refused", "download", "a/b", env={"HF_ENDPOINT": "http://127.0.0.1:9"}, code=(1, 2),
     timeout_s=60)
case("download-hub-never-answers", "download", "a/b", env={"HF_ENDPOINT": "{silent}"}, code=(1, 2), timeout_s=90)
case("audit-hub-never-answers", "audit", "hf://a/b", env={"HF_ENDPOINT": "{silent}"}, code=(1, 2), timeout_s=90)

# results
case("results-last-zero", "results", "--last", "0")
case("results-last-huge", "results", "--last", "9" * 400)
case("results-store-ftp", "results", "--store", "ftp://x/y")
case("results-store-userinfo", "results", "--store", f"s3://AKIA:{PLANTED_PASSWORD}@bucket/x")
case("results-dir-is-file", "results", "--dir", "{file}")
case("results-dir-too-long", "results", "--dir", "{long_path}")
case("results-serve-port-range", "results", "serve", "--port", "99999")
case("results-serve-bind-long", "results", "serve", "--bind", "a" * 300, "--port", "0")
case("results-serve-bind-bad", "results", "serve", "--bind", "999.1.1.1", "--port", "0")
case("results-serve-root-fifo", "results", "serve", "--root", "{fifo}", "--port", "0")

# gateway, monitor
case("gateway-serve-port-range", "gateway", "serve", "--port", "70000")
case("gateway-usage-by-unknown", "gateway", "usage", "--by", "nobody", "--db", "sqlite:///{root}/gw.db")
case("gateway-usage-since-bad", "gateway", "usage", "--since", "yesterday-ish", "--db", "sqlite:///{root}/gw.db")
case("gateway-usage-db-scheme", "gateway", "usage", "--db", "mysql://x/y")
case("gateway-usage-db-userinfo", "gateway", "usage", "--db", f"postgresql://u:{PLANTED_PASSWORD}@[::1/db")
case("gateway-key-add-kind", "gateway", "key", "add", "alice", "--kind", "robot", "--db", "sqlite:///{root}/gw.db")
case("gateway-key-add-newline", "gateway", "key", "add", "al\nice", "--db", "sqlite:///{root}/gw.db")
case("gateway-key-revoke-unknown", "gateway", "key", "revoke", "nobody", "--db", "sqlite:///{root}/gw.db")
case("monitor-render-rule-bad", "monitor", "render", "--out", "{root}/mon", "--rule", "nonsense", "--no-sync")
case("monitor-render-rule-value", "monitor", "render", "--out", "{root}/mon", "--rule", "ttft_p90_s=abc", "--no-sync")
case("monitor-render-interval", "monitor", "render", "--out", "{root}/mon", "--scrape-interval", "soon", "--no-sync")
case("monitor-render-out-file", "monitor", "render", "--out", "{file}", "--no-sync")
case("monitor-up-grafana-port", "monitor", "up", "--grafana-port", "70000")
case("monitor-status-prometheus-bad", "monitor", "status", "--prometheus", "localhost:9090")

# option parsing: every kind of usage mistake is one line
for _argv in [("frobnicate",), ("audit", "--bogus"), ("plan", "--kv-cache-memory-bytes"), ("bench",),
              ("bench", "http://x", "--modle", "m"), ("run", "--profil", "x"), ("run", "--vllm-arg"),
              ("results", "--bogus"), ("results", "nosuchsub"), ("gateway", "nosuch"),
              ("gateway", "key", "add"), ("monitor", "nosuch"), ("eval", "http://x"), ("download",),
              ("diagnose",), ("sweep", "--bogus"), ("setup", "--bogus"), ("doctor", "--bogus"),
              ("audit", "a", "b", "c"), ("--bogus",), ("plan", "--json=yes")]:
    case("usage-" + "-".join(a.strip("-") for a in _argv), *_argv)

# the environment: settings roost reads from it
case("env-results-store-ftp", "results", env={"ROOST_RESULTS_STORE": "ftp://x/y"})
case("env-results-store-userinfo", "results", env={"ROOST_RESULTS_STORE": f"s3://AK:{PLANTED_PASSWORD}@b/p"})
case("env-gateway-db-garbage", "gateway", "usage", env={"ROOST_GATEWAY_DB": "garbage"})
case("env-gateway-db-not-sqlite-file", "gateway", "key", "list", env={"ROOST_GATEWAY_DB": "sqlite:///{file}"})
case("env-gateway-db-userinfo", "gateway", "key", "list",
     env={"ROOST_GATEWAY_DB": f"postgresql://u:{PLANTED_PASSWORD}@127.0.0.1:9/db"}, code=(1, 2), timeout_s=40)
case("env-roost-home-is-file", "run", "--dry-run", env={"ROOST_HOME": "{file}"})
case("env-results-dir-is-file", "results", env={"ROOST_RESULTS_DIR": "{file}"})
case("env-prefect-api-refused", "run", "--dry-run", env={"PREFECT_API_URL": "http://127.0.0.1:9/api"}, timeout_s=40)
case("env-prefect-api-not-a-url", "run", "--dry-run", env={"PREFECT_API_URL": "not a url"}, timeout_s=40)
case("eval-hub-dataset-endpoint-not-a-url", "eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset",
     "acme/gsm8k", "--quiet", env={"HF_ENDPOINT": "notaurl"})
case("eval-hub-dataset-endpoint-refused", "eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset",
     "acme/gsm8k", "--quiet", code=(1, 2), timeout_s=60)
case("eval-hub-dataset-never-answers", "eval", "{openai}/ok", "--model", "m", "--task", "gsm8k", "--dataset",
     "acme/gsm8k", "--quiet", env={"HF_ENDPOINT": "{silent}"}, code=(1, 2), timeout_s=90)
