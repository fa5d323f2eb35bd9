"""vLLM 0.24.0's own KV-cache sizing, run on stand-in configs as the CUDA platform would (test helper).

Run with the python of the vLLM 0.24.0 venv (``$ROOST_HOME/vllm-venv-0.24.0/bin/python``), never with
roost's: it imports vLLM and not roost. Reads a JSON list of cases on stdin, prints one JSON object
(``{"vllm": version, "cases": [...]}``) as the last line of stdout. A case is::

    {"name": str, "config": <config.json of the checkpoint>, "dtype": "bfloat16",
     "kv_cache_dtype": "auto" | "fp8", "num_speculative_tokens": int,
     "enable_prefix_caching": bool | null, "enable_chunked_prefill": bool | null,
     "max_model_len": int, "available_memory": int, "max_num_batched_tokens": int}

``available_memory`` is the worker's KV budget, i.e. ``--kv-cache-memory-bytes`` (vLLM 0.24.0,
``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` returns it unchanged when set).
``null`` for prefix caching / chunked prefill means "flag not given": vLLM's default is applied.

What runs is vLLM 0.24.0's code, in the order a CUDA server runs it:

1. ``vllm.transformers_utils.config.get_config`` loads the config.json (written to a temporary
   directory) into vLLM's own ``Qwen3_5Config`` / ``Qwen3_5MoeConfig``; ``get_hf_text_config`` takes
   the text config.
2. ``EngineArgs._set_default_chunked_prefill_and_prefix_caching_args`` (``vllm/engine/arg_utils.py``)
   resolves an unset ``--enable-prefix-caching`` to ``ModelConfig.is_prefix_caching_supported``
   (``vllm/config/model.py``: False for ``attn_type == "hybrid"``).
3. ``VllmConfig.try_verify_and_update_config`` (``vllm/config/vllm.py``) dispatches to
   ``Qwen3_5ForConditionalGenerationConfig`` (SSM state dtype from ``mamba_ssm_dtype``) and
   ``HybridAttentionMambaModelConfig`` -> ``MambaModelConfig.verify_and_update_config``
   (``vllm/model_executor/models/config.py``), which picks ``mamba_cache_mode``.
4. ``Platform.update_block_size_for_backend`` -> ``Platform._align_hybrid_block_size``
   (``vllm/platforms/interface.py``): the base-class implementation, which ``CudaPlatform``
   (``vllm/platforms/cuda.py``) does not override (checked below from its source) -- the CPU platform
   does, which is why the base class is called explicitly instead of ``current_platform``. The
   attention backends whose kernel block sizes it reads are the real ``FlashAttentionBackend`` and
   ``TritonAttentionBackend`` classes (FLASH_ATTN is first for sm_12x in ``cuda.py``
   ``_get_backend_priorities``; FlashAttention takes no fp8 KV cache, so fp8 goes to FlashInfer or
   Triton; FlashInfer is not importable here -- no ``flashinfer`` package -- and its smallest kernel
   block is 16 like the other two: ``flashinfer.py`` ``get_supported_kernel_block_sizes``). Each case
   is aligned with both importable backends and must agree.
5. ``VllmConfig.validate_block_size`` (mamba "align" mode: block <= max_num_batched_tokens).
6. ``GPUModelRunner.get_kv_cache_spec`` (``vllm/v1/worker/gpu_model_runner.py``) collects each layer's
   spec from ``Attention.get_kv_cache_spec`` (``FullAttentionSpec``) and ``MambaBase.get_kv_cache_spec``
   (``MambaSpec``, state shapes/dtypes from ``QwenGatedDeltaNetAttention.get_state_shape`` ->
   ``MambaStateShapeCalculator.gated_delta_net_state_shape`` and
   ``GatedDeltaNetAttention.get_state_dtype`` -> ``MambaStateDtypeCalculator``).
7. ``get_kv_cache_configs`` (``vllm/v1/core/kv_cache_utils.py``): groups, the one-request check,
   ``get_kv_cache_config_from_groups`` (num_blocks), then ``get_kv_cache_capacity`` /
   ``get_max_concurrency_for_kv_cache_config``, the figures it logs as "GPU KV cache size: N tokens"
   and "Maximum concurrency for L tokens per request: C.CCx".

Stand-ins (and why):

- ``VllmConfig``: a plain object carrying a real ``CacheConfig`` and ``ParallelConfig`` plus stand-in
  scheduler / speculative / compilation configs. A real ``VllmConfig`` runs ``current_platform``'s
  ``check_and_update_config`` in its constructor, and on this machine that is the CPU platform (block
  size 128, no hybrid KV cache manager), not CUDA. The two ``VllmConfig`` methods used are bound to
  the stand-in unchanged. The scheduler stand-in has ``disable_hybrid_kv_cache_manager=False`` (what
  ``VllmConfig.__post_init__`` sets on CUDA, whose ``support_hybrid_kv_cache()`` is True) and the
  ``max_num_batched_tokens`` given (8192 is 0.24.0's API-server default on a device with >= 70 GiB,
  ``arg_utils.py`` ``get_batch_defaults``).
- ``ModelConfig``: a plain object whose properties and methods (``is_hybrid``, ``attn_type``,
  ``is_prefix_caching_supported``, ``supports_mamba_prefix_caching``, ``get_num_kv_heads``,
  ``get_head_size``, ``get_model_arch_config``, ...) are ``ModelConfig``'s own, borrowed; the real
  constructor would resolve the dtype and quantization for the CPU platform. ``dtype`` is the one
  given (bfloat16, what CUDA keeps).
- The model class: vLLM 0.24.0's ``Qwen3_5ForConditionalGeneration`` module cannot be imported in
  this CPU venv (``qwen3_vl.py`` imports transformers' Qwen2-VL image processor, which needs
  torchvision, which the venv does not carry). A stand-in class is registered under the real
  architecture name with ``ModelRegistry.register_model`` (vLLM's out-of-tree model API). Its two
  methods ``_align_hybrid_block_size`` calls, ``get_mamba_state_shape_from_config`` and
  ``get_mamba_state_dtype_from_config``, are compiled from 0.24.0's ``qwen3_5.py`` source text of
  ``Qwen3_5ForConditionalGeneration`` (which ``Qwen3_5MoeForConditionalGeneration`` inherits;
  checked). It is ``IsHybrid`` and not ``SupportsMambaPrefixCaching``, like the real class (checked
  from ``qwen3_5.py`` / ``qwen3_vl.py``).
- Layers: ``Attention`` and ``QwenGatedDeltaNetAttention`` objects made without their ``__init__``
  (which would build weights and need a distributed group), given the attributes their
  ``__init__`` sets from the config (``layer_types`` of the text config; with MTP, the draft's
  ``mtp_num_hidden_layers`` full-attention layers, ``qwen3_5_mtp.py``). Their ``get_kv_cache_spec``,
  ``get_state_shape``, ``get_state_dtype`` and ``get_attn_backend`` are the real ones.

Nothing in ``vllm.platforms`` is patched. ``current_platform`` is this machine's CPU platform; on the path
above it is read only by ``_set_default_chunked_prefill_and_prefix_caching_args``, whose CPU branch
applies to RISC-V alone, and by the backends' kernel-block queries, whose smallest size is 16 either way.
"""

