"""The model config a checkpoint declares: the few numbers of ``config.json`` the audit and the KV plan need.

``load_config`` reads ``config.json`` (fields at top level or under ``text_config``, as multimodal
configs nest them) and, when ModelOpt ships one, ``hf_quant_config.json``. A missing or malformed
field is a :class:`~roost.errors.UserError` naming it (exit 2).

``config_from_bytes`` is the pure parse (bytes in, :class:`ModelConfigInfo` or a UserError out): a
local directory and a Hub preflight both end there. The JSON is parsed with bounded depth and
numbers (:mod:`roost.inputs.jsondoc`); every field read is type-checked, every count bounded by
``BOUNDS`` (far above any real model, so that a corrupt value is refused instead of being allocated
or multiplied), and what vLLM refuses to build is refused here too (KV heads that do not divide the
attention heads, a head size of 0).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, Field

from roost.checkpoint.files import (
    CONFIG_LIMIT,
    CONFIG_NAME,
    QUANT_CONFIG_NAME,
    CheckpointFiles,
    LocalFiles,
    too_large,
)
from roost.errors import UserError
from roost.inputs.jsondoc import parse_object
from roost.inputs.text import shown

LayerType = Literal["full_attention", "linear_attention", "sliding_attention"]
MtpStyle = Literal["none", "mtp_prefix", "extra_layers"]


class GdnDims(BaseModel):
    """Gated-delta-net (linear attention) dimensions, as vLLM's state-shape calculator reads them."""

    num_k_heads: int
    num_v_heads: int
    head_k_dim: int
    head_v_dim: int
    conv_kernel: int


class ModelConfigInfo(BaseModel):
    """The fields of ``config.json`` that the audit and the KV plan rely on."""

    architecture: str
    model_type: str
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int
    layer_types: list[LayerType]
    dtype: str = "bfloat16"
    tie_word_embeddings: bool = False
    num_experts: int = 0
    num_experts_per_tok: int = 0
    intermediate_size: int = Field(default=0, description="Dense MLP width (0: none declared).")
    moe_intermediate_size: int = Field(default=0, description="One routed expert's MLP width (0: not MoE).")
    shared_expert_intermediate_size: int = Field(default=0, description="The shared expert's MLP width (0: none).")
    mtp_num_hidden_layers: int = 0
    mtp_style: MtpStyle = "none"
    has_vision_config: bool = False
    vision_depth: int | None = None
    gdn: GdnDims | None = None
    mamba_ssm_dtype: str | None = None
    sliding_window: int | None = None
    quantization: dict[str, Any] | None = None

    @property
    def full_attention_layers(self) -> int:
        return sum(t == "full_attention" for t in self.layer_types)

    @property
    def linear_attention_layers(self) -> int:
        return sum(t == "linear_attention" for t in self.layer_types)


# The largest value each integer field may hold, and why. Each is far above every released model (the
# largest known in brackets), so none refuses a real checkpoint; what they keep out is a corrupt or
# hostile value that roost would otherwise allocate (one list entry per layer) or multiply into the KV
# plan. Within them every derived figure is an exact Python integer far from a float's range.
MAX_LAYERS = 10_000
"""Decoder layers, MTP layers, vision depth, full_attention_interval [Llama 3.1 405B: 126; GPT-3: 96]."""
MAX_HIDDEN = 1 << 20
"""hidden_size [PaLM 540B: 18,432]."""
MAX_HEADS = 1 << 16
"""Attention, KV and gated-delta-net heads [DeepSeek-V3, Llama 3.1 405B: 128]."""
MAX_HEAD_DIM = 1 << 14
"""head_dim and gated-delta-net head dims [Gemma: 256; DeepSeek MLA: 576]."""
MAX_VOCAB = 1 << 24
"""vocab_size [Gemma 3: 262,144]."""
MAX_POSITIONS = 1 << 32
"""max_position_embeddings and sliding_window [Llama 4 Scout: 10,485,760]."""
MAX_EXPERTS = 1 << 16
"""Routed experts and experts per token [Kimi K2: 384]."""
MAX_CONV_KERNEL = 1 << 10
"""Gated-delta-net conv kernel [Qwen3-Next: 4]."""
MAX_GROUP_SIZE = 1 << 16
"""quantization group size [NVFP4: 16; GPTQ/AWQ: 128]."""
MAX_NAME = 256
"""Characters of a class, model-type or dtype name [the longest architectures entries: ~40]."""

