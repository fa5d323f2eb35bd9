"""The embedded default's Hub: generate the tiny demo checkpoint, publish it as a local git repo,
and serve it from a real Hub-compatible server (olah, offline) on loopback.

The download stage then downloads from it exactly as it would from huggingface.co.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from roost.demo.model import generate_tiny_model
from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo
from roost.profiles import ModelProfile
from roost.settings import repo_dir_name, roost_home


@task(name="local-hub", cache_policy=NO_CACHE, persist_result=False)
def local_hub_task(profile: ModelProfile, seed: int = 0) -> HubMirror:
    """Generate + publish ``profile.repo_id`` and start the mirror; the caller stops it."""
    home = roost_home()
    src = generate_tiny_model(home / "demo" / repo_dir_name(profile.repo_id), seed=seed)
    mirrors_root = home / "hub-mirror"
    commit = publish_repo(src, mirrors_root, profile.repo_id, message=f"roost demo model (seed {seed})")
    mirror = HubMirror(mirrors_root, workdir=home / "hub-mirror-state").start()
    get_run_logger().info("local Hub mirror serving %s@%s at %s", profile.repo_id, commit[:12], mirror.endpoint)
    return mirror
