"""The Hub's API over HTTP: resolve a revision to a commit, list the files at a commit.

:class:`HubClient` is what the download, the preflight and the dataset cache use: a
:class:`~roost.hub._session.HubSession` (endpoint, credentials, timeouts, bounded answers) with the
file transfers of ``roost.hub._files`` and the two API calls here. Every JSON answer is bounded and
validated by ``roost.hub.answers``; retries are ``roost.hub._retries``'s; which endpoint, token and
timeouts ``roost.hub._endpoint``'s.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from roost.errors import UserError
from roost.hub import answers
from roost.hub._files import FileTransfers
from roost.hub.answers import BadAnswer
from roost.hub.errors import FaultContext, HubStatusError
from roost.hub.integrity import HubFile
from roost.inputs.text import shown

FULL_SHA = re.compile(r"[0-9a-f]{40}")
MAX_PAGES = 10_000
"""Tree pages followed at most (1,000 files each)."""


def is_full_sha(revision: str) -> bool:
    return FULL_SHA.fullmatch(revision) is not None


class HubClient(FileTransfers):
    """The few Hub calls the download stage makes, with the token kept out of every message."""

    def resolve(self, repo_id: str, revision: str, *, by_refs: bool = True) -> str:
        """The commit sha ``revision`` (branch, tag, or commit) points at.

        A full sha is its own answer (the listing at it proves it exists); a branch or tag is looked up
        in the repo's refs (a revision they lack is a UserError naming the branches and tags); a short
        sha is asked of the Hub. ``by_refs=False`` asks the Hub for any revision, as huggingface_hub's
        snapshot download does (``repo_info``): its refusals are that call's (RevisionNotFound...).
        """
        if is_full_sha(revision):
            return revision
        ctx = self.context(repo_id, revision)
        if not by_refs:
            return self._revision_sha(repo_id, revision, ctx, None)
        refs_url = self._api(repo_id, "refs")
        raw, _ = self.retry(lambda: self._get_json(refs_url), what=f"listing refs of {repo_id}", ctx=ctx)
        try:
            refs = answers.refs(raw)
        except BadAnswer as exc:
            raise self.bad_answer(f"GET {self._api_path(repo_id, 'refs')}", exc) from None
        branches = {b.name: b.targetCommit for b in refs.branches}
        tags = {t.name: t.targetCommit for t in refs.tags}
        names = {**tags, **branches}
        name = revision
        for prefix in ("refs/heads/", "refs/tags/"):
            if revision.startswith(prefix):
                name = revision[len(prefix) :]
        if name in names:
            return names[name]
        listed = ", ".join(shown(n, 60) for n in sorted(branches)[:20])
        listed_tags = ", ".join(shown(n, 60) for n in sorted(tags)[:20])
        not_found = UserError(
            f"revision {shown(revision)!r} does not exist in {repo_id} (branches: "
            f"{listed or 'none'}; tags: {listed_tags or 'none'}): "
            "pass an existing branch, tag or full commit sha with --revision"
        )
        if not re.fullmatch(r"[0-9a-fA-F]{4,39}", revision):
            raise not_found
        return self._revision_sha(repo_id, revision, ctx, not_found)

    def _revision_sha(self, repo_id: str, revision: str, ctx: FaultContext, not_found: UserError | None) -> str:
        """The commit ``/api/<type>s/<repo>/revision/<revision>`` names; ``not_found`` (when given: the repo
        is known to exist) for a 401 or 404 that is not a gated repository."""

        def lookup() -> Any:
            try:
                return self._get_json(self._api(repo_id, "revision", revision))[0]
            except HubStatusError as exc:
                if not_found is not None and exc.status in (401, 404) and exc.code != "GatedRepo":
                    raise not_found from None  # the repo exists (its refs listed): the revision does not
                raise

        info = self.retry(lookup, what=f"resolving {repo_id}@{revision}", ctx=ctx)
        try:
            return answers.revision_info(info).sha
        except BadAnswer as exc:
            raise self.bad_answer(f"GET {self._api_path(repo_id, 'revision', revision)}", exc) from None

    def list_files(self, repo_id: str, commit: str, *, recursive: bool = True) -> list[HubFile]:
        """Every file at ``commit`` (only the top level unless ``recursive``) with size, git blob id and
        (for LFS) sha256: the Hub's tree listing, page by page as its ``Link`` headers say (on the
        endpoint's own origin only), each entry checked by ``roost.hub.answers``."""
        call = f"GET {self._api_path(repo_id, 'tree', commit)}"
        origin = urlsplit(self._base)[:2]

        def listing() -> list[HubFile]:
            out: list[answers.TreeFile] = []
            url: str | None = self._api(repo_id, "tree", commit)
            params: dict[str, str] | None = {"recursive": "true" if recursive else "false", "expand": "false"}
            seen: set[str] = set()
            while url:
                if len(seen) >= MAX_PAGES:
                    raise self.bad_answer(call, f"more than {MAX_PAGES:,} pages")
                seen.add(url)
                page, r = self._get_json(url, params)
                try:
                    out += answers.tree_page(page, len(out))
                except BadAnswer as exc:
                    raise self.bad_answer(call, exc) from None
                url, params = r.links.get("next", {}).get("url"), None
                if url is not None:
                    nxt = urlsplit(str(r.url.join(url)))
                    if nxt[:2] != origin:
                        raise self.bad_answer(call, f"a next-page link to another origin ({nxt.scheme}://{nxt.hostname})")
                    url = str(r.url.join(url))
                    if url in seen:
                        raise self.bad_answer(call, "a next-page link back to a page already read")
            try:
                answers.check_listing(out)
            except BadAnswer as exc:
                raise self.bad_answer(call, exc) from None
            return [
                HubFile(path=f.path, size=f.size, blob_id=f.oid, lfs_sha256=f.lfs.oid if f.lfs else None,
                        xet_hash=f.xetHash)
                for f in out
            ]

        return self.retry(listing, what=f"listing files of {repo_id}@{commit[:12]}", ctx=self.context(repo_id, commit))