_REMEDY = "fix config.json or re-download the checkpoint"


def _r(value: object) -> str:
    """An outside value as a message echoes it (its repr, one line, cut when long)."""
    if type(value) is int and value.bit_length() > 200:  # repr() refuses past 4,300 digits
        return _amount(abs(value)) if value > 0 else f"minus {_amount(-value)}"
    return shown(repr(value))


def _amount(n: int) -> str:
    return f"{n:,}" if n.bit_length() <= 200 else f"a {n.bit_length()}-bit number"


def load_config(model_dir: Path) -> ModelConfigInfo:
    """Parse ``model_dir/config.json`` (and ``hf_quant_config.json`` when ModelOpt ships one)."""
    return config_of(LocalFiles(model_dir))


def config_of(files: CheckpointFiles) -> ModelConfigInfo:
    """Parse the checkpoint's ``config.json`` (and ``hf_quant_config.json`` when ModelOpt ships one)."""
    where = files.where(CONFIG_NAME)
    data = files.read_small(CONFIG_NAME)
    if data is None:
        raise UserError(f"{shown(where)}: not found; a Hugging Face checkpoint directory needs its config.json")
    quant = files.read_small(QUANT_CONFIG_NAME)
    return config_from_bytes(data, where, quant, files.where(QUANT_CONFIG_NAME))


def config_from_bytes(data: bytes, where: str = CONFIG_NAME, quant: bytes | None = None,
                      quant_where: str = QUANT_CONFIG_NAME) -> ModelConfigInfo:
    """The config in ``data`` (``config.json``'s bytes) and ``quant`` (``hf_quant_config.json``'s, when
    shipped), or the one-line UserError naming ``where`` and the field. Pure: no I/O."""
    if len(data) > CONFIG_LIMIT:
        raise too_large(where, len(data), CONFIG_LIMIT)
    raw = parse_object(data, shown(where), "re-download config.json")
    extra_quant: dict[str, Any] | None = None
    if quant is not None:
        if len(quant) > CONFIG_LIMIT:
            raise too_large(quant_where, len(quant), CONFIG_LIMIT)
        q = parse_object(quant, shown(quant_where), "re-download hf_quant_config.json")
        inner = q.get("quantization", q)
        if not isinstance(inner, dict):
            raise UserError(f"{shown(quant_where)}: field 'quantization' must be an object, got {_r(inner)}; "
                            "fix or re-download hf_quant_config.json")
        extra_quant = _checked_quant(inner, shown(quant_where), "quantization")
    return parse_config(raw, source=where, extra_quant=extra_quant)


def _checked_quant(q: dict[str, Any], source: str, name: str) -> dict[str, Any]:
    """A quantization object whose fields roost reads have their types (a UserError naming them otherwise)."""
    for key in ("quant_method", "quant_algo", "kv_cache_quant_algo"):
        v = q.get(key)
        if v is not None and not _is_text(v):
            raise UserError(f"{source}: {name}.{key} must be a string, got {_r(v)}; {_REMEDY}")
    g = q.get("group_size")
    # -1 is GPTQ/AWQ's "one group per channel"
    if g is not None and (type(g) is not int or not (g == -1 or 1 <= g <= MAX_GROUP_SIZE)):
        kind = "a positive integer" if type(g) is not int else f"a positive integer no larger than {MAX_GROUP_SIZE:,}"
        raise UserError(f"{source}: {name}.group_size must be {kind}, got {_r(g)}; {_REMEDY}")
    nested = q.get("quantization")
    if nested is not None:
        if not isinstance(nested, dict):
            raise UserError(f"{source}: {name}.quantization must be an object, got {_r(nested)}; {_REMEDY}")
        _checked_quant(nested, source, f"{name}.quantization")
    return q


