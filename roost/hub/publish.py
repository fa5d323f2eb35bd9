"""Publish a directory as a commit of a local Hub mirror repository (olah's ``mirrors-path`` layout).

The repository is a non-bare git repo at ``<mirrors_root>/models/<org>/<name>`` whose branch ``main``
gets one commit per call. Large files are committed the way the Hub stores them: as git-LFS pointer
files, with the content at ``.git/lfs/objects/<aa>/<bb>/<sha256>``, so the mirror lists
``lfs.sha256`` and sizes exactly like huggingface.co. No ``git-lfs`` binary is needed: the pointers
are written here. Only the git plumbing (``hash-object``, ``update-index``, ``write-tree``,
``commit-tree``) is used, so nothing is checked out and no git identity needs configuring.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from fnmatch import fnmatch
from pathlib import Path
from typing import Literal

from roost.errors import UserError
from roost.hub.integrity import hash_files
from roost.settings import child_env

LFS_SUFFIXES = (
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".gguf",
    ".onnx",
    ".msgpack",
    ".h5",
    ".ckpt",
    ".model",
    ".npz",
)
"""Stored as LFS whatever their size, like the Hub's default ``.gitattributes``."""

DEFAULT_LFS_MIN_BYTES = 10 * 1024 * 1024
"""Any other file at least this large is stored as LFS too (the Hub's threshold for text files)."""

SKIP_DIRS = (".git", ".roost", ".cache")

_GIT_ENV = {
    "GIT_AUTHOR_NAME": "roost",
    "GIT_AUTHOR_EMAIL": "roost@localhost",
    "GIT_COMMITTER_NAME": "roost",
    "GIT_COMMITTER_EMAIL": "roost@localhost",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
}


def mirror_repo_path(mirrors_root: Path, repo_id: str, repo_type: str = "models") -> Path:
    """Where olah looks for ``repo_id``: ``<mirrors_root>/<repo_type>/<org>/<name>``."""
    org, name = split_repo_id(repo_id)
    return mirrors_root / repo_type / org / name


def split_repo_id(repo_id: str) -> tuple[str, str]:
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") for p in parts):
        raise UserError(f"repo id {repo_id!r} is not of the form ORG/NAME; pass e.g. 'roost-demo/tiny-model'")
    return parts[0], parts[1]


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The git-lfs v1 pointer file for an object (what the Hub's git stores for a large file)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def lfs_object_path(repo: Path, sha256: str) -> Path:
    return repo / ".git" / "lfs" / "objects" / sha256[:2] / sha256[2:4] / sha256


def _git(repo: Path, *args: str, stdin: bytes | None = None, env: dict[str, str] | None = None) -> str:
    full_env = {**child_env(), **_GIT_ENV, **(env or {})}
    proc = subprocess.run(
        ["git", "-C", str(repo), *args], input=stdin, capture_output=True, env=full_env, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args[:2])} failed in {repo}: {proc.stderr.decode(errors='replace').strip()}"
        )
    return proc.stdout.decode().strip()


def _is_lfs(rel: str, size: int, lfs_min_bytes: int, lfs_patterns: Sequence[str]) -> bool:
    if rel.endswith(LFS_SUFFIXES) or size >= lfs_min_bytes:
        return True
    return any(fnmatch(rel, pat) for pat in lfs_patterns)


