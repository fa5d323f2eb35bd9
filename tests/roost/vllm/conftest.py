"""Fixtures of the vLLM client tests: the synthetic streaming server (``tests/roost/bench/synthetic_server.py``)."""

from bench_synthetic import fresh_synthetic, synthetic

__all__ = ["fresh_synthetic", "synthetic"]