def _is_text(v: object) -> bool:
    """A string a message and a report can print: valid Unicode (no lone surrogate), not absurdly long."""
    if not isinstance(v, str) or len(v) > MAX_NAME:
        return False
    try:
        v.encode()
    except UnicodeEncodeError:
        return False
    return True


@dataclass(frozen=True)
class _Fields:
    """The fields of one ``config.json`` as :func:`parse_config` reads them: ``text_config``'s first, then
    the top level's (multimodal configs nest the text model's fields). Every read is type-checked and
    bounded; a bad field is a one-line UserError naming it, where it was read and ``src``."""

    raw: Mapping[str, Any]
    text: Mapping[str, Any]
    src: str

    def find(self, *keys: str) -> tuple[str, Any]:
        """(the key found, its value): text_config's first, then the top level's; None when absent."""
        for d in (self.text, self.raw):
            for k in keys:
                v = d.get(k)
                if v is not None:
                    return k, v
        return keys[0], None

    def at(self, key: str) -> str:
        """Where the field was read, when under text_config (a message's tail)."""
        return " (in text_config)" if self.text.get(key) is not None else ""

    def get(self, *keys: str) -> Any:
        return self.find(*keys)[1]

    def bounded(self, key: str, v: Any, low: int, high: int, where: str | None = None) -> int:
        """``v``, read as ``key``, as a whole number in [low, high]; ``where`` replaces the "(in text_config)"
        tail of a message (for fields read elsewhere)."""
        src = self.src
        tail = self.at(key) if where is None else where
        name = f"{key!r}{tail}"
        if type(v) is float and math.isfinite(v) and v.is_integer() and v > high:  # orjson reads 2**64 and up as floats
            raise UserError(f"{src}: field {name} is {v:.4g}, more than any model has (at most {high:,}); "
                            f"the config is corrupt — {_REMEDY}")
        if type(v) is not int or v < low:
            kind = "a positive integer" if low == 1 else f"a whole number >= {low}"
            raise UserError(f"{src}: field {key!r} must be {kind}, got {_r(v)}{tail}; {_REMEDY}")
        if v > high:
            raise UserError(f"{src}: field {name} is {_amount(v)}, more than any model has (at most {high:,}); "
                            f"the config is corrupt — {_REMEDY}")
        return v

    def need_int(self, *keys: str, high: int) -> int:
        name, v = self.find(*keys)
        if v is None:
            raise UserError(
                f"{self.src}: missing field {keys[0]!r} (looked at the top level and under text_config); "
                "the checkpoint's config.json is incomplete"
            )
        return self.bounded(name, v, 1, high)

    def opt_int(self, *keys: str, high: int) -> int:
        """An optional count: 0 when absent or null, a UserError naming the field when not a whole number >= 0."""
        name, v = self.find(*keys)
        if v is None or v is False:
            return 0
        return self.bounded(name, v, 0, high)

    def opt_text(self, *keys: str) -> str | None:
        key, v = self.find(*keys)
        if v is not None and not _is_text(v):
            raise UserError(f"{self.src}: field {key!r}{self.at(key)} must be a name (a string of at most {MAX_NAME} "
                            f"characters), got {_r(v)}; {_REMEDY}")
        return str(v) if v is not None else None

    def opt_bool(self, *keys: str) -> bool | None:
        key, v = self.find(*keys)
        if v is not None and type(v) is not bool:
            raise UserError(f"{self.src}: field {key!r}{self.at(key)} must be true or false, got {_r(v)}; {_REMEDY}")
        return bool(v) if v is not None else None


class _TextShape(NamedTuple):
    """The text model's sizes: layers, widths, heads, vocabulary and window."""

    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    vocab_size: int
    max_position_embeddings: int


