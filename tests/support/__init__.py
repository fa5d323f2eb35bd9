"""Test-only helpers shared by tests and benchmarks: checkpoint replicas, Hub repos, the ``vllm bench
serve`` agreement harness. Importable as ``support.<module>`` (``tests/`` is on ``sys.path``: pytest
puts the root conftest's directory there; benchmarks add it themselves)."""
