"""Deployments, work pool, queues, concurrency limits: what ``roost setup`` puts on a Prefect server.

``deployments.deploy`` declares the deployments (one ``land``, ``rebenchmark`` and ``audit`` per
host, each on the host's work queue); ``deployments.setup`` applies everything idempotently.
"""