def parse_config(raw: Mapping[str, Any], source: str = "config.json", extra_quant: dict[str, Any] | None = None) -> ModelConfigInfo:
    """Build a :class:`ModelConfigInfo` from a config dict; a missing, mistyped or out-of-range field is a
    one-line UserError naming it."""
    # The steps run in this order so that, of several bad fields, the same one is reported first.
    src = shown(str(source))
    f = _Fields(raw, _text_config(raw, src), src)
    architecture = _architecture(raw, src)
    shape = _text_shape(f)
    layer_types = _layer_types(f, shape.num_hidden_layers)
    gdn = _gdn_dims(f) if "linear_attention" in layer_types else None
    num_experts, top_k = _experts(f)
    mtp_n, mtp_style = _mtp(f)
    has_vision, vision_depth = _vision(f)
    for scope in (raw, f.text):
        _check_rope(scope, src, "text_config." if scope is f.text else "")
    dtype = f.opt_text("torch_dtype", "dtype") or "bfloat16"
    quant = _quantization(f) or extra_quant
    tie = _tie_word_embeddings(f)
    model_type = _model_type(f)
    sliding_window = _sliding_window(f, layer_types)
    return ModelConfigInfo(
        architecture=architecture,
        model_type=model_type,
        **shape._asdict(),
        layer_types=layer_types,
        dtype=dtype,
        tie_word_embeddings=tie,
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        intermediate_size=f.opt_int("intermediate_size", high=MAX_HIDDEN * 64),
        moe_intermediate_size=f.opt_int("moe_intermediate_size", high=MAX_HIDDEN * 64),
        shared_expert_intermediate_size=f.opt_int("shared_expert_intermediate_size", high=MAX_HIDDEN * 64),
        mtp_num_hidden_layers=mtp_n,
        mtp_style=mtp_style,
        has_vision_config=has_vision,
        vision_depth=vision_depth,
        gdn=gdn,
        mamba_ssm_dtype=f.opt_text("mamba_ssm_dtype"),
        sliding_window=sliding_window,
        quantization=quant,
    )


def _text_config(raw: Mapping[str, Any], src: str) -> Mapping[str, Any]:
    """``text_config`` (multimodal configs nest the text model's fields there): an object, or empty."""
    text = raw.get("text_config")
    if text is not None and not isinstance(text, dict):
        raise UserError(f"{src}: field 'text_config' must be an object, got {_r(text)}; {_REMEDY}")
    return text or {}


def _architecture(raw: Mapping[str, Any], src: str) -> str:
    """The model class vLLM builds: the first entry of ``architectures``."""
    archs = raw.get("architectures")
    if not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        raise UserError(f"{src}: missing field 'architectures' (a list naming the model class); {_REMEDY}")
    if not all(_is_text(a) for a in archs):
        raise UserError(f"{src}: field 'architectures' must list class names (strings of at most {MAX_NAME} "
                        f"characters), got {_r(archs)}; {_REMEDY}")
    return archs[0]


def _text_shape(f: _Fields) -> _TextShape:
    """The text model's sizes, refusing what vLLM refuses to build (KV heads that do not divide the
    attention heads, a head size of 0)."""
    src = f.src
    n_layers = f.need_int("num_hidden_layers", "n_layer", "num_layers", high=MAX_LAYERS)
    hidden = f.need_int("hidden_size", "n_embd", "d_model", high=MAX_HIDDEN)
    heads = f.need_int("num_attention_heads", "n_head", high=MAX_HEADS)
    kv_heads = heads if f.get("num_key_value_heads") is None else f.need_int("num_key_value_heads", high=MAX_HEADS)
    if heads % kv_heads:
        raise UserError(
            f"{src}: num_key_value_heads ({kv_heads:,}) must divide num_attention_heads ({heads:,}): each KV head "
            f"serves a whole group of query heads, and vLLM refuses this config — {_REMEDY}"
        )
    if f.get("head_dim") is None:
        head_dim = hidden // heads
        if head_dim == 0:
            raise UserError(
                f"{src}: hidden_size ({hidden:,}) is smaller than num_attention_heads ({heads:,}) and there is no "
                f"head_dim, so each head would have 0 dimensions; set head_dim — {_REMEDY}"
            )
    else:
        head_dim = f.need_int("head_dim", high=MAX_HEAD_DIM)
    vocab = f.need_int("vocab_size", high=MAX_VOCAB)
    max_pos = f.need_int("max_position_embeddings", "n_positions", "max_seq_len", high=MAX_POSITIONS)
    return _TextShape(n_layers, hidden, heads, kv_heads, head_dim, vocab, max_pos)


