"""roost.hub._lanes: connections from measured throughput (made-up samples: no timing), and
``download_workers`` bounding them in a real download."""

from __future__ import annotations

import threading
from pathlib import Path

from hub_samples import REPO, SharedHub, sha256_of
from support.hub import RangeHub

from roost.hub import _fetch, _parts
from roost.hub._lanes import Ramp
from roost.hub.progress import DownloadProgress
from roost.hub.snapshot import DownloadSpec, download_and_verify


def feed(ramp: Ramp, rates: list[float]) -> list[int]:
    """The targets after each window of 1 s at each of ``rates`` bytes/s."""
    t, total, out = 0.0, 0, []
    ramp.observe(t, total)
    for rate in rates:
        t += 1.0
        total += int(rate)
        out.append(ramp.observe(t, total))
    return out


def test_connections_grow_while_throughput_rises_then_fall_back_and_hold() -> None:
    ramp = Ramp(2, 16, window_s=1.0)
    # each connection adds 40 MB/s (a per-connection cap) until the link's 250 MB/s
    targets: list[int] = []
    t, total = 0.0, 0
    ramp.observe(t, total)
    for _ in range(6):
        t += 1.0
        total += min(ramp.target * 40_000_000, 250_000_000)
        targets.append(ramp.observe(t, total))
    # 2 -> 4 -> 8 (320 MB/s would be the caps' sum: 250 reached, +56%) -> 16 (250: no gain) -> back to 8
    assert targets == [4, 8, 16, 8, 8, 8]
    assert ramp.holding and [n for n, _ in ramp.history][:4] == [2, 4, 8, 16]


def test_the_bound_caps_the_ramp_and_a_flat_rate_holds_at_the_start() -> None:
    assert feed(Ramp(4, 5, window_s=1.0), [1e8, 2e8, 4e8, 8e8]) == [5, 5, 5, 5]
    assert feed(Ramp(2, 16, window_s=1.0), [1e8, 1e8, 1e8]) == [4, 2, 2]  # 4 did no better than 2
    assert feed(Ramp(4, 1, window_s=1.0), [1e8]) == [1]


def test_download_workers_bounds_the_connections(shared_hub: SharedHub, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(_parts, "PART_MIN", 256 * 1024)
    monkeypatch.setattr(_parts, "PART_MAX", 256 * 1024)
    monkeypatch.setattr(_fetch, "RANGED_MIN", 512 * 1024)
    most: list[int] = []

    def count(_p: DownloadProgress) -> None:
        most.append(sum(t.name.startswith("roost-fetch") for t in threading.enumerate()))

    with RangeHub(shared_hub.endpoint, shared_hub.mirrors_root) as hub:
        result = download_and_verify(DownloadSpec(repo_id=REPO), tmp_path / "dl", endpoint=hub.endpoint,
                                     download_workers=2, progress=count, progress_interval=0.01)
    assert max(most) <= 2 and all(f.sha256 == sha256_of(shared_hub.main_src / f.path) for f in result.files)
