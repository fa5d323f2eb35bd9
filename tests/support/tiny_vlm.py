"""A tiny random-weight vision-language checkpoint vLLM on this CPU can serve: BLIP-2 (a 2-block ViT,
a 2-layer Q-Former with 4 query tokens, a 2-layer OPT), test-only.

Why BLIP-2: vLLM 0.32's CPU venv has no working torchvision (PyPI's wheel for torch 2.13 is a CUDA
build), and the LLaVA, PaliGemma, Qwen2/2.5/3-VL, Gemma 3, InternVL and LLaVA-NeXT paths all import
it (directly or through ``vllm/model_executor/models/vision.py`` -> pixtral). BLIP-2's vLLM model
and transformers' PIL image processor (``BlipImageProcessorPil``) do not.

Two steps: :func:`write_tiny_blip2` runs in roost's venv (it writes the byte-level BPE tokenizer with
``roost.demo.model``), then runs this file with the vLLM venv's Python, which has torch and
transformers, to build the model from a config (``save_pretrained``, bf16) and the processor files.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

IMAGE_TOKEN = "<image>"
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def write_tiny_blip2(out_dir: Path, vllm_python: Path, *, timeout_s: float = 600.0) -> Path:
    """Write the checkpoint to ``out_dir``; return it."""
    from roost.demo.model import train_tokenizer

    out_dir.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer()
    tok.add_special_tokens([IMAGE_TOKEN])
    tok.save(str(out_dir / "tokenizer.json"))
    subprocess.run([str(vllm_python), __file__, str(out_dir)], check=True, timeout=timeout_s,
                   capture_output=True, env={"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PATH": "/usr/bin:/bin"})
    return out_dir


def _build(out_dir: Path) -> None:  # pragma: no cover - runs in the vLLM venv
    import torch
    from tokenizers import Tokenizer
    from transformers import (
        Blip2Config,
        Blip2ForConditionalGeneration,
        Blip2Processor,
        Blip2QFormerConfig,
        Blip2VisionConfig,
        OPTConfig,
        PreTrainedTokenizerFast,
    )
    from transformers.models.blip.image_processing_pil_blip import BlipImageProcessorPil

    fast = PreTrainedTokenizerFast(tokenizer_object=Tokenizer.from_file(str(out_dir / "tokenizer.json")),
                                   bos_token="<|endoftext|>", eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.image_token = IMAGE_TOKEN
    processor = Blip2Processor(image_processor=BlipImageProcessorPil(size={"height": 56, "width": 56}),
                               tokenizer=fast, num_query_tokens=4, chat_template=CHAT_TEMPLATE)
    vocab = -(-len(fast) // 64) * 64
    torch.manual_seed(0)
    cfg = Blip2Config(
        vision_config=Blip2VisionConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                        num_attention_heads=2, image_size=56, patch_size=14),
        qformer_config=Blip2QFormerConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                          intermediate_size=128, encoder_hidden_size=64, vocab_size=vocab),
        text_config=OPTConfig(vocab_size=vocab, hidden_size=128, ffn_dim=256, num_hidden_layers=2,
                              num_attention_heads=4, word_embed_proj_dim=128, max_position_embeddings=2048,
                              bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id,
                              pad_token_id=fast.pad_token_id),
        num_query_tokens=4, image_token_index=fast.convert_tokens_to_ids(IMAGE_TOKEN))
    Blip2ForConditionalGeneration(cfg).to(torch.bfloat16).save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)


if __name__ == "__main__":
    _build(Path(sys.argv[1]))
