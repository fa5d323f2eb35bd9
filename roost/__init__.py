"""roost: take an LLM checkpoint from the Hugging Face Hub to a measured, monitored vLLM server.

Pure domain logic (parsing, planning, statistics) lives in this package and is free of Prefect
and of I/O beyond what a function's name says. The Prefect layer is in ``tasks/`` and ``flows/``.
"""

__version__ = "0.1.0"
