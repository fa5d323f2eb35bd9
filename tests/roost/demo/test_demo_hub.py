"""roost.demo.hub: two landings on one machine publish the demo checkpoint at once (two hosts' workers
sharing ``ROOST_HOME``, or a sweep planning beside a landing) and get one whole commit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from roost.hub.publish import mirror_repo_path
from roost.profiles import LOCAL

_PUBLISH = """
import sys
from roost.demo.hub import demo_hub
from roost.profiles import LOCAL
for _ in range(2):
    mirror, commit = demo_hub(LOCAL)
    mirror.stop()
    print(commit)
"""


def test_publishers_at_once_agree_on_one_commit(tmp_path: Path) -> None:
    env = {"ROOST_HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}
    procs = [subprocess.Popen([sys.executable, "-c", _PUBLISH], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for _ in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err[-2000:] for _, err in outs]
    commits = {c for out, _ in outs for c in out.split()}
    # a publisher that hashed a shard another was rewriting would have committed a tree of its own
    assert len(commits) == 1, commits
    repo = mirror_repo_path(tmp_path / "hub-mirror", LOCAL.repo_id)
    log = subprocess.run(["git", "-C", str(repo), "log", "--format=%H", "main"], capture_output=True, text=True,
                         check=True).stdout.split()
    assert log == sorted(commits)
