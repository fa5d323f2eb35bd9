"""A checkpoint from its safetensors headers and config alone, for any host.

- ``safetensors_header``: read and validate one shard's header (never its data);
- ``config``: the model config fields the audit and the plan need;
- ``layout``: the class of each tensor name, how a module is quantized;
- ``model``: the checkpoint read once (``read_checkpoint``): index, headers, every tensor classified;
- ``checks``: the audit's checks, each returning findings; ``audit``: read + checks (``audit_checkpoint``);
- ``writer``: write safetensors shards and the index (the demo model, the test replicas).

Nothing here knows of hosts or vLLM arguments: that is :mod:`roost.plan`'s.
"""
