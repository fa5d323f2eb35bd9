"""The report's sections, one module per part of the run, in the order the report shows them:

- ``summary.py``: the headline numbers (or why the run failed) and the baseline comparison;
- ``serving.py``: the audit's findings, the plan against what vLLM logged, the weights and memory,
  and what vLLM measured, chose and said;
- ``points.py``: the benchmark's prompt-length and concurrency tables;
- ``mtp_ab.py``: with and without speculative decoding; ``accuracy.py``: the evaluations;
- ``timeline.py``: decode against the roofline ceiling, the cold-load timeline, the points not
  measured;
- ``history.py``: the latest runs of the model on the host.

Each section copes with missing data: a failed run with no points still gets a report that says
which stage failed and why, and each empty section says what it would have shown. Columns and
numbers are named and printed by ``roost/catalogue.py``.
"""