from __future__ import annotations

import ast
import json
import logging
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "0")  # vLLM's own handler writes to stdout, where the JSON goes
# this file's directory (tests/support) holds modules with generic names: keep them off the import path
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import torch  # noqa: E402
import vllm  # noqa: E402
from torch import nn  # noqa: E402
from vllm.config import CacheConfig, ParallelConfig  # noqa: E402
from vllm.config.model import ModelConfig  # noqa: E402
from vllm.config.vllm import VllmConfig, set_current_vllm_config  # noqa: E402
from vllm.engine.arg_utils import EngineArgs  # noqa: E402
from vllm.model_executor.layers.attention.attention import Attention  # noqa: E402
from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import QwenGatedDeltaNetAttention  # noqa: E402
from vllm.model_executor.layers.mamba.mamba_utils import (  # noqa: E402
    MambaStateDtypeCalculator,
    MambaStateShapeCalculator,
)
from vllm.model_executor.models import ModelRegistry  # noqa: E402
from vllm.model_executor.models.interfaces import IsHybrid  # noqa: E402
from vllm.platforms.interface import Platform  # noqa: E402
from vllm.transformers_utils.config import get_config, get_hf_text_config  # noqa: E402
from vllm.utils.torch_utils import kv_cache_dtype_str_to_dtype  # noqa: E402
from vllm.v1.attention.backend import AttentionType  # noqa: E402
from vllm.v1.attention.backends.flash_attn import FlashAttentionBackend  # noqa: E402
from vllm.v1.attention.backends.triton_attn import TritonAttentionBackend  # noqa: E402
from vllm.v1.core import kv_cache_utils as kvu  # noqa: E402
from vllm.v1.kv_cache_interface import FullAttentionSpec, MambaSpec  # noqa: E402
from vllm.v1.worker.gpu_model_runner import GPUModelRunner  # noqa: E402

