"""Pytest-free helpers to stand up a local Hub with a checkpoint-shaped repo (tests, e2e, benchmarks).

    src = write_checkpoint_files(tmp / "src", shard_sizes=[4_000_000, 1_000_000])
    with local_hub(tmp / "mirrors", {"acme/tiny": src}) as (mirror, commits):
        result = download_and_verify(DownloadSpec(repo_id="acme/tiny"), tmp / "dl", endpoint=mirror.endpoint)

The shards hold random bytes (they are not valid safetensors): the download stage moves and verifies
bytes, it does not parse them. ``original/consolidated.pth`` and ``README.md`` are there so pattern
selection has something to leave out.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Sequence
from pathlib import Path

from roost.hub.mirror import HubMirror, local_hub
from roost.hub.publish import publish_repo

__all__ = ["HubMirror", "local_hub", "publish_repo", "shard_name", "write_checkpoint_files"]


def shard_name(i: int, n: int) -> str:
    return f"model-{i:05d}-of-{n:05d}.safetensors"


def write_checkpoint_files(
    dest: Path,
    *,
    shard_sizes: Sequence[int] = (3_000_000, 1_000_000),
    seed: int = 0,
    config: dict[str, object] | None = None,
) -> Path:
    """Write a checkpoint-shaped directory of random shards plus config/tokenizer files; return ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    n = len(shard_sizes)
    weight_map: dict[str, str] = {}
    for i, size in enumerate(shard_sizes, start=1):
        name = shard_name(i, n)
        _write_random(dest / name, size, rng)
        weight_map[f"layers.{i}.weight"] = name
    (dest / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": sum(shard_sizes)}, "weight_map": weight_map}, indent=1) + "\n"
    )
    cfg = config if config is not None else {"architectures": ["RoostTestModel"], "seed": seed}
    (dest / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    (dest / "generation_config.json").write_text(json.dumps({"max_new_tokens": 16}) + "\n")
    (dest / "tokenizer.json").write_text(json.dumps({"version": "1.0", "seed": seed}) + "\n")
    (dest / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 2048}) + "\n")
    (dest / "chat_template.jinja").write_text("{% for m in messages %}{{ m.content }}{% endfor %}\n")
    (dest / "README.md").write_text("# roost test checkpoint\n")
    (dest / "original").mkdir(exist_ok=True)
    _write_random(dest / "original" / "consolidated.pth", 4096, rng)
    return dest


def _write_random(path: Path, size: int, rng: random.Random) -> None:
    block = 1 << 20
    with open(path, "wb") as f:
        left = size
        while left > 0:
            n = min(block, left)
            f.write(rng.randbytes(n))
            left -= n
        f.flush()
        os.fsync(f.fileno())
