"""Everything that depends on where and how the checkpoint will be served; the only owner of vLLM's
arguments and of the fit on a host.

- ``kv``: vLLM's KV-cache sizing, integer for integer, per vLLM build and platform (``KvRules``);
- ``args``: the vLLM arguments a checkpoint needs, and the sizing flags read back from overrides;
- ``fit``: the weights vLLM loads, the fit on a host (DOES_NOT_FIT_HOST), the decode ceiling;
- ``report``: the audit report for a host (``roost audit``): a checkpoint audit + the above;
- ``inputs`` / ``preflight``: what a plan is asked for, and the plan (``roost plan``).
"""