def _layer_types(f: _Fields, n_layers: int) -> list[LayerType]:
    """One attention kind per decoder layer: from ``layer_types`` (vLLM's and the families' spellings), else
    every ``full_attention_interval``-th layer full and the rest linear, else all full attention."""
    layer_types_raw = f.get("layer_types")
    interval_name, interval = f.find("full_attention_interval")
    if layer_types_raw is not None:
        if not isinstance(layer_types_raw, list) or len(layer_types_raw) != n_layers:
            raise UserError(
                f"{f.src}: layer_types must list one entry per layer ({n_layers}), "
                f"got {len(layer_types_raw) if isinstance(layer_types_raw, list) else type(layer_types_raw).__name__}"
                f"; {_REMEDY}"
            )
        layer_types: list[LayerType] = []
        for i, t in enumerate(layer_types_raw):
            if t in ("full_attention", "attention"):
                layer_types.append("full_attention")
            elif t in ("linear_attention", "mamba", "gated_delta_net"):
                layer_types.append("linear_attention")
            elif t in ("sliding_attention", "sliding_window"):
                layer_types.append("sliding_attention")
            else:
                raise UserError(f"{f.src}: layer_types[{i}] = {_r(t)} is not a known layer type; {_REMEDY}")
        return layer_types
    if interval is not None:
        interval = f.bounded(interval_name, interval, 1, MAX_LAYERS)
        return ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n_layers)]
    return ["full_attention"] * n_layers


def _gdn_dims(f: _Fields) -> GdnDims:
    """The gated-delta-net dimensions a model with linear-attention layers must declare."""
    return GdnDims(
        num_k_heads=f.need_int("linear_num_key_heads", high=MAX_HEADS),
        num_v_heads=f.need_int("linear_num_value_heads", high=MAX_HEADS),
        head_k_dim=f.need_int("linear_key_head_dim", high=MAX_HEAD_DIM),
        head_v_dim=f.need_int("linear_value_head_dim", high=MAX_HEAD_DIM),
        conv_kernel=f.need_int("linear_conv_kernel_dim", high=MAX_CONV_KERNEL),
    )


def _experts(f: _Fields) -> tuple[int, int]:
    """(routed experts, experts per token), both 0 for a dense model; a MoE config must name both."""
    num_experts = f.opt_int("num_experts", "num_local_experts", "n_routed_experts", high=MAX_EXPERTS)
    top_k = f.opt_int("num_experts_per_tok", "moe_topk", "top_k", high=MAX_EXPERTS)
    if num_experts and not top_k:
        raise UserError(f"{f.src}: MoE config (num_experts={num_experts}) lacks num_experts_per_tok; {_REMEDY}")
    return num_experts, top_k


def _mtp(f: _Fields) -> tuple[int, MtpStyle]:
    """(MTP layers, how they are declared): ``mtp_num_hidden_layers`` (an ``mtp.`` prefix) first, else
    ``num_nextn_predict_layers`` (extra decoder layers), else none."""
    mtp_prefix = f.opt_int("mtp_num_hidden_layers", high=MAX_LAYERS)
    nextn = f.opt_int("num_nextn_predict_layers", high=MAX_LAYERS)
    if mtp_prefix:
        return mtp_prefix, "mtp_prefix"
    if nextn:
        return nextn, "extra_layers"
    return 0, "none"


def _vision(f: _Fields) -> tuple[bool, int | None]:
    """(whether the config declares a vision tower, its depth when given)."""
    vision = f.raw.get("vision_config")
    if vision is None:
        return False, None
    if not isinstance(vision, dict):
        raise UserError(f"{f.src}: field 'vision_config' must be an object, got {_r(vision)}; {_REMEDY}")
    for key in ("depth", "num_hidden_layers"):
        if vision.get(key) is not None:
            return True, f.bounded(f"vision_config.{key}", vision[key], 0, MAX_LAYERS, "")
    return True, None


