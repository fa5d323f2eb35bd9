"""Generate a tiny random-weight Qwen3-style checkpoint in Hugging Face format.

What it writes is a real checkpoint as the Hub serves them: ``config.json``,
``generation_config.json``, ``tokenizer.json`` (a byte-level BPE trained on the Python standard
library's source) + ``tokenizer_config.json`` with a ChatML chat template that honours
``enable_thinking`` the way Ornith's does, and BF16 weights in sharded safetensors with
``model.safetensors.index.json``, written by :mod:`roost.checkpoint.writer`. Nothing here needs
torch: weights are drawn with numpy.

Deterministic: the same ``seed`` gives byte-identical files, so the Hub commit and every cache
key downstream are stable across runs.

``numpy`` and ``tokenizers`` belong to roost's ``demo`` extra: they are imported where they are used,
so importing this module (``flows.stages`` does, through ``tasks.local_hub``) works on a worker that
installed roost without the extra.
"""

from __future__ import annotations

import json
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from roost.checkpoint.writer import TensorSpec

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# ChatML; with enable_thinking false the assistant turn opens with an empty think pair, as Ornith's.
CHAT_TEMPLATE = (
    "{%- for message in messages -%}"
    "{%- if message['content'] is string -%}{%- set content = message['content'] -%}"
    "{%- else -%}{%- set content = message['content'] | selectattr('type', 'equalto', 'text')"
    " | map(attribute='text') | join('') -%}{%- endif -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + content + '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}{{ '<think>\\n\\n</think>\\n\\n' }}"
    "{%- else -%}{{ '<think>\\n' }}{%- endif -%}{%- endif -%}"
)

TINY_QWEN3: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0,
    "rope_scaling": None,
    "attention_bias": False,
    "attention_dropout": 0.0,
    "tie_word_embeddings": False,
    "use_cache": True,
    "use_sliding_window": False,
    "sliding_window": None,
    "max_window_layers": 4,
    "torch_dtype": "bfloat16",
}


def _corpus(max_bytes: int = 2_000_000) -> list[str]:
    """Deterministic training text: the standard library's own source, sorted by path."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    out: list[str] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="ignore")
        out.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    return out


def train_tokenizer(vocab_size: int = 2048) -> Tokenizer:
    """A byte-level BPE (GPT-2 style pre-tokenizer) with the chat special tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # the demo extra

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    return tok


def qwen3_tensor_shapes(cfg: dict[str, Any]) -> dict[str, list[int]]:
    """Hugging Face tensor names and shapes of a Qwen3ForCausalLM."""
    h, inter, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    d, qh, kvh = cfg["head_dim"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    shapes: dict[str, list[int]] = {"model.embed_tokens.weight": [v, h]}
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes |= {
            p + "input_layernorm.weight": [h],
            p + "self_attn.q_proj.weight": [qh * d, h],
            p + "self_attn.k_proj.weight": [kvh * d, h],
            p + "self_attn.v_proj.weight": [kvh * d, h],
            p + "self_attn.o_proj.weight": [h, qh * d],
            p + "self_attn.q_norm.weight": [d],
            p + "self_attn.k_norm.weight": [d],
            p + "post_attention_layernorm.weight": [h],
            p + "mlp.gate_proj.weight": [inter, h],
            p + "mlp.up_proj.weight": [inter, h],
            p + "mlp.down_proj.weight": [h, inter],
        }
    shapes["model.norm.weight"] = [h]
    if not cfg.get("tie_word_embeddings"):
        shapes["lm_head.weight"] = [v, h]
    return shapes


def generate_tiny_model(out_dir: Path, *, seed: int = 0, num_shards: int = 2,
                        overrides: dict[str, Any] | None = None) -> Path:
    """Write a tiny random-weight Qwen3 checkpoint to ``out_dir`` and return it.

    ``overrides`` patches the config (e.g. ``{"num_hidden_layers": 2}``). Norm weights are ones,
    everything else N(0, 0.02) in BF16.
    """
    import numpy as np  # the demo extra, as roost.checkpoint.writer's numpy

    from roost.checkpoint.writer import to_bf16_bytes, write_shards

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    vocab = tok.get_vocab_size()
    cfg = dict(TINY_QWEN3) | (overrides or {})
    cfg["vocab_size"] = -(-vocab // 64) * 64
    ids = {t: tok.token_to_id(t) for t in SPECIAL_TOKENS}
    cfg["bos_token_id"] = ids["<|endoftext|>"]
    cfg["eos_token_id"] = ids["<|im_end|>"]

    rng = np.random.default_rng(seed)

    def weights(name: str, dtype: str, shape: tuple[int, ...]) -> bytes:
        """Norms are ones, everything else N(0, 0.02): drawn in tensor order, so the seed fixes every byte."""
        if name.endswith("norm.weight"):
            return to_bf16_bytes(np.ones(shape, dtype=np.float32))
        return to_bf16_bytes(rng.normal(0.0, 0.02, size=shape).astype(np.float32))

    tensors: list[TensorSpec] = [(name, "BF16", tuple(shape)) for name, shape in qwen3_tensor_shapes(cfg).items()]
    per_shard = -(-len(tensors) // num_shards)
    shards = [tensors[s * per_shard:(s + 1) * per_shard] for s in range(num_shards)]
    write_shards(out_dir, shards, weights, index=True)
    _write_json(out_dir / "config.json", cfg)
    _write_json(out_dir / "generation_config.json", {
        "bos_token_id": ids["<|endoftext|>"], "eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]],
        "pad_token_id": ids["<|endoftext|>"], "do_sample": False,
    })
    tok.save(str(out_dir / "tokenizer.json"))
    _write_json(out_dir / "tokenizer_config.json", {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": cfg["max_position_embeddings"],
        "add_bos_token": False,
        "chat_template": CHAT_TEMPLATE,
    })
    (out_dir / "README.md").write_text(
        "---\nlicense: mit\nlibrary_name: transformers\n---\n# roost tiny demo model\n\n"
        f"Random weights (seed {seed}); {len(tensors)} tensors in {num_shards} shards. For testing roost only.\n"
    )
    return out_dir


def _write_json(path: Path, obj: Any) -> None:
    path.write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")
