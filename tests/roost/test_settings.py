"""``roost.settings``: every environment variable roost reads goes through it, read at call time, with
each reader's own default and empty-value rule; one Hub-token order; one way to add roost's logger."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from roost import settings as S
from roost.errors import UserError
from roost.hub._endpoint import resolve_token

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("roost", "flows", "tasks", "blocks", "deployments")
SETTINGS = ROOT / "roost" / "settings.py"
ENV_CALLS = {"environ", "getenv", "putenv", "unsetenv", "getenvb", "environb"}


def _product_files() -> list[Path]:
    return sorted(p for d in PRODUCT for p in (ROOT / d).rglob("*.py") if "__pycache__" not in p.parts)


def _env_access(tree: ast.AST) -> list[int]:
    """Lines that touch the process environment: ``os.environ``/``os.getenv``..., or those names imported
    from ``os``."""
    def touches(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute):
            return node.attr in ENV_CALLS and isinstance(node.value, ast.Name) and node.value.id == "os"
        return isinstance(node, ast.ImportFrom) and node.module == "os" and any(a.name in ENV_CALLS for a in node.names)

    return [node.lineno for node in ast.walk(tree) if touches(node)]


def test_only_the_settings_module_touches_the_environment() -> None:
    found = {str(p.relative_to(ROOT)): lines for p in _product_files()
             if p != SETTINGS and (lines := _env_access(ast.parse(p.read_text(), str(p))))}
    assert found == {}, f"read environment variables through roost.settings, not here: {found}"
    assert _env_access(ast.parse(SETTINGS.read_text()))  # the test sees what it looks for


def test_each_variable_name_is_written_in_the_settings_module_only() -> None:
    """A string that is exactly a variable's name (not a message naming it) is the settings module's constant."""
    names = {v for k, v in vars(S).items() if k.isupper() and isinstance(v, str) and k == v}
    assert {"HF_TOKEN", "ROOST_HOME", "VLLM_API_KEY", "PREFECT_API_URL"} <= names
    found = []
    for p in _product_files():
        if p == SETTINGS:
            continue
        for node in ast.walk(ast.parse(p.read_text(), str(p))):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{p.relative_to(ROOT)}:{node.lineno}: {node.value}")
    assert found == []


def test_every_field_reads_its_own_variable_and_nothing_is_cached(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, field in S.Environment.model_fields.items():
        alias = str(field.validation_alias)
        assert getattr(S, alias) == alias and name == alias.lower()
        monkeypatch.setenv(alias, f"value of {alias}")
        assert getattr(S.environment(), name) == f"value of {alias}"  # set after import: read now
        monkeypatch.delenv(alias)
        assert getattr(S.environment(), name) is None
    monkeypatch.setenv("hf_token", "lower case is another variable")
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert S.environment().hf_token is None


def test_a_mapping_is_read_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROOST_PROGRESS", "rich")
    assert S.environment({}).roost_progress is None
    assert S.environment({"ROOST_PROGRESS": "off", "OTHER": "x"}).roost_progress == "off"
    assert S.environment().roost_progress == "rich"


def test_locations_keep_their_defaults_and_empty_values(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("ROOST_HOME", "ROOST_RESULTS_DIR", "ROOST_VLLM_PYTHON", "ROOST_VLLM_VENVS"):
        monkeypatch.delenv(name, raising=False)
    assert S.roost_home() == Path.home() / ".cache" / "roost"
    assert S.results_dir() == Path("results").resolve()
    assert S.vllm_python() == S.roost_home() / "vllm-venv" / "bin" / "python"
    assert S.vllm_venv_root() == Path.home() / ".cache" / "roost"
    monkeypatch.setenv("ROOST_HOME", "")  # set, though empty: the current directory, as os.environ.get gave it
    monkeypatch.setenv("ROOST_VLLM_PYTHON", "")  # empty: the default
    assert S.roost_home() == Path(".")
    assert S.vllm_python() == Path("vllm-venv") / "bin" / "python"
    monkeypatch.setenv("ROOST_HOME", "~/elsewhere")
    monkeypatch.setenv("ROOST_RESULTS_DIR", str(tmp_path / "r"))
    assert S.roost_home() == Path.home() / "elsewhere" and S.results_dir() == tmp_path / "r"


def test_the_hub_token_in_the_environment_and_its_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    assert S.hub_token_env() is None
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_older_name")
    assert S.hub_token_env() == ("hf_older_name", "HUGGING_FACE_HUB_TOKEN")
    assert resolve_token() == "hf_older_name"
    monkeypatch.setenv("HF_TOKEN", "")  # empty: not a token, the next variable counts
    assert S.hub_token_env() == ("hf_older_name", "HUGGING_FACE_HUB_TOKEN")
    monkeypatch.setenv("HF_TOKEN", " hf_first\n")
    assert S.hub_token_env() == (" hf_first\n", "HF_TOKEN")
    assert resolve_token() == "hf_first" and resolve_token("hf_given") == "hf_given"
    monkeypatch.delenv("HF_TOKEN")
    monkeypatch.setenv("HUGGING_FACE_HUB_TOKEN", "hf_bad token")
    with pytest.raises(UserError, match=r"^HUGGING_FACE_HUB_TOKEN holds whitespace") as info:
        resolve_token()
    assert "hf_bad" not in str(info.value)


def test_hub_offline_as_huggingface_hub_reads_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    assert not S.hub_offline()
    for on in ("1", "true", "YES"):
        monkeypatch.setenv("HF_HUB_OFFLINE", on)
        assert S.hub_offline()
    for off in ("", "0", "no", "on"):
        monkeypatch.setenv("HF_HUB_OFFLINE", off)
        assert not S.hub_offline()


def test_roost_is_merged_into_prefects_extra_loggers(monkeypatch: pytest.MonkeyPatch) -> None:
    for before, after in ((None, "roost"), ("", "roost"), ("httpx", "httpx,roost"), (" a , roost,b", "a,roost,b")):
        if before is None:
            monkeypatch.delenv("PREFECT_LOGGING_EXTRA_LOGGERS", raising=False)
        else:
            monkeypatch.setenv("PREFECT_LOGGING_EXTRA_LOGGERS", before)
        S.log_roost_through_prefect()
        assert S.environment().prefect_logging_extra_loggers == after
        S.log_roost_through_prefect()  # twice: the same
        assert S.environment().prefect_logging_extra_loggers == after


def test_child_env_and_the_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_secret_for_the_parent")
    monkeypatch.setenv("ROOST_TEST_CHILD", "1")
    child = S.child_env()
    assert child["HF_TOKEN"] == "hf_secret_for_the_parent" and child["ROOST_TEST_CHILD"] == "1"
    child["ROOST_TEST_CHILD"] = "changed"  # a copy
    assert S.child_env()["ROOST_TEST_CHILD"] == "1"
    assert "HF_TOKEN" not in S.child_env(without=S.HUB_TOKEN_VARIABLES)
    monkeypatch.setenv("PREFECT_SERVER_ANALYTICS_ENABLED", "")
    S.set_default(S.PREFECT_SERVER_ANALYTICS_ENABLED, "false")  # set (even empty): kept
    assert S.child_env()["PREFECT_SERVER_ANALYTICS_ENABLED"] == ""
    monkeypatch.delenv("PREFECT_SERVER_ANALYTICS_ENABLED")
    S.set_default(S.PREFECT_SERVER_ANALYTICS_ENABLED, "false")
    assert S.child_env()["PREFECT_SERVER_ANALYTICS_ENABLED"] == "false"
    monkeypatch.delenv("PREFECT_SERVER_ANALYTICS_ENABLED")
    monkeypatch.setenv("VLLM_API_KEY", "k-123")
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_API_KEY", "")
    assert S.values_of(S.VLLM_API_KEY, S.PREFECT_API_URL, S.PREFECT_API_KEY) == {"VLLM_API_KEY": "k-123"}
    assert "k-123" in S.secret_values() and len(S.secret_values()) == len(S.SECRET_VARIABLES)
