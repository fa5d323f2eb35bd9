"""The few places roost leans on a library's internals, each in one spot.

Everything else in roost uses public APIs. What is here has no public equivalent (checked against
the versions ``uv.lock`` pins); ``tests/roost/test_compat.py`` asserts that each name still exists
and behaves as relied on, so an upgrade that moves one fails that test by name instead of breaking
a download or the CLI's error handling at run time.

- :data:`click_errors`: the click exceptions typer (>= 0.22) raises, from its vendored copy of
  click (``typer._click``). ``roost.cli`` runs typer with ``standalone_mode=False`` and maps them to
  one ``roost: error:`` line; typer re-exports only ``Exit``/``Abort``.
- :func:`xet_available`: huggingface_hub's own test of whether it downloads Xet-stored files
  through ``hf_xet`` (``hf_xet`` importable and ``HF_HUB_DISABLE_XET`` unset), so roost routes a
  file exactly as ``hf_hub_download`` will.
- :data:`XET_TRANSFER_BAR_MARKER`: ``hf_hub_download(tqdm_class=...)`` is public, but which of the
  bars it opens for a Xet download counts network bytes (not file bytes) is told only by that
  bar's description text.
"""

from __future__ import annotations

from typer._click import exceptions as click_errors

__all__ = ["XET_TRANSFER_BAR_MARKER", "click_errors", "xet_available"]

XET_TRANSFER_BAR_MARKER = "downloading bytes"
"""In the ``desc`` of the bar huggingface_hub's ``xet_get`` opens for network bytes
(``f"{filename}: downloading bytes"``); the other bar counts the file's bytes."""


def xet_available() -> bool:
    """huggingface_hub will fetch Xet-stored files through hf_xet (installed, not disabled).

    Imported here, not at the top: every roost command imports this module, and importing
    huggingface_hub parses ``HF_ENDPOINT`` (an unusable one would fail before roost could say why)."""
    from huggingface_hub.utils._runtime import is_xet_available as _hf_is_xet_available

    return bool(_hf_is_xet_available())
