"""The hostile-input corpus (tests/hostile/corpus.py), every case a ``roost`` process of its own.

The cases run once per session, two at a time (most of them wait on nothing but roost's start), those
facing the server that never answers each in a thread of its own beside them;
each test then judges one case: its exit code, one stderr line for exit 2, no traceback and no
"internal error", no planted secret in its output, done within its time bound and its memory bound.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hostile.corpus import CASES, SECRETS, Case, build_workspace
from hostile.runner import Outcome, run_roost
from support.hostile_servers import HostileOpenAI, SilentServer

pytestmark = pytest.mark.slow

MAX_RSS_MB = 1024
"""Peak memory of one case: roost's imports take ~200 MB; an input read without bound takes far more."""

REPO = Path(__file__).resolve().parents[2]


def _env(root: Path, ws: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR")
    env = {k: os.environ[k] for k in keep if k in os.environ}
    env.update({
        "HOME": str(root / "home"),
        "ROOST_HOME": str(root / "roost-home"),
        "ROOST_RESULTS_DIR": str(root / "results"),
        "HF_ENDPOINT": "http://127.0.0.1:9",  # refused: no case may reach a Hub it was not given
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "NO_COLOR": "1",
        "COLUMNS": "100",
        "VLLM_API_KEY": SECRETS[0],
        "HF_TOKEN": SECRETS[1],
    })
    env.update({k: v.format_map(ws) for k, v in extra.items()})
    return env


def _faces_silence(c: Case) -> bool:
    """Whether the case talks to the server that accepts and never answers (``{silent}``)."""
    return any("{silent}" in part for part in (*c.argv, *c.env.values()))


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Outcome]]:
    root = tmp_path_factory.mktemp("hostile")
    ws = build_workspace(root / "ws")
    (root / "home").mkdir()
    gsm8k = root / "gsm8k.jsonl"
    shutil.copy(REPO / "tests" / "fixtures" / "eval" / "parity_gsm8k.jsonl", gsm8k)
    ws["gsm8k"] = str(gsm8k)
    with HostileOpenAI() as openai, SilentServer() as silent:
        ws["openai"] = f"http://127.0.0.1:{openai.port}"
        ws["silent"] = silent.url

        def one(c: Case) -> tuple[str, Outcome]:
            argv = [a.format_map(ws) for a in c.argv]
            return c.id, run_roost(argv, env=_env(root, ws, c.env), cwd=root, timeout_s=c.timeout_s)

        # a case facing the server that never answers waits out roost's own timeouts (~10-35 s) using no CPU:
        # each has a thread of its own; the rest (~0.8 s of CPU each, roost's start) run one per core, the other
        # xdist worker keeping its share
        waiting = [c for c in CASES if _faces_silence(c)]
        with ThreadPoolExecutor(max_workers=len(waiting) or 1) as waits, ThreadPoolExecutor(max_workers=2) as pool:
            pending = [waits.submit(one, c) for c in waiting]
            results = dict(pool.map(one, [c for c in CASES if c not in waiting]))
            results |= dict(f.result() for f in pending)
        yield results
    (Path(ws["readonly_dir"])).chmod(0o755)


def test_the_corpus_has_at_least_150_cases_over_every_command() -> None:
    assert len(CASES) >= 150
    commands = {c.argv[0] for c in CASES}
    assert {"run", "download", "audit", "plan", "diagnose", "bench", "eval", "results", "gateway", "monitor"} <= commands


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_hostile_input(c: Case, outcomes: dict[str, Outcome]) -> None:
    o = outcomes[c.id]
    said = f"{c.id}: exit {o.code} in {o.seconds:.1f} s; stderr: {o.stderr[-600:]!r}"
    assert not o.hung, f"hung: killed after {c.timeout_s} s; {said}"
    assert "Traceback" not in o.stderr + o.stdout, said
    assert "internal error" not in o.stderr, said
    assert o.code in c.codes(), said
    if o.code == 2:
        assert len(o.stderr_lines) == 1 and o.stderr_lines[0].startswith("roost: error: "), said
    for secret in SECRETS:
        assert secret not in o.stdout + o.stderr, f"a planted secret was printed; {said}"
    assert o.max_rss_mb < MAX_RSS_MB, f"peak memory {o.max_rss_mb:.0f} MB; {said}"
