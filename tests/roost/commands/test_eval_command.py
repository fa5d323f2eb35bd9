"""``roost eval BASE_URL --model M --task T``: the JSON contract, exit 0/1/2, one line for unusable
input, and a run the server stopped that a rerun with the same ``--log`` completes.

Against the FAKE ScriptedServer (tests/support/eval_server.py). The real executable runs where the
entry point itself is the point (the JSON contract, a typo'd flag, exit 1); the rest runs
``roost.cli.main`` in this process with typer's runner streams (the same standalone_mode=False path
and error mapping as the executable, without ~3 s of imports per call).
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from support.cli import roost_exe
from support.errors import assert_one_line_error
from support.eval_server import Reply, ScriptedServer, question_of
from typer.testing import CliRunner

import roost.commands.eval as eval_module
from roost.cli import main
from roost.eval.log import read_answers

# The JSON's keys, in the order roost/commands/eval.py's docstring lists them.
EVAL_JSON_KEYS = ["task", "model", "status", "n", "correct", "wrong", "accuracy", "ci_low", "ci_high", "unparsed",
                  "truncated", "mean_output_tokens", "per_category", "sampling", "seed", "limit",
                  "per_category_sample", "dataset", "resumed", "elapsed_s", "error"]
CATEGORY_KEYS = ["n", "correct", "accuracy"]
DATASET_KEYS = ["source", "revision", "files", "rows"]

CATEGORIES = ("law", "math")
PER_CAT = 6
N = PER_CAT * len(CATEGORIES)


def roost(*args: str, env: dict[str, str | None] | None = None) -> tuple[int, str, str]:
    """``roost ARGS`` in this process through roost.cli.main: (exit code, stdout, stderr)."""
    runner = CliRunner()
    with runner.isolation(env=env) as (out, err, _), pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["roost", *args])
        try:
            main()
            code: Any = 0
        except SystemExit as exc:
            code = exc.code
        return code, out.getvalue().decode(), err.getvalue().decode()


def executable(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed ``roost ARGS`` without the key and Hub endpoint of this shell."""
    return roost_exe(*args, drop_env=("VLLM_API_KEY", "HF_ENDPOINT"))


def mmlu_row(cat: str, i: int) -> dict[str, Any]:
    k = (CATEGORIES.index(cat) + i) % 4
    return {"question_id": f"{cat}-{i}", "question": f"{cat} question {i}?", "options": [f"o{j}" for j in range(4)],
            "answer": "ABCD"[k], "answer_index": k, "category": cat}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("eval-cli") / "test.jsonl"
    path.write_text("".join(json.dumps(mmlu_row(c, i)) + "\n" for c in CATEGORIES for i in range(PER_CAT)))
    return path


def right_letter(body: dict[str, Any]) -> tuple[str, int, str]:
    text = question_of(body)
    for cat in CATEGORIES:
        for i in range(PER_CAT):
            if f"\n{cat} question {i}?\n" in text:
                return cat, i, "ABCD"[(CATEGORIES.index(cat) + i) % 4]
    raise AssertionError(text)


def healthy(body: dict[str, Any]) -> Reply:
    """law: all right; math: 0-2 right, 3 wrong, 4 unparsed, 5 truncated."""
    cat, i, right = right_letter(body)
    if cat == "math" and i == 3:
        return Reply(content="ANSWER: " + "ABCD"[("ABCD".index(right) + 1) % 4], completion_tokens=30)
    if cat == "math" and i == 4:
        return Reply(content="No idea.", completion_tokens=30)
    if cat == "math" and i == 5:
        return Reply(content="Let me", finish_reason="length", completion_tokens=100)
    return Reply(content=f"ANSWER: {right}", reasoning="thinking it over", completion_tokens=20)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer(healthy, model="scripted", max_model_len=8192) as s:
        yield s


def base_args(server: ScriptedServer, dataset: Path, *more: str) -> list[str]:
    return ["eval", server.url, "--model", "scripted", "--task", "mmlu-pro", "--dataset", str(dataset),
            "--per-category", str(PER_CAT), *more]


# --- the executable -------------------------------------------------------------------------------------

