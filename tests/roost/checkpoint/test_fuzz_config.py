"""Property-based fuzzing of the config parser (``roost.checkpoint.config.config_from_bytes``: pure, bytes
in) and of everything the plan computes from what it accepts.

Whatever ``config.json`` (and ``hf_quant_config.json``) hold, the parser returns a config within
roost's bounds (``roost.checkpoint.config.MAX_*``), with KV heads dividing the attention heads, a
head size of at least 1 and one layer type per layer — or raises a one-line UserError naming the
file; never a traceback (OverflowError, RecursionError, ZeroDivisionError, a pydantic
ValidationError...). What it accepts, the KV plan (every vLLM build's rules) and the whole audit and
plan of an in-memory checkpoint (``FetchedFiles``: what a Hub preflight reads) turn into figures or a
one-line UserError. Inputs: random bytes, random JSON, and real configs (dense, MoE, hybrid
gated-delta-net, multimodal, quantized) with fields set to hostile values, dropped or moved.

Deterministic (``derandomize=True``, no example database).
"""

from __future__ import annotations

import copy
import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from support.errors import assert_one_line_message

from roost.checkpoint import config as C
from roost.checkpoint.config import ModelConfigInfo, config_from_bytes
from roost.checkpoint.files import CONFIG_LIMIT, FetchedFiles, RemoteShard
from roost.checkpoint.writer import header_bytes
from roost.demo.model import TINY_QWEN3, qwen3_tensor_shapes
from roost.errors import UserError
from roost.hosts import CPU, SPARK
from roost.plan.args import derive_vllm_args
from roost.plan.inputs import PlanInputs
from roost.plan.kv import SPARK_RULES, cpu_rules, kv_model_from_config, plan_kv, pool_for_concurrency
from roost.plan.preflight import plan_checkpoint
from roost.plan.report import audit_for_host

FUZZ = settings(derandomize=True, database=None, deadline=None, max_examples=400,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
WHERE = "hf://acme/m@" + "ab" * 20 + "/config.json"
RULES = [SPARK_RULES, cpu_rules(False), cpu_rules(True)]


# ---------------------------------------------------------------------------------------- base configs

DENSE = dict(TINY_QWEN3, vocab_size=2048)
QWEN35 = {
    "architectures": ["Qwen3_5ForConditionalGeneration"], "model_type": "qwen3_5", "vision_config": {"depth": 27},
    "text_config": {
        "hidden_size": 256, "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4,
        "head_dim": 64, "vocab_size": 1000, "max_position_embeddings": 262144, "full_attention_interval": 4,
        "linear_num_key_heads": 16, "linear_num_value_heads": 32, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4, "mtp_num_hidden_layers": 1,
        "mamba_ssm_dtype": "float32", "rope_parameters": {"rope_type": "default", "rope_theta": 10000000}},
}
MOE_NVFP4 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 512, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 8, "vocab_size": 4096, "max_position_embeddings": 163840,
    "n_routed_experts": 16, "num_experts_per_tok": 4, "num_nextn_predict_layers": 1, "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "yarn", "factor": 40}, "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8",
                            "group_size": 16},
}
SLIDING = {
    "architectures": ["Gemma2ForCausalLM"], "hidden_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
    "vocab_size": 1000, "max_position_embeddings": 8192, "sliding_window": 4096,
    "layer_types": ["sliding_attention", "full_attention"],
}
BASES = {"dense": DENSE, "qwen3_5": QWEN35, "moe_nvfp4": MOE_NVFP4, "sliding": SLIDING}

# Every field the parser reads (and a few it passes over), at the top level or under text_config.
FIELDS = [
    "architectures", "model_type", "num_hidden_layers", "n_layer", "num_layers", "hidden_size", "n_embd", "d_model",
    "num_attention_heads", "n_head", "num_key_value_heads", "head_dim", "vocab_size", "max_position_embeddings",
    "n_positions", "max_seq_len", "layer_types", "full_attention_interval", "linear_num_key_heads",
    "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "linear_conv_kernel_dim",
    "num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok", "moe_topk", "top_k",
    "mtp_num_hidden_layers", "num_nextn_predict_layers", "vision_config", "torch_dtype", "dtype",
    "quantization_config", "tie_word_embeddings", "sliding_window", "use_sliding_window", "mamba_ssm_dtype",
    "rope_scaling", "rope_parameters", "rope_theta", "text_config", "intermediate_size",
]
NESTED = {  # fields inside objects: (object, key)
    "quantization_config": ["quant_method", "quant_algo", "kv_cache_quant_algo", "group_size", "quantization"],
    "rope_scaling": ["type", "rope_type", "factor"],
    "rope_parameters": ["rope_type", "rope_theta", "factor"],
    "vision_config": ["depth", "num_hidden_layers"],
}

