"""The benchmark engine: one definition per metric, one streaming client, the sweeps.

- ``metrics``: every number roost reports, defined once over a :class:`RequestRecord`.
- ``client``: the async ``httpx`` streaming client for ``/v1/chat/completions`` (SSE parsing,
  timeouts, faults) that fills a :class:`RequestRecord` per request.
- ``timed_net``: the httpcore network backend that stamps bytes when they arrive.
- ``prompts``: prompts of an exact token count, built with the server's ``/tokenize``.
- ``prometheus``: the ``/metrics`` text-format parser and the counters roost diffs.
- ``sweep``: warm-up, the prompt-length and concurrency sweeps, the knee; ``run_benchmark``.
- ``reference``: running ``vllm bench serve`` side by side, to prove the numbers agree.
"""
