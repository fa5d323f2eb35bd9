"""roost._compat: every library internal roost relies on still exists and behaves as relied on.

A failure here names the library change to adapt to (after `uv lock --upgrade`), before a download
or the CLI's error mapping breaks at run time.
"""

from __future__ import annotations

import importlib.util
import inspect

import pytest
import typer
from huggingface_hub import constants, file_download, hf_hub_download

from roost import _compat


def _typer_app() -> typer.Typer:
    app = typer.Typer(no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)

    @app.command()
    def hello(count: int = 1) -> None:
        """Say hello."""

    @app.command()
    def bye() -> None:
        """Say bye."""

    return app


def test_typer_raises_the_click_exceptions_roost_cli_catches() -> None:
    errors = _compat.click_errors
    assert issubclass(errors.UsageError, errors.ClickException)
    app = _typer_app()
    with pytest.raises(errors.NoArgsIsHelpError):
        app(args=[], prog_name="t", standalone_mode=False)
    with pytest.raises(errors.UsageError) as caught:
        app(args=["hello", "--count", "many"], prog_name="t", standalone_mode=False)
    assert caught.value.exit_code == 2
    assert "--count" in caught.value.format_message()
    assert caught.value.ctx is not None and caught.value.ctx.command_path == "t hello"


def test_xet_available_is_hf_xet_installed_and_not_disabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", False)
    assert _compat.xet_available() is (importlib.util.find_spec("hf_xet") is not None)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)
    assert _compat.xet_available() is False


def test_xet_download_names_its_network_bar_with_the_marker() -> None:
    """byte_counting_tqdm tells the network-bytes bar from the file-bytes bar by this text."""
    assert "tqdm_class" in inspect.signature(hf_hub_download).parameters
    source = inspect.getsource(file_download.xet_get)
    assert f'transfer_desc=f"{{displayed_filename}}: {_compat.XET_TRANSFER_BAR_MARKER}"' in source
    assert "reconstructing file" in source and _compat.XET_TRANSFER_BAR_MARKER not in "reconstructing file"


def test_filter_repo_objects_stays_public() -> None:
    """roost.hub.snapshot imports it from huggingface_hub.utils (public, listed in its lazy __all__)."""
    from huggingface_hub import utils

    assert "filter_repo_objects" in utils.__all__
    picked = utils.filter_repo_objects(["a.json", "b.bin", "c/d.json"], allow_patterns=["*.json"], ignore_patterns=["c/*"])
    assert list(picked) == ["a.json"]
