"""The shared Hub fixture's repos and helpers (``conftest.py`` starts the mirror)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from roost.hub.mirror import HubMirror

REPO = "acme/tiny"
PRIVATE = "acme/private-model"


@dataclass
class SharedHub:
    mirror: HubMirror
    mirrors_root: Path
    v1_src: Path
    main_src: Path
    v1: str
    main: str

    @property
    def endpoint(self) -> str:
        return self.mirror.endpoint


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
