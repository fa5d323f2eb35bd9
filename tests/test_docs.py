"""The docs name source files that exist: a path in a code span of ``docs/*.md`` or the README
(``roost/...``, ``flows/...``) that a move left behind fails here (MkDocs checks the links only)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOP = ("roost/", "flows/", "tasks/", "blocks/", "deployments/", "tests/", "scripts/", "benchmarks/", "docs/")


def test_every_source_path_the_docs_name_exists() -> None:
    missing = []
    for page in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for span in re.findall(r"`([^`\n]+)`", page.read_text()):
            words = span.split()
            path = words[0].rstrip(".,;:)") if words else ""
            named = path.startswith(TOP) and not any(c in path for c in "<*…") and "..." not in path
            if named and not (ROOT / path.split("::")[0].split(":")[0]).exists():
                missing.append(f"{page.relative_to(ROOT)}: {path}")
    assert missing == []