BOUNDARY_INTS = sorted({-(2**63), -1, 0, 1, 2, 3, 7, 16, 255, 4096, 10**6, 2**31, 2**32, 2**53 + 1, 2**63, 2**64,
                        2**70, 10**100, *[b + d for b in (C.MAX_LAYERS, C.MAX_HIDDEN, C.MAX_HEADS, C.MAX_HEAD_DIM,
                                                         C.MAX_VOCAB, C.MAX_POSITIONS, C.MAX_EXPERTS,
                                                         C.MAX_CONV_KERNEL, C.MAX_GROUP_SIZE) for d in (-1, 0, 1)]})
hostile = st.one_of(
    st.sampled_from(BOUNDARY_INTS),
    st.integers(min_value=-5, max_value=300),
    st.sampled_from([0.0, 0.5, 1.0, 4.0, -1.5, 1e19, 1e308, math.inf, -math.inf, math.nan]),
    st.sampled_from([None, True, False, "", "x", "4", "bfloat16", "full_attention", "\ud800", "a\nb", "é" * 300]),
    st.sampled_from([[], [1], ["x"], ["full_attention"] * 4, [None], {}, {"a": 1}, {"type": 3}, {"factor": "x"},
                     [[[[]]]], {"quantization": 3}, {"quant_algo": ["NVFP4"]}]),
)


