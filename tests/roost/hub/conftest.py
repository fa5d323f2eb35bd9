"""A real olah (offline, loopback) serving a two-commit checkpoint repo, shared by the hub tests.

``acme/tiny``: commit ``v1`` (tagged) then ``main``, which changes config.json and the second shard
(same size, other bytes). ``acme/private-model`` answers 401 like a private repo on the Hub.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from hub_samples import PRIVATE, REPO, SharedHub
from support.hub import shard_name, write_checkpoint_files

from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo


@pytest.fixture(scope="session")
def shared_hub(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedHub]:
    base = tmp_path_factory.mktemp("shared-hub")
    mirrors = base / "mirrors"
    v1_src = write_checkpoint_files(base / "v1", shard_sizes=[3_000_000, 1_000_000], seed=1)
    v1 = publish_repo(v1_src, mirrors, REPO, message="v1", tag="v1")
    main_src = base / "main"
    shutil.copytree(v1_src, main_src)
    (main_src / "config.json").write_text('{"architectures": ["RoostTestModel"], "seed": 2}\n')
    write_checkpoint_files(base / "other", shard_sizes=[1_000_000], seed=2)
    shutil.copyfile(base / "other" / shard_name(1, 1), main_src / shard_name(2, 2))
    main = publish_repo(main_src, mirrors, REPO, message="main: new config and second shard")
    private_src = write_checkpoint_files(base / "private", shard_sizes=[10_000], seed=3)
    publish_repo(private_src, mirrors, PRIVATE)
    mirror = HubMirror(mirrors, workdir=base / "olah", private=[PRIVATE])
    mirror.start()
    try:
        yield SharedHub(mirror, mirrors, v1_src, main_src, v1, main)
    finally:
        mirror.stop()
