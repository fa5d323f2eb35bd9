"""The embedded default's Hub as a task: :func:`roost.demo.hub.demo_hub` (generate, publish, serve).

The preflight and the download stage then read it exactly as they would read huggingface.co.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from roost.demo.hub import demo_hub
from roost.hub.mirror import HubMirror
from roost.profiles import ModelProfile


@task(name="local-hub", cache_policy=NO_CACHE, persist_result=False)
def local_hub_task(profile: ModelProfile, seed: int = 0) -> HubMirror:
    """Generate + publish ``profile.repo_id`` and start the mirror; the caller stops it."""
    mirror, commit = demo_hub(profile, seed)
    get_run_logger().info("local Hub mirror serving %s@%s at %s", profile.repo_id, commit[:12], mirror.endpoint)
    return mirror
