"""Fixtures of the benchmark tests: the synthetic streaming server (the ground truth; see
``synthetic_server.py``), started as its own process once per module and stopped after."""

from bench_synthetic import fresh_synthetic, synthetic

__all__ = ["fresh_synthetic", "synthetic"]
