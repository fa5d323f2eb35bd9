"""Preflight plan: vLLM's KV-cache sizing (``kv``), derived vLLM arguments and fit (``args``), and
the per-checkpoint plan the CLI and the flow use (``preflight.plan_checkpoint``)."""
