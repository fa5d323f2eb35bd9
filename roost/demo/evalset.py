"""The embedded demo's evaluation dataset: a small GSM8K-format set, published next to the demo model.

``roost-demo/gsm8k-mini`` (a dataset repo on the demo's local Hub mirror) holds ``test.jsonl`` with
GSM8K's upstream columns (``question``, ``answer`` ending in ``#### N``), generated from a seed, so
the ``local`` profile's evaluation runs on a fresh machine with no network, through the same Hub
download every real dataset takes. Random weights answer near chance: the demo shows the mechanics.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

DEMO_EVAL_REPO = "roost-demo/gsm8k-mini"

_ITEMS = ["apples", "books", "marbles", "pencils", "stamps", "shells"]
_NAMES = ["Ada", "Ben", "Chloe", "Dev", "Ema", "Femi", "Gus", "Hana"]


def generate_gsm8k_mini(out_dir: Path, *, questions: int = 32, seed: int = 0) -> Path:
    """Write ``out_dir/test.jsonl`` (byte-identical for the same seed); return ``out_dir``."""
    rng = random.Random(seed)
    rows = []
    for _ in range(questions):
        name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
        have, more, give = rng.randint(3, 40), rng.randint(2, 30), rng.randint(1, 10)
        total = have + more - give
        question = (f"{name} has {have} {item}. A friend gives {name} {more} more, and then {name} gives "
                    f"{give} away. How many {item} does {name} have now?")
        answer = (f"{name} has {have} + {more} = <<{have}+{more}={have + more}>>{have + more} {item}.\n"
                  f"After giving {give} away: {have + more} - {give} = <<{have + more}-{give}={total}>>{total}.\n"
                  f"#### {total}")
        rows.append({"question": question, "answer": answer})
    out_dir.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows)
    path = out_dir / "test.jsonl"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return out_dir
