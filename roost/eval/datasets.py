"""A task's questions from its upstream files, and the sample a run asks.

``--dataset`` is a local file (Parquet, JSONL or a JSON list), a local directory of them, or a Hub
dataset repo (``OWNER/NAME`` or ``OWNER/NAME@REVISION``; default: the task's upstream repo) read
through roost's Hub client into huggingface_hub's cache (``roost.hub.cache``), so ``HF_ENDPOINT`` (a Hub
mirror), ``HF_TOKEN`` and ``HF_HUB_OFFLINE=1`` (a warm cache) work as for every Hub download. In a
directory or repo, the evaluation split is the files named ``test`` (``test.jsonl``,
``data/test-00000-of-00001.parquet``), in the task's config directory when the repo has several
(GSM8K's ``main``).

The sample: ``--per-category N`` takes N questions of each category (MMLU-Pro's 14 categories,
MATH-500's 7 subjects), each drawn with its own generator seeded from ``(seed, category)``, so a
category's draw does not depend on the others; ``--limit N`` then keeps the first N of one seeded
permutation (``--limit 10`` is the start of ``--limit 20``). Questions are asked in dataset order.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from roost.errors import UserError
from roost.eval.suites import EvalTask, Question
from roost.eval_record import DatasetInfo

DATA_SUFFIXES = (".parquet", ".jsonl", ".json")
_SHARD = re.compile(r"(-\d{5}-of-\d{5})?\.(parquet|jsonl|json)$")
"""A file's split name: ``test-00000-of-00002.parquet`` and ``test-00001-of-00002.parquet`` are one split."""
_REPO = re.compile(r"^(?:hf://datasets/)?([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([\w./-]+))?$")


class Dataset(BaseModel):
    info: DatasetInfo
    questions: list[Question]


def _rows_of(path: Path) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(where, row) for every row of one file; a malformed file is one UserError naming it."""
    suffix = path.suffix.lower()
    if suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except (pa.ArrowException, OSError) as exc:
            raise UserError(f"--dataset {path}: not a readable Parquet file ({str(exc).splitlines()[0][:120]})") from None
        for i, row in enumerate(table.to_pylist()):
            yield f"{path} row {i}", row
        return
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"--dataset {path}: cannot read it as UTF-8 text ({exc})") from None
    if suffix == ".json":
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise UserError(f"--dataset {path}: not JSON ({exc})") from None
        if isinstance(data, dict) and isinstance(data.get("data"), list):
            data = data["data"]
        if not isinstance(data, list):
            raise UserError(f"--dataset {path}: expected a JSON list of rows")
        for i, row in enumerate(data):
            if not isinstance(row, dict):
                raise UserError(f"--dataset {path} row {i}: not an object")
            yield f"{path} row {i}", row
        return
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            raise UserError(f"--dataset {path} line {n}: not a JSON object; is this a JSONL file?") from None
        if not isinstance(row, dict):
            raise UserError(f"--dataset {path} line {n}: not a JSON object")
        yield f"{path} line {n}", row


def _pick_files(root: Path, split_hint: str) -> list[Path]:
    """The evaluation split's files under ``root``."""
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in DATA_SUFFIXES
                   and not any(part.startswith(".") for part in p.relative_to(root).parts))
    if not files:
        raise UserError(f"--dataset {root}: no Parquet, JSONL or JSON file in it")
    test = [p for p in files if "test" in p.name.lower()]
    if split_hint:
        hinted = [p for p in test if split_hint in p.relative_to(root).parts[:-1]]
        test = hinted or test
    chosen = test or files
    splits = {_SHARD.sub("", p.name.lower()) for p in chosen}
    parents = {p.parent for p in chosen}
    if len(parents) > 1 or len(splits) > 1:
        listed = ", ".join(str(p.relative_to(root)) for p in chosen[:6])
        raise UserError(f"--dataset {root}: more than one split or config ({listed}); give one file as --dataset")
    return chosen


def _local_digest(files: Sequence[Path]) -> str:
    h = hashlib.sha256()
    for p in files:
        with p.open("rb") as f:
            while block := f.read(1 << 20):
                h.update(block)
    return "sha256:" + h.hexdigest()[:16]


