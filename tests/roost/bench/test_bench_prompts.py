"""Prompts of an exact token count: with the demo model's real BPE tokenizer and chat template, and
against a server's /tokenize (the synthetic one here; the real vLLM in test_bench_vs_vllm.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import jinja2
import pytest
from bench_synthetic import Synthetic
from tokenizers import Tokenizer

from roost.bench.prompts import PromptBuilder, PromptError, ServerTokenizer, UsageProbeCounter
from roost.demo.model import CHAT_TEMPLATE, generate_tiny_model
from roost.vllm.client import VllmClient


class TemplateBPECounter:
    """The demo checkpoint's own tokenizer.json and chat template, rendered as vLLM renders them."""

    def __init__(self, model_dir: Path, enable_thinking: bool = False) -> None:
        self.tok = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self.template = jinja2.Environment().from_string(CHAT_TEMPLATE)
        self.enable_thinking = enable_thinking
        self.calls = 0

    async def count(self, messages: list[dict[str, str]]) -> int:
        self.calls += 1
        text = self.template.render(messages=messages, add_generation_prompt=True, enable_thinking=self.enable_thinking)
        return len(self.tok.encode(text, add_special_tokens=False).ids)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return generate_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.mark.parametrize("thinking", [False, True])
def test_exact_counts_with_a_real_bpe_tokenizer(model_dir: Path, thinking: bool) -> None:
    counter = TemplateBPECounter(model_dir, enable_thinking=thinking)
    builder = PromptBuilder(counter, seed=1)

    async def go() -> None:
        for target in (40, 128, 129, 500, 1024, 1984, 8000):
            for i in range(3):
                before = counter.calls
                p = await builder.build(target, f"{target:x}{i}abc")
                assert p.exact and p.prompt_tokens == target
                assert await counter.count(p.messages) == target
                if i:  # the same length again, another nonce: reuses the search
                    assert counter.calls - before <= 3

    asyncio.run(go())


def test_prompts_are_unique_from_their_first_tokens(model_dir: Path) -> None:
    builder = PromptBuilder(TemplateBPECounter(model_dir))

    async def go() -> list[str]:
        return [(await builder.build(256, f"n{i:04d}")).messages[0]["content"] for i in range(3)]

    a, b, c = asyncio.run(go())
    assert len({a[:16], b[:16], c[:16]}) == 3
    assert a.startswith("Request n0000.")


def test_a_target_below_the_template_is_refused(model_dir: Path) -> None:
    builder = PromptBuilder(TemplateBPECounter(model_dir))
    with pytest.raises(PromptError, match="shorter than the chat template"):
        asyncio.run(builder.build(5, "abc"))


def test_server_tokenize_and_usage_probe_agree(synthetic: Synthetic) -> None:
    synthetic.control(tokens_per_s=1000.0, ttft_s=0.0)

    async def go() -> tuple[int, int, int | None]:
        async with VllmClient(synthetic.base_url, synthetic.model, api_key=synthetic.api_key) as client:
            tok = ServerTokenizer(client)
            assert await tok.available()
            p = await PromptBuilder(tok).build(300, "abc123")
            probe = await UsageProbeCounter(client).count(p.messages)
            return p.prompt_tokens, probe, tok.max_model_len

    built, probed, window = asyncio.run(go())
    assert built == probed == 300
    assert window == 4096