@st.composite
def mutated_configs(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A base config with 1-3 fields set to hostile values, dropped, or moved under/out of text_config."""
    name = draw(st.sampled_from(sorted(BASES)))
    cfg = copy.deepcopy(BASES[name])
    for _ in range(draw(st.integers(1, 3))):
        field = draw(st.sampled_from(FIELDS))
        scope = cfg
        if isinstance(cfg.get("text_config"), dict) and draw(st.booleans()):
            scope = cfg["text_config"]
        how = draw(st.sampled_from(["set", "set", "set", "drop", "nested", "move"]))
        if how == "set":
            scope[field] = draw(hostile)
        elif how == "drop":
            scope.pop(field, None)
        elif how == "nested" and field in NESTED:
            obj = scope.setdefault(field, {})
            if isinstance(obj, dict):
                obj[draw(st.sampled_from(NESTED[field]))] = draw(hostile)
        elif how == "move" and field in cfg and field != "text_config":
            cfg.setdefault("text_config", {})
            if isinstance(cfg["text_config"], dict):
                cfg["text_config"][field] = cfg.pop(field)
    return name, cfg


# ----------------------------------------------------------------------------------------- the checks

# What an accepted config's fields must have been in the JSON, looked up as the parser does (text_config
# first, then the top level; the first alias present). Ints exclude bools (JSON true is not a count).
COUNTS = [("num_hidden_layers", "n_layer", "num_layers"), ("hidden_size", "n_embd", "d_model"),
          ("num_attention_heads", "n_head"), ("num_key_value_heads",), ("head_dim",), ("vocab_size",),
          ("max_position_embeddings", "n_positions", "max_seq_len"), ("sliding_window",)]
OPTIONAL_COUNTS = [("num_experts", "num_local_experts", "n_routed_experts"), ("num_experts_per_tok", "moe_topk", "top_k"),
                   ("mtp_num_hidden_layers",), ("num_nextn_predict_layers",)]
TYPED = [(("torch_dtype", "dtype"), str), (("mamba_ssm_dtype",), str), (("use_sliding_window",), bool)]


def _read(raw: dict[str, Any], *keys: str) -> Any:
    text = raw.get("text_config") or {}
    for d in (text, raw):
        for k in keys:
            if d.get(k) is not None:
                return d[k]
    return None


def assert_typed(raw: dict[str, Any]) -> None:
    """Every field the parser reads had its JSON type in a config it accepted."""
    for keys in COUNTS:
        v = _read(raw, *keys)
        assert v is None or type(v) is int, (keys, v)
    for keys in OPTIONAL_COUNTS:
        v = _read(raw, *keys)
        assert v is None or v is False or type(v) is int, (keys, v)
    for keys, kind in TYPED:
        v = _read(raw, *keys)
        assert v is None or type(v) is kind, (keys, v)
    text = raw.get("text_config")
    assert text is None or isinstance(text, dict)
    assert raw.get("vision_config") is None or isinstance(raw["vision_config"], dict)
    assert isinstance(raw["architectures"], list) and all(isinstance(a, str) for a in raw["architectures"])
    for scope in (raw, text or {}):
        for key in ("quantization_config", "rope_scaling", "rope_parameters"):
            assert scope.get(key) is None or isinstance(scope[key], dict), (key, scope[key])
        assert scope.get("model_type") is None or isinstance(scope["model_type"], str)
        assert scope.get("rope_theta") is None or type(scope["rope_theta"]) in (int, float)
    tie = raw["tie_word_embeddings"] if raw.get("tie_word_embeddings") is not None else (text or {}).get("tie_word_embeddings")
    assert tie is None or type(tie) is bool


def check_config(data: bytes, quant: bytes | None = None) -> ModelConfigInfo | None:
    """Parse; a UserError must be one line, an accepted config must hold its invariants, and the KV
    plan of it (every rule set) must be figures or a one-line UserError."""
    try:
        cfg = config_from_bytes(data, WHERE, quant, WHERE.replace("config.json", "hf_quant_config.json"))
    except UserError as exc:
        assert_one_line_message(exc, max_chars=2_000)
        event("config refused")
        return None
    event("config accepted")
    assert_typed(json.loads(data))
    for value, high in ((cfg.num_hidden_layers, C.MAX_LAYERS), (cfg.hidden_size, C.MAX_HIDDEN),
                        (cfg.num_attention_heads, C.MAX_HEADS), (cfg.num_key_value_heads, C.MAX_HEADS),
                        (cfg.head_dim, C.MAX_HEAD_DIM), (cfg.vocab_size, C.MAX_VOCAB),
                        (cfg.max_position_embeddings, C.MAX_POSITIONS)):
        assert type(value) is int and 1 <= value <= high
    for value, high in ((cfg.num_experts, C.MAX_EXPERTS), (cfg.num_experts_per_tok, C.MAX_EXPERTS),
                        (cfg.mtp_num_hidden_layers, C.MAX_LAYERS), (cfg.vision_depth or 0, C.MAX_LAYERS),
                        (cfg.sliding_window or 0, C.MAX_POSITIONS)):
        assert type(value) is int and 0 <= value <= high
    assert cfg.num_attention_heads % cfg.num_key_value_heads == 0
    assert len(cfg.layer_types) == cfg.num_hidden_layers
    assert (cfg.gdn is not None) == ("linear_attention" in cfg.layer_types)
    assert not cfg.num_experts or cfg.num_experts_per_tok
    for text in (cfg.architecture, cfg.model_type, cfg.dtype, cfg.mamba_ssm_dtype or ""):
        text.encode()
    q = cfg.quantization
    assert q is None or (isinstance(q, dict) and all(q.get(k) is None or isinstance(q[k], str)
                                                    for k in ("quant_method", "quant_algo", "kv_cache_quant_algo")))
    for rules in RULES:
        check_plan(cfg, rules)
    return cfg


def check_plan(cfg: ModelConfigInfo, rules: Any) -> None:
    try:
        spec = kv_model_from_config(cfg, rules, num_speculative_tokens=1 if cfg.mtp_num_hidden_layers else 0)
        plan = plan_kv(spec, rules, 10**9)
        pool = pool_for_concurrency(spec, rules, 2.5)
        args = derive_vllm_args(cfg, rules, visual_tensor_count=0, mtp_tensor_count=1, served_model_name="m")
    except UserError as exc:
        assert_one_line_message(exc, max_chars=2_000)
        event("plan refused")
        return
    event("planned")
    assert plan.block_size >= 1 and plan.num_blocks >= 0 and plan.kv_cache_tokens >= 0 and plan.bytes_per_block > 0
    assert math.isfinite(plan.max_concurrency) and plan.max_concurrency >= 0 and pool > 0
    assert all(isinstance(a, str) for a in args.to_argv()) and args.kv_cache_memory_bytes > 0
    json.dumps(plan.model_dump(mode="json"))


# ---------------------------------------------------------------------------------------- properties


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes(data: bytes) -> None:
    check_config(data)


names = st.text(alphabet='ab_"\\\n\x00é', max_size=6) | st.sampled_from(FIELDS)
json_values = st.recursive(
    st.none() | st.booleans() | st.sampled_from(BOUNDARY_INTS) | st.integers(-3, 64) | st.floats() | names,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(names, c, max_size=4), max_leaves=10)


@FUZZ
@given(json_values)
def test_random_json(value: Any) -> None:
    check_config(json.dumps(value).encode())


@settings(FUZZ, max_examples=3000)
@given(mutated_configs())
def test_mutated_real_configs(case: tuple[str, dict[str, Any]]) -> None:
    _, cfg = case
    check_config(json.dumps(cfg).encode())  # NaN/Infinity written as literals: jsondoc's fallback reads them


@settings(FUZZ, max_examples=300)
@given(st.sampled_from([None, 3, [], "x", {"quantization": 3}, {"quantization": {"group_size": "16"}},
                        {"quantization": {"quant_algo": 4}}, {"quant_algo": "NVFP4", "group_size": 2**64}]) | json_values,
       st.sampled_from(sorted(BASES)))
def test_hf_quant_config(quant: Any, base: str) -> None:
    check_config(json.dumps(BASES[base]).encode(), json.dumps(quant).encode())


# ------------------------------------------------------- the whole audit and plan of a fetched checkpoint

_SHAPES = qwen3_tensor_shapes(DENSE)
_SPECS = [(n, "BF16", tuple(s)) for n, s in _SHAPES.items()]
_HEAD, _DATA = header_bytes(_SPECS, {"format": "pt"})
_INDEX = json.dumps({"metadata": {"total_size": _DATA}, "weight_map": dict.fromkeys(_SHAPES, "model.safetensors")}).encode()


def fetched(config: bytes) -> FetchedFiles:
    """The dense tiny model as a Hub preflight holds it, with ``config`` as its config.json."""
    return FetchedFiles(
        location="hf://acme/m@" + "ab" * 20, name="m",
        files={"config.json": len(config), "model.safetensors.index.json": len(_INDEX),
               "model.safetensors": len(_HEAD) + _DATA},
        small={"config.json": config, "model.safetensors.index.json": _INDEX},
        shards={"model.safetensors": RemoteShard(size=len(_HEAD) + _DATA, header=_HEAD[8:])},
    )


@settings(FUZZ, max_examples=600)
@given(mutated_configs(), st.sampled_from([CPU, SPARK]), st.sampled_from([None, 1, 10**9, 2**62]))
def test_audit_and_plan_of_a_fetched_checkpoint(case: tuple[str, dict[str, Any]], host: Any, pool: int | None) -> None:
    """The path ``roost audit hf://...`` and ``roost plan hf://...`` take: parsed, checked, planned and
    printed, or refused in one line."""
    _, cfg = case
    try:
        report = audit_for_host(fetched(json.dumps(cfg).encode()), host)
        report.summary()
        json.dumps(report.to_json())
        plan = plan_checkpoint(report, host, PlanInputs(kv_cache_memory_bytes=pool))
    except UserError as exc:
        assert_one_line_message(exc, max_chars=2_000)
        event("audit or plan refused")
        return
    event(f"planned: {len(report.findings)} finding(s)")
    plan.summary()
    json.dumps(plan.to_json())
    plan.refusal()


# ------------------------------------------------------------------------- named cases (found by hand)


def _with(**fields: Any) -> bytes:
    return json.dumps(dict(DENSE, **fields)).encode()


@pytest.mark.parametrize(("data", "match"), [
    (_with(num_hidden_layers=2**64), r"field 'num_hidden_layers' is 1\.845e\+19, more than any model has \(at most 10,000\)"),
    (_with(num_hidden_layers=10**40).replace(b"1" + b"0" * 40, b"9" * 5000), r"config\.json: not valid JSON"),
    (b"[" * 100_000 + b"]" * 100_000, r"config\.json: not valid JSON"),
    (_with(vocab_size=2**70), r"field 'vocab_size' is 1\.181e\+21, more than any model has"),
    (_with(num_attention_heads=2**63), r"field 'num_attention_heads' is 9,223,372,036,854,775,808, more than any"),
    (_with(rope_scaling="x"), r"field 'rope_scaling' must be an object or null, got 'x'"),
    (_with(quantization_config=3), r"field 'quantization_config' must be an object, got 3"),
    (_with(num_attention_heads=16, num_key_value_heads=3), r"num_key_value_heads \(3\) must divide num_attention_heads \(16\)"),
    (json.dumps({**{k: v for k, v in DENSE.items() if k != "head_dim"}, "hidden_size": 2}).encode(),
     r"hidden_size \(2\) is smaller than num_attention_heads \(4\) and there is no head_dim"),
    (_with(mamba_ssm_dtype=3), r"field 'mamba_ssm_dtype' must be a name"),
    (_with(architectures=["\ud800"]), r"field 'architectures' must list class names"),
    (_with(text_config=[1]), r"field 'text_config' must be an object"),
    (_with(tie_word_embeddings="yes"), r"field 'tie_word_embeddings' must be true or false"),
    (_with(torch_dtype={"x": 1}), r"field 'torch_dtype' must be a name"),
    (_with(quantization_config={"quant_method": "fp8", "group_size": "16"}),
     r"quantization_config\.group_size must be a positive integer, got '16'"),
    (_with(rope_theta=-1), r"field 'rope_theta' must be a positive number"),
    (_with(sliding_window="4096"), r"field 'sliding_window' must be a whole number >= 0"),
    (b'{"a": 1}' + b" " * CONFIG_LIMIT, r"bytes, more than the 16,777,216 a checkpoint's metadata file may hold"),
])
def test_named_cases(data: bytes, match: str) -> None:
    with pytest.raises(UserError, match=match) as e:
        config_from_bytes(data, WHERE)
    assert_one_line_message(e.value, max_chars=2_000)
    assert str(e.value).startswith(WHERE)
