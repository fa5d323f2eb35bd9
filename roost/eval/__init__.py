"""Accuracy evaluations: GSM8K, MATH-500 and MMLU-Pro against any OpenAI-compatible server.

One module per job: ``suites.py`` (each task's prompt, answer extraction and scoring, defined once
with the reasons), ``datasets.py`` (upstream formats from a file, a directory or a Hub dataset
repo; the stratified sample), ``scoring.py`` (verdicts, the run's summary, the Wilson interval and
the paired McNemar test), ``log.py`` (the per-question JSONL log a run resumes from) and
``runner.py`` (the questions asked concurrently through :class:`~roost.vllm.client.VllmClient`).
"""
