"""Where a run reads the Hub: ``HF_ENDPOINT`` (else huggingface.co), or the demo's local mirror."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from roost.profiles import ModelProfile
from tasks.local_hub import local_hub_task


@contextlib.contextmanager
def hub_source(prof: ModelProfile) -> Iterator[str | None]:
    """The endpoint the preflight, the download and the evaluation datasets read: None (``HF_ENDPOINT``,
    else huggingface.co), or for the embedded demo the local mirror serving its generated checkpoint,
    stopped on exit."""
    if not prof.demo:
        yield None
        return
    hub = local_hub_task(prof)
    try:
        yield hub.endpoint
    finally:
        hub.stop()
