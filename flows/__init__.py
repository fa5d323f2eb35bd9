"""Prefect flows. ``land`` is the whole pipeline; read ``flows/land.py`` top to bottom."""
