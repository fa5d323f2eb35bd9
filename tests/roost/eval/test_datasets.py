"""A task's questions from upstream files, directories and Hub dataset repos, and the stratified
sample (roost/eval/datasets.py). Files are written in each task's upstream format (Parquet with
pyarrow, JSONL); the Hub repo is served by a real olah on loopback and read through huggingface_hub."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from support.errors import assert_one_line_message

from roost.errors import UserError
from roost.eval.datasets import load_dataset, sample
from roost.eval.suites import Question, get_task
from roost.hub.mirror import HubMirror
from roost.hub.publish import publish_repo

GSM = get_task("gsm8k")
MATH = get_task("math500")
MMLU = get_task("mmlu-pro")


# --- upstream rows -----------------------------------------------------------------------------------

def gsm_rows(n: int, tag: str = "") -> list[dict[str, Any]]:
    return [{"question": f"{tag}Natalia sold {i} clips. How many?", "answer": f"She sold <<{i}*2={2 * i}>>.\n#### {2 * i}"}
            for i in range(n)]


def math_rows(n: int) -> list[dict[str, Any]]:
    subjects = ["Algebra", "Geometry", "Prealgebra"]
    return [{"problem": f"Compute {i} + 1.", "solution": f"It is \\boxed{{{i + 1}}}.", "answer": str(i + 1),
             "subject": subjects[i % 3], "level": 1 + i % 5, "unique_id": f"test/{subjects[i % 3].lower()}/{i}.json"}
            for i in range(n)]


def mmlu_rows(sizes: dict[str, int]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    qid = 70
    for cat, count in sizes.items():
        for i in range(count):
            k = (qid + i) % 4
            rows.append({"question_id": qid, "question": f"{cat} question {i}?",
                         "options": [f"{cat}-{i}-opt{j}" for j in range(4)], "answer": "ABCD"[k], "answer_index": k,
                         "cot_content": "", "category": cat, "src": f"ori_mmlu-{cat}"})
            qid += 1
    return rows


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def write_parquet(path: Path, rows: list[dict[str, Any]], schema: pa.Schema | None = None) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)
    return path


MMLU_SCHEMA = pa.schema([("question_id", pa.int64()), ("question", pa.string()), ("options", pa.list_(pa.string())),
                         ("answer", pa.string()), ("answer_index", pa.int64()), ("cot_content", pa.string()),
                         ("category", pa.string()), ("src", pa.string())])


# --- formats -----------------------------------------------------------------------------------------

def test_mmlu_pro_parquet_with_list_options(tmp_path: Path) -> None:
    path = write_parquet(tmp_path / "test-00000-of-00001.parquet", mmlu_rows({"law": 3, "math": 2}), MMLU_SCHEMA)
    assert pq.read_schema(path).field("options").type == pa.list_(pa.string())
    data = load_dataset(MMLU, str(path))
    assert [q.id for q in data.questions] == ["70", "71", "72", "73", "74"]
    q = data.questions[0]
    assert (q.category, q.options, q.reference) == ("law", ("law-0-opt0", "law-0-opt1", "law-0-opt2", "law-0-opt3"), "C")
    assert data.info.source == str(path) and data.info.files == [path.name] and data.info.rows == 5
    assert data.info.revision.startswith("sha256:") and len(data.info.revision) == len("sha256:") + 16


def test_same_rows_in_parquet_and_jsonl_are_the_same_questions(tmp_path: Path) -> None:
    for task, rows in ((GSM, gsm_rows(4)), (MATH, math_rows(4)), (MMLU, mmlu_rows({"law": 2, "math": 2}))):
        schema = MMLU_SCHEMA if task is MMLU else None
        a = load_dataset(task, str(write_parquet(tmp_path / task.name / "test.parquet", rows, schema)))
        b = load_dataset(task, str(write_jsonl(tmp_path / task.name / "test.jsonl", rows)))
        assert a.questions == b.questions, task.name
        assert a.info.revision != b.info.revision  # the files' own digest


def test_gsm8k_and_math500_upstream_files(tmp_path: Path) -> None:
    gsm = load_dataset(GSM, str(write_parquet(tmp_path / "gsm.parquet", gsm_rows(3))))
    assert [q.reference for q in gsm.questions] == ["0", "2", "4"]
    assert len({q.id for q in gsm.questions}) == 3 and all(q.category == "" for q in gsm.questions)
    math = load_dataset(MATH, str(write_jsonl(tmp_path / "test.jsonl", math_rows(4))))
    assert [(q.id, q.category, q.reference) for q in math.questions][:2] == [
        ("test/algebra/0.json", "Algebra", "1"), ("test/geometry/1.json", "Geometry", "2")]


def test_json_list_file(tmp_path: Path) -> None:
    path = tmp_path / "test.json"
    path.write_text(json.dumps(gsm_rows(2)))
    assert load_dataset(GSM, str(path)).info.rows == 2
    path.write_text(json.dumps({"data": gsm_rows(3)}))
    assert load_dataset(GSM, str(path)).info.rows == 3
    path.write_text(json.dumps({"rows": 3}))
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(path))
    assert_one_line_message(err.value, str(path), "expected a JSON list of rows")


def test_duplicate_questions_keep_distinct_ids(tmp_path: Path) -> None:
    rows = gsm_rows(2) + gsm_rows(1)
    data = load_dataset(GSM, str(write_jsonl(tmp_path / "test.jsonl", rows)))
    ids = [q.id for q in data.questions]
    assert len(set(ids)) == 3 and ids[2] == f"{ids[0]}-2"


# --- directories -------------------------------------------------------------------------------------

def test_directory_test_split_is_chosen(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "d" / "train.jsonl", math_rows(9))
    write_jsonl(tmp_path / "d" / "test.jsonl", math_rows(4))
    data = load_dataset(MATH, str(tmp_path / "d"))
    assert data.info.files == ["test.jsonl"] and data.info.rows == 4


def test_directory_sharded_parquet_test_split(tmp_path: Path) -> None:
    rows = mmlu_rows({"law": 4, "math": 4})
    d = tmp_path / "mmlu"
    write_parquet(d / "data" / "test-00000-of-00002.parquet", rows[:5], MMLU_SCHEMA)
    write_parquet(d / "data" / "test-00001-of-00002.parquet", rows[5:], MMLU_SCHEMA)
    write_parquet(d / "data" / "validation-00000-of-00001.parquet", mmlu_rows({"val": 3}), MMLU_SCHEMA)
    (d / "README.md").write_text("# MMLU-Pro\n")
    data = load_dataset(MMLU, str(d))
    assert data.info.files == ["data/test-00000-of-00002.parquet", "data/test-00001-of-00002.parquet"]
    assert [q.id for q in data.questions] == [str(r["question_id"]) for r in rows]


def test_gsm8k_config_directories_main_is_chosen(tmp_path: Path) -> None:
    d = tmp_path / "gsm8k"
    write_parquet(d / "main" / "train-00000-of-00001.parquet", gsm_rows(7, "train "))
    write_parquet(d / "main" / "test-00000-of-00001.parquet", gsm_rows(3))
    write_parquet(d / "socratic" / "train-00000-of-00001.parquet", gsm_rows(7, "s-train "))
    write_parquet(d / "socratic" / "test-00000-of-00001.parquet", gsm_rows(5, "socratic "))
    data = load_dataset(GSM, str(d))
    assert data.info.files == ["main/test-00000-of-00001.parquet"]
    assert [q.text for q in data.questions] == [r["question"] for r in gsm_rows(3)]


def test_directory_with_ambiguous_configs(tmp_path: Path) -> None:
    d = tmp_path / "two"
    write_jsonl(d / "easy" / "test.jsonl", mmlu_rows({"law": 2}))
    write_jsonl(d / "hard" / "test.jsonl", mmlu_rows({"law": 2}))
    with pytest.raises(UserError) as err:
        load_dataset(MMLU, str(d))
    assert_one_line_message(err.value, str(d), "more than one split or config", "easy/test.jsonl", "hard/test.jsonl", "give one file")


def test_directory_with_two_splits_and_no_test(tmp_path: Path) -> None:
    d = tmp_path / "flat"
    write_jsonl(d / "train.jsonl", gsm_rows(3, "train "))
    write_jsonl(d / "validation.jsonl", gsm_rows(2, "validation "))
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(d))
    assert_one_line_message(err.value, "more than one split")


def test_directory_without_data_files(tmp_path: Path) -> None:
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "README.md").write_text("nothing")
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(tmp_path / "e"))
    assert_one_line_message(err.value, "no Parquet, JSONL or JSON file in it")


# --- unusable files ------------------------------------------------------------------------------------

def test_missing_columns_name_the_file_and_the_columns(tmp_path: Path) -> None:
    rows = [{k: v for k, v in r.items() if k not in ("options", "category")} for r in mmlu_rows({"law": 2})]
    path = write_parquet(tmp_path / "test.parquet", rows)
    with pytest.raises(UserError) as err:
        load_dataset(MMLU, str(path))
    assert_one_line_message(err.value, f"--dataset {path} row 0", "missing column(s) 'options', 'category'", "MMLU-Pro")
    # GSM8K rows given as MATH-500
    path = write_jsonl(tmp_path / "gsm.jsonl", gsm_rows(2))
    with pytest.raises(UserError) as err:
        load_dataset(MATH, str(path))
    assert_one_line_message(err.value, f"{path} line 1", "'problem'", "'subject'", "problem, answer, subject")


def test_wrong_types(tmp_path: Path) -> None:
    rows = mmlu_rows({"law": 2})
    rows[1]["options"] = "A) one B) two"
    path = write_jsonl(tmp_path / "test.jsonl", rows)
    with pytest.raises(UserError) as err:
        load_dataset(MMLU, str(path))
    assert_one_line_message(err.value, f"{path} line 2", "'options' must be a list")
    bad = [{"question": ["not", "text"], "answer": "#### 3"}]
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(write_jsonl(tmp_path / "gsm.jsonl", bad)))
    assert_one_line_message(err.value, "line 1", "column 'question' must be text, got list")
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(write_parquet(tmp_path / "gsm.parquet", [{"question": "q", "answer": 18}])))
    assert_one_line_message(err.value, "row 0", "no '#### N' final line")
    not_rows = tmp_path / "lines.jsonl"
    not_rows.write_text('{"question": "q", "answer": "#### 1"}\n[1, 2]\n')
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(not_rows))
    assert_one_line_message(err.value, f"{not_rows} line 2", "not a JSON object")
    garbled = tmp_path / "garbled.jsonl"
    garbled.write_text('{"question": "q", "answer": "#### 1"}\n{"question": \n')
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(garbled))
    assert_one_line_message(err.value, f"{garbled} line 2", "not a JSON object; is this a JSONL file?")
    fake_parquet = tmp_path / "fake.parquet"
    fake_parquet.write_text("question,answer\n")
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(fake_parquet))
    assert_one_line_message(err.value, str(fake_parquet), "not a readable Parquet file")
    csv = tmp_path / "test.csv"
    csv.write_text("question,answer\n")
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(csv))
    assert_one_line_message(err.value, "expected a .parquet, .jsonl or .json file")


def test_empty_files(tmp_path: Path) -> None:
    empty = tmp_path / "test.jsonl"
    empty.write_text("")
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(empty))
    assert_one_line_message(err.value, "no rows in test.jsonl")
    blank = tmp_path / "blank" / "test.jsonl"
    blank.parent.mkdir()
    blank.write_text("\n\n")
    with pytest.raises(UserError) as err:
        load_dataset(GSM, str(blank.parent))
    assert_one_line_message(err.value, "no rows")
    no_rows = write_parquet(tmp_path / "empty.parquet", [], MMLU_SCHEMA)
    with pytest.raises(UserError) as err:
        load_dataset(MMLU, str(no_rows))
    assert_one_line_message(err.value, "no rows in empty.parquet")


def test_not_a_path_nor_a_repo() -> None:
    with pytest.raises(UserError) as err:
        load_dataset(GSM, "/no/such/file.jsonl")
    assert_one_line_message(err.value, "no such file or directory, and not a Hub dataset repo")


# --- the sample -----------------------------------------------------------------------------------------

SIZES = {"biology": 12, "law": 8, "math": 5}


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> list[Question]:
    path = write_parquet(tmp_path_factory.mktemp("mmlu") / "test.parquet", mmlu_rows(SIZES), MMLU_SCHEMA)
    return load_dataset(MMLU, str(path)).questions


def _per_cat(qs: list[Question]) -> dict[str, int]:
    out: dict[str, int] = {}
    for q in qs:
        out[q.category] = out.get(q.category, 0) + 1
    return out


def _in_dataset_order(sub: list[Question], full: list[Question]) -> bool:
    pos = {q.id: i for i, q in enumerate(full)}
    return [pos[q.id] for q in sub] == sorted(pos[q.id] for q in sub)


def test_per_category_counts_and_seeds(questions: list[Question]) -> None:
    a = sample(questions, seed=0, per_category=4)
    assert _per_cat(a) == {"biology": 4, "law": 4, "math": 4}
    assert _in_dataset_order(a, questions)
    assert sample(questions, seed=0, per_category=4) == a  # same seed, same sample
    others = [sample(questions, seed=s, per_category=4) for s in (1, 2, 3)]
    assert all({q.id for q in o} != {q.id for q in a} for o in others)  # another seed, another sample
    assert sample(questions, seed=0, per_category=5) and _per_cat(sample(questions, seed=7, per_category=5))["math"] == 5


def test_a_categorys_draw_does_not_depend_on_the_others(questions: list[Question]) -> None:
    without_law = [q for q in questions if q.category != "law"]
    full = {q.id for q in sample(questions, seed=3, per_category=4) if q.category != "law"}
    assert {q.id for q in sample(without_law, seed=3, per_category=4)} == full


def test_limit_is_a_prefix(questions: list[Question]) -> None:
    ten, twenty = sample(questions, seed=5, limit=10), sample(questions, seed=5, limit=20)
    assert (len(ten), len(twenty)) == (10, 20)
    assert {q.id for q in ten} < {q.id for q in twenty}
    assert _in_dataset_order(ten, questions) and _in_dataset_order(twenty, questions)
    assert {q.id for q in sample(questions, seed=6, limit=10)} != {q.id for q in ten}
    # with a stratified sample under it
    s10, s5 = sample(questions, seed=1, per_category=4, limit=10), sample(questions, seed=1, per_category=4, limit=5)
    assert {q.id for q in s5} < {q.id for q in s10} <= {q.id for q in sample(questions, seed=1, per_category=4)}
    assert len(sample(questions, seed=0, limit=1000)) == len(questions)
    assert sample(questions, seed=0) == questions


def test_per_category_larger_than_a_category(questions: list[Question]) -> None:
    with pytest.raises(UserError) as err:
        sample(questions, seed=0, per_category=6)
    assert_one_line_message(err.value, "--per-category 6: category 'math' has only 5 questions", "use at most 5")
    with pytest.raises(UserError) as err:
        sample(questions, seed=0, per_category=10)  # two categories short: the smallest is named
    assert_one_line_message(err.value, "category 'math' has only 5")
    with pytest.raises(UserError) as err:
        sample(questions[:3], seed=0, limit=0)
    assert_one_line_message(err.value, "--limit 0: must be at least 1")


# --- a Hub dataset repo (olah on loopback) --------------------------------------------------------------

@pytest.fixture
def hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh HF_HOME: huggingface_hub reads its environment once, at import, so its constants follow."""
    from huggingface_hub import constants

    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.setattr(constants, "HF_HOME", str(home))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return home


