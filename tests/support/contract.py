"""The JSON documents the CLI prints, key for key and in order: scripts read them, so the tests of
the command and of the report behind it check against this one list each (extend, never reorder)."""

from __future__ import annotations

# ``roost audit --json``
AUDIT_JSON_KEYS = [
    "path", "host", "architecture", "model_type", "served_model_name", "shard_count", "has_index", "tensor_count",
    "index_tensor_count", "visual_tensor_count", "mtp_tensor_count", "tensor_count_by_class", "num_hidden_layers",
    "full_attention_layers", "linear_attention_layers", "num_experts", "num_experts_per_tok", "expert_layout",
    "quantization", "weight_bytes", "weight_bytes_by_class", "weight_bytes_by_dtype", "decode_bytes_per_token",
    "decode_ceiling_tok_s", "kv_bytes_per_token", "max_model_len", "findings", "vllm_args", "kv_cache_memory_bytes",
    "load_weight_bytes", "audit_seconds", "native_max_model_len",
]

# ``roost plan --json``
PLAN_JSON_KEYS = [
    "path", "host", "rules", "architecture", "max_model_len", "kv_cache_memory_bytes", "block_size", "kv_cache_tokens",
    "max_concurrency", "min_kv_cache_bytes", "fits_one_request", "fits_host", "decode_ceiling_tok_s",
    "kv_bytes_per_token", "max_num_seqs", "max_num_batched_tokens", "kv", "fit", "vllm_args", "predicted_log_lines",
    "gpu_memory_utilization", "pool", "served_model_name",
]
