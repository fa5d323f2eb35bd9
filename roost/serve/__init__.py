"""Serving backends (``process``: vLLM as a local process; ``docker``: vLLM in a container) and
the parsing of what vLLM logs."""