def _quantization(f: _Fields) -> dict[str, Any] | None:
    """``quantization_config`` at the top level, else under ``text_config`` (both checked); None when neither."""
    quant = None
    for scope, prefix in ((f.raw, ""), (f.text, "text_config.")):
        q = scope.get("quantization_config")
        if q is not None and not isinstance(q, dict):
            raise UserError(f"{f.src}: field '{prefix}quantization_config' must be an object, got {_r(q)}; {_REMEDY}")
        if q:
            _checked_quant(q, f.src, f"{prefix}quantization_config")
            quant = quant or q
    return quant


def _tie_word_embeddings(f: _Fields) -> bool:
    """``tie_word_embeddings`` at the top level, else under ``text_config``; false when absent."""
    tie = f.raw.get("tie_word_embeddings")
    if tie is None:
        tie = f.text.get("tie_word_embeddings", False)
    if tie is not None and type(tie) is not bool:
        raise UserError(f"{f.src}: field 'tie_word_embeddings' must be true or false, got {_r(tie)}; {_REMEDY}")
    return bool(tie)


def _model_type(f: _Fields) -> str:
    """``model_type`` at the top level, else under ``text_config`` (both checked); empty when absent."""
    for scope, prefix in ((f.raw, ""), (f.text, "text_config.")):
        mt = scope.get("model_type")
        if mt is not None and not _is_text(mt):
            raise UserError(f"{f.src}: field '{prefix}model_type' must be a name (a string of at most {MAX_NAME} "
                            f"characters), got {_r(mt)}; {_REMEDY}")
    return f.raw.get("model_type") or f.text.get("model_type") or ""


def _sliding_window(f: _Fields, layer_types: list[LayerType]) -> int | None:
    """The sliding window, kept only when some layer slides or ``use_sliding_window`` is on (both fields are
    checked either way)."""
    sliding_name, sliding_v = f.find("sliding_window")
    sliding_window = None if sliding_v is None else f.bounded(sliding_name, sliding_v, 0, MAX_POSITIONS)
    use_sliding = f.opt_bool("use_sliding_window")
    return sliding_window if "sliding_attention" in layer_types or use_sliding else None


def _check_rope(d: Mapping[str, Any], src: str, prefix: str) -> None:
    """``rope_scaling`` / ``rope_parameters``: an object (or null) whose type is a name and factor a positive
    number; ``rope_theta`` a positive number. vLLM builds the rotary embedding from them."""
    theta = d.get("rope_theta")
    if theta is not None and not _positive_number(theta):
        raise UserError(f"{src}: field '{prefix}rope_theta' must be a positive number, got {_r(theta)}; {_REMEDY}")
    for key in ("rope_scaling", "rope_parameters"):
        v = d.get(key)
        if v is None:
            continue
        if not isinstance(v, dict):
            raise UserError(f"{src}: field '{prefix}{key}' must be an object or null, got {_r(v)}; {_REMEDY}")
        for sub in ("rope_type", "type"):
            t = v.get(sub)
            if t is not None and not _is_text(t):
                raise UserError(f"{src}: field '{prefix}{key}.{sub}' must be a name, got {_r(t)}; {_REMEDY}")
        for sub in ("factor", "rope_theta"):
            f = v.get(sub)
            if f is not None and not _positive_number(f):
                raise UserError(f"{src}: field '{prefix}{key}.{sub}' must be a positive number, got {_r(f)}; {_REMEDY}")


def _positive_number(v: object) -> bool:
    """A JSON number above 0: a positive int (of any size), or a finite positive float (not a bool)."""
    if type(v) is int:
        return v > 0
    return type(v) is float and math.isfinite(v) and v > 0


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "fp8": 1, "float8_e4m3fn": 1}


def dtype_bytes(name: str) -> int:
    """Bytes per element of a torch dtype name as configs spell it (bfloat16 -> 2)."""
    try:
        return DTYPE_BYTES[name.removeprefix("torch.")]
    except KeyError:
        raise UserError(f"unsupported dtype {_r(name)}: use bfloat16, float16 or float32") from None
