"""The metering gateway: one door to every landed model, a key per user, device or app, and every
token counted (the Ornith 1.5 recipe's "Metering Gateway & Tailscale", built into roost).

Clients call the gateway (``roost gateway serve``, :8080) with their own key; the gateway checks it,
routes the request by model name to the vLLM server that serves it (``routing``), forwards it with the
upstream key only the gateway holds, counts the prompt at request start (vLLM's ``/tokenize``) and
the completion as it streams (``metering``), stores one usage row per request (``db``) and exports
per-key, per-kind, per-model counters on ``/metrics`` (``metrics``).

One module per job:

- ``keys``: key format, hashing, names and kinds (pure);
- ``db``: the database (SQLite WAL or PostgreSQL): keys, usage rows (group-committed), usage reports;
- ``metering``: what a request costs, from its body, its stream and its answer (pure);
- ``routing``: upstreams (the model servers behind the gateway), their models, polling, the model ->
  upstream choice;
- ``registry``: the servers landings keep serving, registered for the gateway (files);
- ``metrics``: the gateway's Prometheus metrics, each defined once;
- ``access``: who may read ``/metrics`` and ``/health``'s details (loopback, or a bearer token; pure);
- ``config``: the gateway's settings (limits, timeouts, the trusted header, the metrics token);
- ``app``: the ASGI application (lifespan, ``/v1/models``, ``/health``, ``/metrics``);
- ``admission``: a forwarded request's key, body bounds, model and upstream (refused before forwarding);
- ``key_cache``: the active keys, reloaded in the background, a missing one looked up at once;
- ``forward``: one forwarded request, from sending it upstream to its usage row;
- ``responses``: what the gateway answers on its own (refusals, its own failures);
- ``upstream_errors``: an upstream's error answer as a client may see it (pure);
- ``server``: running it under uvicorn;
- ``connections``: what a peer may hold before its request is read (head size and deadline, keep-alive,
  connections per address and overall; uvicorn's httptools protocol, subclassed);
- ``tailscale``: one device key per tailnet node;
- ``openwebui``, ``openwebui_api``: Open WebUI's default model follows a swap (its database, or its admin API);
- ``install``: the systemd user unit.
"""
