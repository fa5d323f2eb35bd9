"""Flag sweeps: a grid of vLLM settings, each landed and benchmarked, compared and reported (``roost sweep``)."""
