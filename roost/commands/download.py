"""``roost download REPO_ID [--revision REV] [--local-dir DIR] [--json]``: fetch and verify a checkpoint.

Exit 0 when every file verified (a file found changed since roost verified it is set aside under
``.roost/corrupt/`` and fetched again, one line on stderr naming it), 1 when a file as fetched does not
match the Hub's listing (the file named on stderr), a server stating or sending another size than its
listing, or a Hub that stayed unreachable (a refused connection is tried 3 times, about 2 s, when the
endpoint never answered), 2 for unusable input (unknown repo, bad revision, no access, no space, an
unusable --local-dir, HF_ENDPOINT or HF_TOKEN, a Hub answer that is not one).
``HF_ENDPOINT`` picks the Hub (default huggingface.co); ``HF_TOKEN`` the token.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from roost.commands._common import echo_json, user_errors
from roost.errors import UserError
from roost.settings import checkpoint_dir


def register(app: typer.Typer) -> None:
    app.command(
        "download",
        help="Download a checkpoint from the Hub (HF_ENDPOINT, HF_TOKEN honoured) and verify every file.",
    )(user_errors(download))


def download(
    repo_id: Annotated[str, typer.Argument(help="Repository on the Hub, ORG/NAME.")],
    revision: Annotated[str, typer.Option("--revision", help="Branch, tag or commit sha.")] = "main",
    local_dir: Annotated[
        Path | None,
        typer.Option("--local-dir", help="Where the files go (default $ROOST_HOME/models/ORG--NAME)."),
    ] = None,
    json_output: Annotated[bool, typer.Option("--json", help="Print the result as JSON on stdout.")] = False,
) -> None:
    # Imported here, not at module level: every roost command pays the CLI's start time, and
    # huggingface_hub and httpx (imported by roost.hub.snapshot) are only needed when downloading.
    from roost.hub.progress import DownloadProgress
    from roost.hub.snapshot import DownloadSpec, download_and_verify
    from roost.progress import terminal_progress

    try:
        spec = DownloadSpec(repo_id=repo_id, revision=revision)
    except ValidationError as exc:
        raise UserError(
            "; ".join(str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())
        ) from None
    # download_and_verify checks HF_ENDPOINT, HF_TOKEN and the directory (a file, not writable, too
    # long) before it asks the Hub anything: each is one line, exit 2
    target = local_dir if local_dir is not None else checkpoint_dir(spec.repo_id)

    _log_to_stderr()

    # bars on a terminal; piped or in CI, a line every 10 s or 10 %
    terminal = terminal_progress(f"{spec.repo_id}@{spec.revision}", unit="bytes")

    def show(p: DownloadProgress) -> None:
        terminal.update(p.bytes_done, p.bytes_total, phase=p.phase, rate=p.rate_bps, eta_s=p.eta_s,
                        status=f"files {p.files_done}/{p.files_total}")

    with terminal:
        result = download_and_verify(spec, target, progress=show, progress_interval=1.0)
    if json_output:
        echo_json(result)
    else:
        typer.echo(result.summary())


def _log_to_stderr() -> None:
    """roost's INFO lines (plan, resume, retries, the cache line) on stderr; HTTP client chatter off."""
    logger = logging.getLogger("roost")
    if not any(getattr(h, "_roost_cli", False) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("roost: %(message)s"))
        handler._roost_cli = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    for noisy in ("httpx", "httpx2", "huggingface_hub"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
