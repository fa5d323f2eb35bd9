"""The Hub boundary: what a Hub answers is checked at one place (``roost.hub.answers``) and an answer
that does not fit is one UserError (exit 2) naming the endpoint, the call and the field — never a
traceback, never a file written. Each answer is served by ``AnswerHub`` (a FAKE for that one route:
olah answers well-formed JSON) in front of the real mirror, which answers everything else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hub_samples import REPO, SharedHub
from support.hub_faults import AnswerHub

from roost.errors import UserError
from roost.hub import answers
from roost.hub.snapshot import DownloadSpec, download_and_verify

SHA = "0123456789abcdef0123456789abcdef01234567"


def entry(**over: object) -> dict[str, object]:
    item: dict[str, object] = {"type": "file", "path": "config.json", "size": 10, "oid": "a" * 40}
    item.update(over)
    return item


def tree(*items: dict[str, object]) -> bytes:
    return json.dumps(list(items)).encode()


def refused(hub: SharedHub, tmp_path: Path, route: str, body: bytes, revision: str = "main",
            extra_headers: dict[str, str] | None = None) -> tuple[str, AnswerHub]:
    with AnswerHub(hub.endpoint, route, body, extra_headers=extra_headers) as fake, pytest.raises(UserError) as info:
        download_and_verify(DownloadSpec(repo_id=REPO, revision=revision), tmp_path / "dl", endpoint=fake.endpoint)
    message = str(info.value)
    assert info.value.exit_code == 2 and "\n" not in message and fake.answered >= 1
    assert message.startswith(f"{fake.endpoint} answered GET /api/models/{REPO}/")
    assert "check that HF_ENDPOINT points at a Hub" in message
    assert not any(p.is_file() for p in (tmp_path / "dl").glob("*"))  # nothing of the repository written
    return message, fake


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b"{", "something other than JSON (HTTP 200, application/json: not valid JSON"),
        (b"null", "null, not an object with branches and tags"),
        (b"[]", "a list, not an object with branches and tags"),
        (b'{"branches": "main"}', "branches: 'main': input should be a valid list"),
        (b'{"branches": [{"name": "main", "targetCommit": "xyz"}]}',
         "branches[0].targetCommit: 'xyz' is not a 40-hex commit sha"),
        (b'{"branches": [{"name": "main", "targetCommit": 40}]}', "branches[0].targetCommit: 40: input should be a valid string"),
        (b'{"branches": [{"targetCommit": "' + SHA.encode() + b'"}]}', "branches[0].name: missing"),
    ],
)
def test_refs_that_do_not_fit_are_refused_naming_the_field(shared_hub: SharedHub, tmp_path: Path, body: bytes,
                                                           said: str) -> None:
    message, _ = refused(shared_hub, tmp_path, "/refs", body)
    assert f"GET /api/models/{REPO}/refs with {said}" in message


def test_a_revision_answer_without_a_full_sha_is_refused(shared_hub: SharedHub, tmp_path: Path) -> None:
    message, _ = refused(shared_hub, tmp_path, "/revision/", b'{"sha": "not-a-sha", "siblings": []}', revision="abcd")
    assert f"GET /api/models/{REPO}/revision/abcd with sha: 'not-a-sha' is not a 40-hex commit sha" in message


@pytest.mark.parametrize(
    ("body", "said"),
    [
        (b'{"path": "config.json"}', "an object, not a list of files"),
        (tree(entry(), {"type": 3}), "[1].type: 3: input should be a valid string"),
        (b"[1]", "[0]: a number, not an object"),
        (tree(entry(size="12")), "[0].size: '12': input should be a valid integer"),
        (tree(entry(size=1.5)), "[0].size: 1.5: input should be a valid integer"),
        (tree(entry(size=True)), "[0].size: True: input should be a valid integer"),
        (tree(entry(size=-5)), "[0].size: -5 is a size outside 0..1,099,511,627,776 bytes"),
        (tree(entry(size=1 << 60)), f"[0].size: {1 << 60} is a size outside"),
        (tree(entry(path="../escape.json")), "[0].path: '../escape.json' is a file name that has an empty, '.' or '..'"),
        (tree(entry(path="a/../../b.json")), "[0].path: 'a/../../b.json' is a file name that has an empty"),
        (tree(entry(path="/etc/passwd")), "[0].path: '/etc/passwd' is a file name that is absolute"),
        (tree(entry(path="a\u0000b.json")), "[0].path: 'a\\x00b.json' is a file name that holds a control character"),
        (tree(entry(path="a\nb.json")), "[0].path: 'a\\nb.json' is a file name that holds a control character"),
        (tree(entry(path="")), "[0].path: '' is a file name that is empty"),
        (tree(entry(path="x" * 300)), "is a file name that has a component longer than 255 bytes"),
        (tree(entry(oid="zz")), "[0].oid: 'zz' is not a 40-hex git blob id"),
        (tree(entry(lfs={"oid": "12", "size": 10})), "[0].lfs.oid: '12' is not a 64-hex sha256"),
        (tree(entry(lfs={"oid": "b" * 64, "size": 11})), "[0].lfs.size: 11 disagrees with the file's size 10"),
        (tree(entry(), entry()), "the listing names 'config.json' twice"),
        (tree(entry(path="a"), entry(path="a/b.json")), "the listing has 'a' both as a file and as the directory of 'a/b.json'"),
    ],
)
def test_tree_listings_that_do_not_fit_are_refused_naming_the_field(shared_hub: SharedHub, tmp_path: Path,
                                                                     body: bytes, said: str) -> None:
    message, _ = refused(shared_hub, tmp_path, "/tree/", body)
    assert f"GET /api/models/{REPO}/tree/{shared_hub.main} with " in message
    assert said in message


def test_a_next_page_on_another_origin_or_back_to_itself_is_refused(shared_hub: SharedHub, tmp_path: Path) -> None:
    """The token goes to the endpoint's origin only, and a listing that loops ends."""
    message, fake = refused(shared_hub, tmp_path, "/tree/", tree(entry()),
                            extra_headers={"Link": '<http://198.51.100.7/api/models/x/tree/y?cursor=1>; rel="next"'})
    assert "a next-page link to another origin (http://198.51.100.7)" in message
    assert fake.answered == 1
    # every page says the same next page: the second one's link leads back to itself
    message, fake = refused(shared_hub, tmp_path, "/tree/", tree(entry()),
                            extra_headers={"Link": f'</api/models/{REPO}/tree/{shared_hub.main}?cursor=2>; rel="next"'})
    assert "a next-page link back to a page already read" in message and fake.answered == 2