VLLM_DIR = Path(vllm.__file__).parent
BACKENDS: dict[str, type] = {"FLASH_ATTN": FlashAttentionBackend, "TRITON_ATTN": TritonAttentionBackend}
STATE_METHODS = ("get_mamba_state_shape_from_config", "get_mamba_state_dtype_from_config")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


CAPTURE = _Capture()
logging.getLogger("vllm").addHandler(CAPTURE)
logging.getLogger("vllm").setLevel(logging.INFO)


def check_sources() -> dict[str, Any]:
    """Facts read from 0.24.0's source that the stand-ins rely on; any that fails stops the script."""
    cuda = (VLLM_DIR / "platforms/cuda.py").read_text()
    for name in ("def update_block_size_for_backend", "def _align_hybrid_block_size"):
        assert name not in cuda, f"vllm/platforms/cuda.py overrides {name}: call CudaPlatform's"
    qwen35 = (VLLM_DIR / "model_executor/models/qwen3_5.py").read_text()
    qwen3vl = (VLLM_DIR / "model_executor/models/qwen3_vl.py").read_text()
    for text, path in ((qwen35, "qwen3_5.py"), (qwen3vl, "qwen3_vl.py")):
        assert "SupportsMambaPrefixCaching" not in text, f"{path} declares SupportsMambaPrefixCaching"
    classes = {n.name: n for n in ast.parse(qwen35).body if isinstance(n, ast.ClassDef)}
    dense, moe = classes["Qwen3_5ForConditionalGeneration"], classes["Qwen3_5MoeForConditionalGeneration"]
    assert "IsHybrid" in [ast.unparse(b) for b in dense.bases]
    assert "Qwen3_5ForConditionalGeneration" in [ast.unparse(b) for b in moe.bases]
    assert not [n for n in moe.body if isinstance(n, ast.FunctionDef) and n.name in STATE_METHODS]
    return {"cuda_platform_overrides_alignment": False, "qwen3_5_supports_mamba_prefix_caching": False}