def _source_files(src_dir: Path) -> list[tuple[str, Path]]:
    files: list[tuple[str, Path]] = []
    for root, dirs, names in os.walk(src_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(names):
            path = Path(root) / name
            if path.is_file():
                files.append((path.relative_to(src_dir).as_posix(), path))
    return files


def _store_lfs_object(src: Path, dest: Path, how: Literal["copy", "hardlink"]) -> None:
    if dest.exists() and dest.stat().st_size == src.stat().st_size:
        return
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    if how == "hardlink":
        try:
            os.link(src, tmp)
        except OSError:
            shutil.copyfile(src, tmp)
    else:
        shutil.copyfile(src, tmp)
    os.replace(tmp, dest)


def _gitattributes(lfs_paths: Sequence[str]) -> bytes:
    lines = [f"*{suffix} filter=lfs diff=lfs merge=lfs -text" for suffix in LFS_SUFFIXES]
    lines += [f"{p} filter=lfs diff=lfs merge=lfs -text" for p in lfs_paths if not p.endswith(LFS_SUFFIXES)]
    return ("\n".join(lines) + "\n").encode()


def publish_repo(
    src_dir: Path,
    mirrors_root: Path,
    repo_id: str,
    *,
    message: str = "roost: publish snapshot",
    lfs_min_bytes: int = DEFAULT_LFS_MIN_BYTES,
    lfs_patterns: Sequence[str] = (),
    tag: str | None = None,
    lfs_store: Literal["copy", "hardlink"] = "copy",
    repo_type: Literal["models", "datasets"] = "models",
) -> str:
    """Commit the content of ``src_dir`` as the new head of ``main`` of ``repo_id``; return the commit sha.

    The commit's tree is exactly ``src_dir`` (minus ``.git``/``.roost``/``.cache``); files that are gone
    from ``src_dir`` are gone from the new commit, earlier commits stay reachable so an older revision can
    be pinned. A ``.gitattributes`` naming the LFS files is added when ``src_dir`` has none, as on the Hub.
    When nothing changed, no commit is made and the current head is returned. ``tag`` (optional) is
    created or moved to the returned commit. ``lfs_store="hardlink"`` links LFS objects instead of
    copying them (for huge or sparse benchmark replicas on the same filesystem). ``repo_type="datasets"``
    publishes a dataset repo (``huggingface_hub``'s ``repo_type="dataset"`` reads it).
    """
    src_dir = Path(src_dir).resolve()
    if not src_dir.is_dir():
        raise UserError(f"cannot publish {src_dir}: not a directory")
    repo = mirror_repo_path(Path(mirrors_root).resolve(), repo_id, repo_type)
    if not (repo / ".git").is_dir():
        repo.mkdir(parents=True, exist_ok=True)
        _git(repo, "init", "-q", "-b", "main")
    _git(repo, "symbolic-ref", "HEAD", "refs/heads/main")

    files = _source_files(src_dir)
    if not files:
        raise UserError(f"cannot publish {src_dir}: it holds no files")
    lfs = [(rel, p) for rel, p in files if _is_lfs(rel, p.stat().st_size, lfs_min_bytes, lfs_patterns)]
    digests = hash_files([p for _, p in lfs])

    with tempfile.TemporaryDirectory(prefix="roost-publish-") as tmp_name:
        tmp = Path(tmp_name)
        blob_sources: list[tuple[str, Path]] = []
        lfs_rel = {rel for rel, _ in lfs}
        for i, (rel, path) in enumerate(files):
            if rel in lfs_rel:
                d = digests[path]
                _store_lfs_object(path, lfs_object_path(repo, d.sha256), lfs_store)
                pointer = tmp / f"pointer-{i}"
                pointer.write_bytes(lfs_pointer(d.sha256, d.size))
                blob_sources.append((rel, pointer))
            else:
                blob_sources.append((rel, path))
        if ".gitattributes" not in {rel for rel, _ in files}:
            attrs = tmp / "gitattributes"
            attrs.write_bytes(_gitattributes(sorted(lfs_rel)))
            blob_sources.append((".gitattributes", attrs))

        paths_in = "\n".join(str(p) for _, p in blob_sources) + "\n"
        oids = _git(
            repo, "hash-object", "-w", "--no-filters", "--stdin-paths", stdin=paths_in.encode()
        ).split()
        index_info = "".join(
            f"100644 {oid}\t{rel}\n" for (rel, _), oid in zip(blob_sources, oids, strict=True)
        )
        index_env = {"GIT_INDEX_FILE": str(tmp / "index")}
        _git(repo, "update-index", "--add", "--index-info", stdin=index_info.encode(), env=index_env)
        tree = _git(repo, "write-tree", env=index_env)

    parent = _head(repo)
    if parent is not None and _git(repo, "rev-parse", f"{parent}^{{tree}}") == tree:
        commit = parent
    else:
        parent_args = ["-p", parent] if parent else []
        commit = _git(repo, "commit-tree", tree, *parent_args, "-m", message)
        _git(repo, "update-ref", "refs/heads/main", commit)
    if tag:
        _git(repo, "tag", "-f", tag, commit)
    return commit


def _head(repo: Path) -> str | None:
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "-q", "--verify", "refs/heads/main"],
        capture_output=True,
        env={**child_env(), **_GIT_ENV},
        check=False,
    )
    out = proc.stdout.decode().strip()
    return out if proc.returncode == 0 and out else None