@pytest.fixture
def dataset_hub(tmp_path: Path) -> Iterator[tuple[HubMirror, str]]:
    src = tmp_path / "src"
    write_parquet(src / "data" / "test-00000-of-00001.parquet", mmlu_rows({"law": 3, "math": 3}), MMLU_SCHEMA)
    write_parquet(src / "data" / "validation-00000-of-00001.parquet", mmlu_rows({"val": 2}), MMLU_SCHEMA)
    (src / "README.md").write_text("---\nlicense: mit\n---\n# mmlu-mini\n")
    sha = publish_repo(src, tmp_path / "mirrors", "acme/mmlu-mini", repo_type="datasets")
    mirror = HubMirror(tmp_path / "mirrors", workdir=tmp_path / "olah")
    mirror.start()
    try:
        yield mirror, sha
    finally:
        mirror.stop()


def test_hub_dataset_repo_then_offline_from_the_warm_cache(dataset_hub: tuple[HubMirror, str], hf_cache: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    from huggingface_hub import constants

    mirror, sha = dataset_hub
    data = load_dataset(MMLU, "acme/mmlu-mini", endpoint=mirror.endpoint)
    assert (data.info.source, data.info.revision) == ("acme/mmlu-mini", sha)
    assert data.info.files == ["data/test-00000-of-00001.parquet"] and data.info.rows == 6
    assert [q.category for q in data.questions] == ["law"] * 3 + ["math"] * 3
    assert (hf_cache / "hub" / "datasets--acme--mmlu-mini" / "snapshots" / sha).is_dir()
    pinned = load_dataset(MMLU, f"acme/mmlu-mini@{sha}", endpoint=mirror.endpoint)
    assert pinned.info.revision == sha and pinned.questions == data.questions
    assert load_dataset(MMLU, "hf://datasets/acme/mmlu-mini", endpoint=mirror.endpoint).info.revision == sha
    with pytest.raises(UserError) as err:
        load_dataset(MMLU, "acme/no-such-dataset", endpoint=mirror.endpoint)
    assert_one_line_message(err.value, "--dataset", "acme/no-such-dataset", "not found")

    mirror.stop()  # offline: the warm cache alone
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    for ref in ("acme/mmlu-mini", f"acme/mmlu-mini@{sha}"):
        offline = load_dataset(MMLU, ref, endpoint=mirror.endpoint)
        assert (offline.info.revision, offline.questions) == (sha, data.questions), ref
    with pytest.raises(UserError) as err:
        load_dataset(MMLU, "acme/never-fetched", endpoint=mirror.endpoint)
    assert_one_line_message(err.value, "acme/never-fetched@main", "not in the Hub cache")

