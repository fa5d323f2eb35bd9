"""The benchmark engine: warm-up, the prompt-length and concurrency sweeps, the knee.

- ``metrics``: the formulas of every number roost reports (definitions: ``roost.catalogue``),
  over one :class:`~roost.vllm.stream.RequestRecord` per request.
- ``prompts``: prompts of an exact token count, built with the server's ``/tokenize``.
- ``settings``: what to measure (:class:`BenchSettings`) and what came out (:class:`BenchResult`).
- ``sweep``: the run itself, ``run_benchmark``, over one :class:`~roost.vllm.client.VllmClient`.

Talking to the server (streaming, timestamps, ``/metrics``) is ``roost.vllm``'s job.
"""

WINDOW_MAX = 0
"""In ``prompt_lengths``: the largest prompt the served window admits (the recipes' 261,224-token
request that proves the window). Here, so a model profile can name it without loading the engine."""