def test_json_contract_real_entry_point(server: ScriptedServer, dataset: Path) -> None:
    r = executable(*base_args(server, dataset, "--json", "--seed", "3", "--max-tokens", "2000", "--no-thinking"))
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    out = json.loads(r.stdout)
    assert list(out) == EVAL_JSON_KEYS
    documented = (eval_module.__doc__ or "").split("The JSON:")[1]
    for key in [*EVAL_JSON_KEYS, *DATASET_KEYS]:
        assert f"``{key}``" in documented, key
    assert "{n, correct, accuracy}" in documented
    assert (out["task"], out["model"], out["status"], out["error"]) == ("mmlu-pro", "scripted", "completed", "")
    assert (out["n"], out["correct"], out["wrong"], out["unparsed"], out["truncated"]) == (N, 9, 1, 1, 1)
    assert out["accuracy"] == pytest.approx(9 / 12) and out["ci_low"] < 0.75 < out["ci_high"]
    assert out["mean_output_tokens"] == pytest.approx((9 * 20 + 30 + 30 + 100) / 12)
    assert list(out["per_category"]) == ["law", "math"]
    assert all(list(v) == CATEGORY_KEYS for v in out["per_category"].values())
    assert out["per_category"]["math"] == {"n": 6, "correct": 3, "accuracy": 0.5}
    assert out["sampling"] == {"temperature": 0.6, "top_p": 0.95, "top_k": 20, "max_tokens": 2000, "thinking": False,
                               "concurrency": 8}
    assert (out["seed"], out["limit"], out["per_category_sample"], out["resumed"]) == (3, None, PER_CAT, 0)
    assert list(out["dataset"]) == DATASET_KEYS
    assert out["dataset"]["source"] == str(dataset) and out["dataset"]["files"] == ["test.jsonl"]
    assert out["dataset"]["rows"] == N and out["dataset"]["revision"].startswith("sha256:")
    assert isinstance(out["elapsed_s"], float)
    assert len(server.requests) == N
    assert {b["chat_template_kwargs"]["enable_thinking"] for b in server.requests} == {False}


def test_typo_flag_is_one_line() -> None:
    r = executable("eval", "http://127.0.0.1:9", "--model", "m", "--task", "gsm8k", "--per-categroy", "5")
    assert (r.returncode, r.stdout) == (2, ""), r.stderr
    line = assert_one_line_error(r.returncode, r.stderr, "No such option: --per-categroy")
    assert "--per-category" in line and "roost eval --help" in line


def failing_after(answered: int) -> Callable[[dict[str, Any]], Reply]:
    """The healthy script for the first ``answered`` requests, then 500 for every request."""
    lock, count = threading.Lock(), [0]

    def script(body: dict[str, Any]) -> Reply:
        with lock:
            count[0] += 1
            n = count[0]
        return healthy(body) if n <= answered else Reply(status=500)
    return script


def test_server_failing_mid_run_then_resumed(dataset: Path, tmp_path: Path) -> None:
    log = tmp_path / "eval.jsonl"
    with ScriptedServer(failing_after(5)) as sick:
        r = executable(*base_args(sick, dataset, "--log", str(log), "--quiet", "--concurrency", "4"))
    assert_one_line_error(r.returncode, r.stderr, "the server stopped answering", "HTTP 500", "3 attempts", want_code=1)
    assert r.stdout == ""
    kept = read_answers(log)
    assert len(kept) == 5 and len({a["id"] for a in kept}) == 5
    assert json.loads(log.read_text().splitlines()[0])["model"] == "scripted"

    with ScriptedServer(healthy) as well:
        code, out, err = roost(*base_args(well, dataset, "--log", str(log), "--quiet", "--concurrency", "4", "--json"))
        asked = {"{}-{}".format(*right_letter(b)[:2]) for b in well.requests}
    assert code == 0, err
    result = json.loads(out)
    assert len(well.requests) == N - 5 and asked.isdisjoint(a["id"] for a in kept)
    assert (result["resumed"], result["n"], result["correct"], result["status"]) == (5, N, 9, "completed")
    assert len(read_answers(log)) == N


# --- in this process ----------------------------------------------------------------------------------