def test_an_answer_larger_than_the_bound_is_not_read_whole(shared_hub: SharedHub, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(answers, "MAX_ANSWER_BYTES", 1000)
    message, _ = refused(shared_hub, tmp_path, "/tree/", tree(*[entry(path=f"f{i}.json") for i in range(100)]))
    assert "with more than 1,000 bytes" in message


def test_the_model_checks_stand_alone() -> None:
    """What the mirror answers passes; the same checks guard names read back from a manifest."""
    good = answers.tree_page([entry(), {"type": "directory", "path": "original", "oid": "c" * 40, "size": 0},
                              entry(path="original/x.pth", lfs={"oid": "D" * 64, "size": 10, "pointerSize": 130})])
    assert [f.path for f in good] == ["config.json", "original/x.pth"]
    assert good[1].lfs is not None and good[1].lfs.oid == "d" * 64  # lower-cased
    assert answers.refs({"branches": [{"name": "main", "ref": "refs/heads/main", "targetCommit": SHA.upper()}],
                         "converts": []}).branches[0].targetCommit == SHA
    assert answers.repo_path_fault("a/b.safetensors") is None
    assert answers.repo_path_fault("a//b") is not None and answers.repo_path_fault("./a") is not None
    assert answers.repo_path_fault("\ud800.json") == "is not valid UTF-8"
