"""Prefect flows. ``land`` is the whole pipeline; read ``flows/land.py`` top to bottom."""

from roost.errors import hide_roost_tracebacks

# A roost error is an expected failure with its own one-line explanation: Prefect's engines log it
# without a traceback (in the terminal and in the UI alike), whichever flow raised it.
hide_roost_tracebacks("prefect.task_runs", "prefect.flow_runs")