def test_human_summary(server: ScriptedServer, dataset: Path) -> None:
    code, out, err = roost(*base_args(server, dataset))
    assert code == 0, err
    assert f"mmlu-pro on scripted at {server.url}: {N} questions" in out
    assert "9 correct, 1 wrong, 1 unparsed, 1 truncated" in out
    assert "law" in out and "math" in out
    assert "Traceback" not in err and "roost: error" not in err


def test_api_key(dataset: Path) -> None:
    with ScriptedServer(healthy, api_key="sekrit-key-123") as locked:
        args = base_args(locked, dataset, "--limit", "2")
        line = assert_one_line_error(*roost(*args, "--api-key", "wrong-key-456")[::2], "refused the API key", "HTTP 401")
        assert "wrong-key-456" not in line and "sekrit" not in line
        assert_one_line_error(*roost(*args)[::2], "refused the API key")  # none given
        code, _, err = roost(*args, "--quiet", env={"VLLM_API_KEY": "sekrit-key-123"})
        assert code == 0, err
        assert len(locked.requests) == 2


@pytest.mark.parametrize(("args", "fragments"), [
    (["--task", "humaneval"], ["unknown task 'humaneval': choose one of gsm8k, math500, mmlu-pro"]),
    (["--per-category", "7"], ["--per-category 7: category", "has only 6 questions", "use at most 6"]),
    (["--limit", "0"], ["--limit"]),
    (["--temperature", "-1"], ["--temperature"]),
    (["--concurrency", "0"], ["--concurrency"]),
    (["--max-tokens", "9000"], ["--max-tokens 9000 does not fit the server's 8,192-token window", "at most 4096"]),
    (["--model", "nobody"], ["--model 'nobody' is not served at", "it serves: scripted"]),
])
def test_unusable_input_is_one_line(server: ScriptedServer, dataset: Path, args: list[str],
                                    fragments: list[str]) -> None:
    cli = base_args(server, dataset)
    for flag in ("--task", "--model", "--per-category"):  # the case's own value replaces the default one
        if flag in args and flag in cli:
            i = cli.index(flag)
            del cli[i:i + 2]
    code, out, err = roost(*cli, *args)
    assert_one_line_error(code, err, *fragments)
    assert out == ""
    assert server.requests == []  # refused before any question


def test_unusable_datasets_are_one_line(server: ScriptedServer, tmp_path: Path) -> None:
    no_options = tmp_path / "no-options.jsonl"
    no_options.write_text(json.dumps({k: v for k, v in mmlu_row("law", 0).items() if k not in ("options", "category")}))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    cases = [
        (no_options, [str(no_options), "line 1", "missing column(s) 'options', 'category'"]),
        (empty, ["no rows in empty.jsonl"]),
        (tmp_path / "nowhere.jsonl", ["no such file or directory"]),
    ]
    for path, fragments in cases:
        code, out, err = roost("eval", server.url, "--model", "scripted", "--task", "mmlu-pro", "--dataset", str(path),
                               "--per-category", "1")
        assert_one_line_error(code, err, *fragments)
        assert out == ""


@pytest.mark.parametrize("url", [
    "ftp://127.0.0.1:8000", "http://127.0.0.1:notaport", "http:///v1",
    "http://",
])
def test_bad_url(url: str, dataset: Path) -> None:
    code, _, err = roost("eval", url, "--model", "m", "--task", "mmlu-pro", "--dataset", str(dataset))
    assert_one_line_error(code, err, "server URL", "is not usable")


def test_nothing_listening_is_exit_1(dataset: Path) -> None:
    with ScriptedServer(healthy) as gone:
        url = gone.url
    code, _, err = roost("eval", url, "--model", "scripted", "--task", "mmlu-pro", "--dataset", str(dataset),
                         "--per-category", "1")
    assert_one_line_error(code, err, "does not answer", want_code=1)


def test_server_without_chat_content(dataset: Path) -> None:
    with ScriptedServer(lambda body: Reply(raw={"object": "chat.completion"})) as broken:
        code, out, err = roost(*base_args(broken, dataset, "--quiet", "--limit", "3"))
    assert_one_line_error(code, err, "without a chat completion (no choices[0].message)")
    assert out == ""
