"""Checkpoint audit from safetensors headers and config alone: ``audit_checkpoint(path, host)``."""
