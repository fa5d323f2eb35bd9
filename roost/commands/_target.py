"""What ``roost audit`` and ``roost plan`` read: a checkpoint directory, or a repository on the Hub.

``TARGET`` is a directory, or ``hf://OWNER/NAME[@REVISION]`` for a preflight over HTTP (config, index
and shard headers; no weight byte) — :func:`roost.hub.preflight.preflight`. With no target,
``--profile P`` reads that profile's repository and revision from the Hub with its file patterns;
the embedded demo profile's repository is generated and served from its local mirror for the
command's duration. The Hub token by roost's one precedence, as in the download stage
(``blocks.secrets.hub_token``): the profile's Secret block when it names one, else ``HF_TOKEN``, else
``HUGGING_FACE_HUB_TOKEN``, else the stored login.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from roost.errors import UserError

if TYPE_CHECKING:
    from roost.hosts import HostProfile
    from roost.hub.preflight import HubRef
    from roost.plan.inputs import PlanInputs
    from roost.plan.report import AuditReport
    from roost.profiles import ModelProfile

HUB_SCHEME = "hf://"
"""What starts a Hub target (``roost.hub.preflight.SCHEME``, its ``is_hub_url``): tested equal, named here so that
auditing a directory never imports the Hub's client."""

NO_TARGET = (
    "give a checkpoint directory or hf://OWNER/NAME[@REVISION] to read from the Hub, "
    "or --profile P to read that profile's repository from the Hub"
)


def audit_target(target: str | None, prof: ModelProfile | None, host: HostProfile,
                 inputs: PlanInputs | None = None) -> AuditReport:
    """The audit report of ``target`` (or of ``prof``'s repository on the Hub) for ``host``, as ``inputs`` (a
    profile's plan inputs: its served name and window) serve it; None: the directory's name, the native window."""
    if target is not None and not target.startswith(HUB_SCHEME):  # a directory: the Hub's client stays unloaded
        from roost.plan.report import audit_for_host

        return audit_for_host(Path(target), host, inputs=inputs)
    from roost.hub.preflight import HubRef, parse_hub_url

    if target is None:
        if prof is None:
            raise UserError(NO_TARGET)
        return hub_audit(HubRef(repo_id=prof.repo_id, revision=prof.revision), prof, host, inputs)
    return hub_audit(parse_hub_url(target), prof, host, inputs)


def hub_audit(ref: HubRef, prof: ModelProfile | None, host: HostProfile, inputs: PlanInputs | None = None) -> AuditReport:
    """Preflight ``ref`` and audit what it read for ``host`` (as ``inputs`` serve it: :func:`audit_target`)."""
    from roost.hub.preflight import preflight
    from roost.plan.report import audit_for_host

    with _demo_endpoint(prof, ref.repo_id) as endpoint:
        pf = preflight(
            ref,
            endpoint=endpoint,
            token=_token(prof),
            allow_patterns=list(prof.allow_patterns) if prof is not None else None,
            ignore_patterns=list(prof.ignore_patterns) if prof is not None else None,
        )
    report = audit_for_host(pf.files, host, inputs=inputs)
    return report.from_hub(pf.repo_id, pf.commit, pf.bytes_fetched)


@contextlib.contextmanager
def _demo_endpoint(prof: ModelProfile | None, repo_id: str) -> Iterator[str | None]:
    """The demo profile's local mirror while reading its repository; None (HF_ENDPOINT) otherwise."""
    if prof is None or not prof.demo or repo_id != prof.repo_id:
        yield None
        return
    from roost.demo.hub import demo_hub

    mirror, _ = demo_hub(prof)
    try:
        yield mirror.endpoint
    finally:
        mirror.stop()


def _token(prof: ModelProfile | None) -> str | None:
    """The Hub token by the one precedence when the profile names a Secret block; None otherwise, and the
    preflight takes the rest of the same order (``HF_TOKEN``...) without loading Prefect."""
    if prof is None or not prof.hf_token_secret:
        return None
    from blocks.secrets import hub_token  # Prefect's client: only for a named Secret block

    return hub_token(prof.hf_token_secret)