def hub_dataset_dir(repo_id: str, revision: str | None, *, endpoint: str | None, token: str | None) -> tuple[Path, str]:
    """Download (or find in the Hub cache) a dataset repo's data files: (local dir, commit sha).

    Through roost's Hub client (``roost.hub.cache``: bounded, validated and timed requests, retries, each
    fetched file verified) into huggingface_hub's cache, laid out as huggingface_hub lays it out: a cache
    it warmed is found, and ``HF_HUB_OFFLINE=1`` reads the cache alone."""
    from roost.hub._endpoint import resolve_endpoint, resolve_token
    from roost.hub.cache import NotInCache, download_to_cache
    from roost.hub.errors import HubUnreachable

    endpoint = resolve_endpoint(endpoint)  # an unusable HF_ENDPOINT (or token) is refused before any request
    token = resolve_token(token)
    rev = revision or "main"
    try:
        snapshot = download_to_cache(repo_id, repo_type="dataset", revision=rev, endpoint=endpoint, token=token,
                                     allow_patterns=[f"*{s}" for s in DATA_SUFFIXES], stage="eval")
    except NotInCache:
        raise UserError(f"--dataset {repo_id}@{rev}: not in the Hub cache and the Hub is not reachable "
                        f"(offline?): run once with network or give a local file") from None
    except HubUnreachable as exc:  # a file's transfer outlasted its retries
        said = str(exc).removeprefix(f"{exc.stage}: ")
        raise UserError(f"--dataset {repo_id}@{rev}: {said}, or give a local file") from None
    except UserError as exc:
        raise UserError(f"--dataset: {exc}") from None
    return snapshot.path, snapshot.commit  # .../snapshots/<commit>


def load_dataset(task: EvalTask, dataset: str | None, *, endpoint: str | None = None,
                 token: str | None = None) -> Dataset:
    """The task's questions from ``dataset`` (a path, a Hub dataset repo, or None: the upstream repo)."""
    source = dataset or task.hub_dataset
    local = Path(source).expanduser()
    if local.exists():
        if local.is_dir():
            files, root = _pick_files(local, task.split_hint), local
        elif local.is_file():
            if local.suffix.lower() not in DATA_SUFFIXES:
                raise UserError(f"--dataset {local}: expected a .parquet, .jsonl or .json file")
            files, root = [local], local.parent
        else:
            raise UserError(f"--dataset {local}: not a regular file or directory")
        info = DatasetInfo(source=str(local), revision=_local_digest(files))
    else:
        m = _REPO.match(source)
        if m is None:
            raise UserError(f"--dataset {source}: no such file or directory, and not a Hub dataset repo "
                            f"(OWNER/NAME[@REVISION])")
        root, commit = hub_dataset_dir(m.group(1), m.group(2), endpoint=endpoint, token=token)
        files = _pick_files(root, task.split_hint)
        info = DatasetInfo(source=m.group(1), revision=commit)
    info.files = [str(p.relative_to(root)) for p in files]
    questions: list[Question] = []
    seen: dict[str, int] = {}
    for path in files:
        for where, row in _rows_of(path):
            missing = [c for c in task.columns if c not in row]
            if missing:
                raise UserError(f"--dataset {where}: missing column(s) {', '.join(map(repr, missing))} for "
                                f"{task.title} (its upstream columns: {', '.join(task.columns)})")
            q = task.question(row, where)
            k = seen[q.id] = seen.get(q.id, 0) + 1
            questions.append(q if k == 1 else q.model_copy(update={"id": f"{q.id}-{k}"}))
    info.rows = len(questions)
    if not questions:
        raise UserError(f"--dataset {info.source}: no rows in {', '.join(info.files)}")
    return Dataset(info=info, questions=questions)


def sample(questions: Sequence[Question], *, seed: int, limit: int | None = None,
           per_category: int | None = None) -> list[Question]:
    """The stratified, seeded sample (in dataset order); a UserError when it cannot be drawn."""
    chosen: list[Question] = list(questions)
    if per_category is not None:
        if per_category < 1:
            raise UserError(f"--per-category {per_category}: must be at least 1")
        groups: dict[str, list[Question]] = {}
        for q in questions:
            groups.setdefault(q.category, []).append(q)
        small = {c: len(g) for c, g in groups.items() if len(g) < per_category}
        if small:
            cat, have = min(small.items(), key=lambda kv: kv[1])
            raise UserError(f"--per-category {per_category}: category {cat or 'all'!r} has only {have} questions; "
                            f"use at most {have}")
        keep: set[str] = set()
        for cat, group in sorted(groups.items()):
            rng = random.Random(f"{seed}:{cat}")
            keep.update(q.id for q in rng.sample(sorted(group, key=lambda q: q.id), per_category))
        chosen = [q for q in questions if q.id in keep]
    if limit is not None:
        if limit < 1:
            raise UserError(f"--limit {limit}: must be at least 1")
        order = sorted(chosen, key=lambda q: q.id)
        random.Random(seed).shuffle(order)
        keep = {q.id for q in order[:limit]}
        chosen = [q for q in chosen if q.id in keep]
    if not chosen:
        raise UserError("the sample is empty: check --limit and --per-category against the dataset")
    return chosen
