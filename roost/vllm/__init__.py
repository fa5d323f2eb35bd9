"""Talking to a running vLLM (or OpenAI-compatible) server: the client, its stream record, the
byte-arrival-timed transport and the ``/metrics`` parser."""