def qwen35_model_class(arch: str) -> type[nn.Module]:
    """A class named ``arch`` carrying ``Qwen3_5ForConditionalGeneration``'s two state methods, compiled
    from 0.24.0's ``qwen3_5.py`` source (the module itself needs torchvision to import)."""
    path = VLLM_DIR / "model_executor/models/qwen3_5.py"
    tree = ast.parse(path.read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Qwen3_5ForConditionalGeneration")
    funcs: list[ast.stmt] = [n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name in STATE_METHODS]
    assert len(funcs) == 2, "qwen3_5.py: state methods not found"
    module = ast.parse("class _Methods:\n    pass\n")
    holder = module.body[0]
    assert isinstance(holder, ast.ClassDef)
    holder.body = funcs
    ns: dict[str, Any] = {
        "torch": torch,
        "VllmConfig": VllmConfig,
        "MambaStateShapeCalculator": MambaStateShapeCalculator,
        "MambaStateDtypeCalculator": MambaStateDtypeCalculator,
    }
    exec(compile(module, str(path), "exec"), ns)
    methods = {name: ns["_Methods"].__dict__[name] for name in STATE_METHODS}
    return type(arch, (nn.Module, IsHybrid), {**methods, "__module__": __name__})


class StandInModelConfig:
    """The ``ModelConfig`` members the sizing path reads; every property and method is ModelConfig's."""

    is_hybrid = ModelConfig.is_hybrid
    attn_type = ModelConfig.attn_type
    is_prefix_caching_supported = ModelConfig.is_prefix_caching_supported
    is_chunked_prefill_supported = ModelConfig.is_chunked_prefill_supported
    supports_mamba_prefix_caching = ModelConfig.supports_mamba_prefix_caching
    is_attention_free = ModelConfig.is_attention_free
    use_mla = ModelConfig.use_mla
    is_deepseek_mla = ModelConfig.is_deepseek_mla
    architecture = ModelConfig.architecture
    get_model_arch_config = ModelConfig.get_model_arch_config
    get_head_size = ModelConfig.get_head_size
    get_total_num_kv_heads = ModelConfig.get_total_num_kv_heads
    get_num_kv_heads = ModelConfig.get_num_kv_heads
    get_num_attention_heads = ModelConfig.get_num_attention_heads

    def __init__(self, hf_config: Any, dtype: torch.dtype, max_model_len: int, model_info: Any) -> None:
        self.model = "stand-in"
        self.model_weights = ""
        self.hf_config = hf_config
        self.hf_text_config = get_hf_text_config(hf_config)
        self.dtype = dtype
        self.max_model_len = max_model_len
        self.original_max_model_len = max_model_len
        self.pooler_config = None
        self.runner_type = "generate"
        self.convert_type = "none"
        self.model_impl = "auto"
        self.enforce_eager = False
        self.override_generation_config: dict[str, Any] = {}
        self._model_info = model_info
        self._architecture = hf_config.architectures[0]
        self.model_arch_config = self.get_model_arch_config()


class StandInVllmConfig:
    """The ``VllmConfig`` members the sizing path reads; the methods are VllmConfig's."""

    try_verify_and_update_config = VllmConfig.try_verify_and_update_config
    validate_block_size = VllmConfig.validate_block_size

    def __init__(
        self,
        *,
        model_config: StandInModelConfig,
        cache_config: CacheConfig,
        scheduler_config: SimpleNamespace,
        speculative_config: SimpleNamespace | None,
    ) -> None:
        self.model_config = model_config
        self.cache_config = cache_config
        self.parallel_config = ParallelConfig()  # tensor/pipeline/context parallel sizes 1
        self.scheduler_config = scheduler_config
        self.speculative_config = speculative_config
        self.compilation_config = SimpleNamespace(static_forward_context={})  # the model's layers, by name
        self.kv_transfer_config = None
        self.quant_config = None


def _attention(vc: StandInVllmConfig, backend: type) -> Attention:
    layer = Attention.__new__(Attention)
    nn.Module.__init__(layer)
    mc, cc = vc.model_config, vc.cache_config
    layer.attn_type = AttentionType.DECODER
    layer.sliding_window = None
    layer.kv_sharing_target_layer_name = None
    layer.num_kv_heads = mc.get_num_kv_heads(vc.parallel_config)
    layer.head_size = mc.get_head_size()
    layer.head_size_v = layer.head_size
    layer.kv_cache_dtype = cc.cache_dtype
    layer.kv_cache_torch_dtype = kv_cache_dtype_str_to_dtype(cc.cache_dtype, mc)
    layer.attn_backend = backend
    return layer


def _gdn(vc: StandInVllmConfig) -> QwenGatedDeltaNetAttention:
    layer = QwenGatedDeltaNetAttention.__new__(QwenGatedDeltaNetAttention)
    nn.Module.__init__(layer)
    tc = vc.model_config.hf_text_config
    layer.tp_size = vc.parallel_config.tensor_parallel_size
    layer.model_config = vc.model_config
    layer.cache_config = vc.cache_config
    layer.speculative_config = vc.speculative_config
    layer.num_spec = vc.speculative_config.num_speculative_tokens if vc.speculative_config else 0
    layer.num_k_heads = tc.linear_num_key_heads
    layer.num_v_heads = tc.linear_num_value_heads
    layer.head_k_dim = tc.linear_key_head_dim
    layer.head_v_dim = tc.linear_value_head_dim
    layer.conv_kernel_size = tc.linear_conv_kernel_dim
    return layer


def _vllm_config(case: dict[str, Any], hf_config: Any, backend: type) -> tuple[StandInVllmConfig, dict[str, Any]]:
    arch = hf_config.architectures[0]
    info = ModelRegistry.models[arch].interfaces
    mc = StandInModelConfig(hf_config, getattr(torch, case["dtype"]), case["max_model_len"], info)
    flags = SimpleNamespace(
        enable_prefix_caching=case["enable_prefix_caching"], enable_chunked_prefill=case["enable_chunked_prefill"]
    )
    EngineArgs._set_default_chunked_prefill_and_prefix_caching_args(flags, mc)
    cc = CacheConfig(cache_dtype=case["kv_cache_dtype"], enable_prefix_caching=flags.enable_prefix_caching)
    spec = case["num_speculative_tokens"]
    vc = StandInVllmConfig(
        model_config=mc,
        cache_config=cc,
        scheduler_config=SimpleNamespace(
            enable_chunked_prefill=flags.enable_chunked_prefill,
            disable_hybrid_kv_cache_manager=False,
            max_num_batched_tokens=case["max_num_batched_tokens"],
            long_prefill_token_threshold=0,
            disable_chunked_mm_input=False,
        ),
        speculative_config=SimpleNamespace(method="mtp", num_speculative_tokens=spec) if spec else None,
    )
    vc.try_verify_and_update_config()
    layers: dict[str, Any] = {}
    tc = mc.hf_text_config
    for i, kind in enumerate(tc.layer_types):
        if kind == "full_attention":
            layers[f"language_model.model.layers.{i}.self_attn.attn"] = _attention(vc, backend)
        elif kind == "linear_attention":
            layers[f"language_model.model.layers.{i}.linear_attn"] = _gdn(vc)
        else:
            raise ValueError(f"layer type {kind!r} is not built by this helper")
    if spec:
        for j in range(getattr(tc, "mtp_num_hidden_layers", 1)):
            layers[f"mtp.layers.{j}.self_attn.attn"] = _attention(vc, backend)
    vc.compilation_config.static_forward_context = layers
    Platform.update_block_size_for_backend(vc)
    vc.validate_block_size()
    resolved = {"enable_prefix_caching": cc.enable_prefix_caching, "enable_chunked_prefill": flags.enable_chunked_prefill}
    return vc, resolved


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(case["config"]))
        hf_config = get_config(tmp, trust_remote_code=False)
    arch = hf_config.architectures[0]
    ModelRegistry.register_model(arch, qwen35_model_class(arch))
    blocks: dict[str, int] = {}
    vc: StandInVllmConfig | None = None
    resolved: dict[str, Any] = {}
    for name, backend in BACKENDS.items():
        CAPTURE.lines.clear()
        vc, resolved = _vllm_config(case, hf_config, backend)
        blocks[name] = vc.cache_config.block_size
    assert vc is not None
    assert len(set(blocks.values())) == 1, f"backends disagree on the block size: {blocks}"
    config_logs = list(CAPTURE.lines)  # the last backend's: mamba cache mode, block size, padding
    cc = vc.cache_config
    runner = SimpleNamespace(vllm_config=vc, shared_kv_cache_layers={})
    with set_current_vllm_config(vc):
        specs = GPUModelRunner.get_kv_cache_spec(runner)
    full = [s for s in specs.values() if isinstance(s, FullAttentionSpec)]
    mamba = [s for s in specs.values() if isinstance(s, MambaSpec)]
    out: dict[str, Any] = {
        "name": case["name"],
        **resolved,
        "block_size_by_backend": blocks,
        "block_size": cc.block_size,
        "mamba_cache_mode": cc.mamba_cache_mode,
        "mamba_block_size": cc.mamba_block_size,
        "mamba_ssm_cache_dtype": cc.mamba_ssm_cache_dtype,
        "mamba_page_size_padded": cc.mamba_page_size_padded,
        "full_attention_layers": len(full),
        "mamba_layers": len(mamba),
        "attn_page_size_bytes": full[0].page_size_bytes if full else None,
        "mamba_page_size_bytes": replace(mamba[0], page_size_padded=None).page_size_bytes if mamba else None,
        "mamba_state_shapes": [list(s) for s in mamba[0].shapes] if mamba else None,
        "mamba_state_dtypes": [str(d) for d in mamba[0].dtypes] if mamba else None,
        "mamba_num_speculative_blocks": mamba[0].num_speculative_blocks if mamba else None,
    }
    CAPTURE.lines.clear()
    try:
        configs = kvu.get_kv_cache_configs(vc, [specs], [case["available_memory"]])
    except ValueError as e:  # the one-request check
        out.update(fits_one_request=False, error=str(e), num_blocks=None, kv_cache_tokens=None, max_concurrency=None)
    else:
        kcc = configs[0]
        tokens, concurrency = kvu.get_kv_cache_capacity(vc, kcc)
        assert concurrency == kvu.get_max_concurrency_for_kv_cache_config(vc, kcc)
        out.update(
            fits_one_request=True,
            error=None,
            num_blocks=kcc.num_blocks,
            kv_cache_tokens=tokens,
            max_concurrency=concurrency,
            pool_tensors=len(kcc.kv_cache_tensors),
        )
    out["log_lines"] = config_logs + CAPTURE.lines
    # the groups again, for the report (get_kv_cache_configs does not return them when it refuses)
    groups = kvu.get_kv_cache_groups(vc, dict(specs))
    out["groups"] = [
        {
            "kind": "mamba" if isinstance(g.kv_cache_spec, MambaSpec) else "full_attention",
            "layers": len(g.layer_names),
            "block_size": g.kv_cache_spec.block_size,
            "max_memory_usage_bytes": g.kv_cache_spec.max_memory_usage_bytes(vc),
        }
        for g in groups
    ]
    out["one_request_bytes"] = kvu._max_memory_usage_bytes_from_groups(vc, groups)
    return out


def main() -> None:
    cases = json.load(sys.stdin)
    facts = check_sources()
    results = [run_case(c) for c in cases]
    sys.stdout.write("\n" + json.dumps({"vllm": vllm.__version__, "source_facts": facts, "cases": results}) + "\n")


if __name__ == "__main__":
    main()
