"""The embedded default's Hub: generate the tiny demo checkpoint, publish it as a local git repo, and
serve it from a real Hub-compatible server (olah, offline) on loopback.

Downloads and preflights then read it exactly as they would read huggingface.co. The flows start it
through ``tasks/local_hub.py``; ``roost audit --profile local`` and ``roost plan --profile local``
start it for the duration of the command.
"""

from __future__ import annotations

from roost.demo.evalset import DEMO_EVAL_REPO, generate_gsm8k_mini
from roost.demo.model import generate_tiny_model
from roost.fslock import exclusive
from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo
from roost.profiles import ModelProfile
from roost.settings import repo_dir_name, roost_home


def demo_hub(profile: ModelProfile, seed: int = 0) -> tuple[HubMirror, str]:
    """Generate + publish ``profile.repo_id`` (and the demo evaluation set, ``roost.demo.evalset``) and
    start the mirror (the caller stops it); the commit of the model published."""
    home = roost_home()
    mirrors_root = home / "hub-mirror"
    # one publisher at a time: a second landing on this machine would hash a shard this one is rewriting
    with exclusive(home / "demo" / ".publish.lock"):
        src = generate_tiny_model(home / "demo" / repo_dir_name(profile.repo_id), seed=seed)
        commit = publish_repo(src, mirrors_root, profile.repo_id, message=f"roost demo model (seed {seed})")
        evalset = generate_gsm8k_mini(home / "demo" / repo_dir_name(DEMO_EVAL_REPO), seed=seed)
        publish_repo(evalset, mirrors_root, DEMO_EVAL_REPO, message="roost demo GSM8K-format set",
                     repo_type="datasets")
    mirror = HubMirror(mirrors_root, workdir=home / "hub-mirror-state").start()
    return mirror, commit

