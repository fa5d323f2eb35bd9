"""Prefect tasks, one module per pipeline stage. Each is a thin wrapper over ``roost`` logic."""
